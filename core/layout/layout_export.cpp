#include "layout/layout_export.h"

#include <algorithm>

#include "checkpoint/checkpoint_policy.h"
#include "common/decimal_text.h"
#include "layout/layout_rules.h"
#include "layout/stage_policies.h"
#include "model/model_config.h"

namespace rematlab::layout {
namespace {

// Whether every chunk in [first, last) holds as many blocks (true of none).
bool equal_chunks(std::vector<int64_t>::const_iterator first,
                  std::vector<int64_t>::const_iterator last) {
  return first >= last || std::all_of(first, last, [first](int64_t n) { return n == *first; });
}

std::string number(int64_t value) { return std::to_string(value); }

int64_t every_interval(const std::string& policy) {
  return CheckpointPolicy::parse(policy).plan_for(1 << 20, 0.0).interval;
}

// What the other tools set for a stage: its policy where they have it, else every:1 (full
// recomputation: none of them recomputes a list of sublayers, nor chunks of a stage apart).
std::string settable_policy(const std::string& policy) {
  const bool one = policy.find('/') == std::string::npos;
  return one && is_searched_policy(CheckpointPolicy::parse(policy)) ? policy : "every:1";
}

// The policy the exports name: the stages' own when they agree, else the most recomputing one
// (a tool with one setting for all stages must fit the stage that needs the most).
std::string uniform_policy(const Layout& layout, std::vector<std::string>& unsaid) {
  std::string chosen =
      settable_policy(layout.stage_checkpoints.empty() ? "none" : layout.stage_checkpoints[0]);
  // none < selective < every:K, and among every:K the larger K, compared as numbers: stages
  // choose the smallest K that fits them, so a larger one is what a stage with more micro-batches
  // in flight needed (it keeps fewer inputs of each).
  auto weight = [](const std::string& policy) -> std::pair<int, int64_t> {
    if (policy == "none") return {0, 0};
    if (policy == "selective") return {1, 0};
    return {2, every_interval(policy)};
  };
  bool mixed = false;
  bool unsettable = false;
  for (const auto& policy : layout.stage_checkpoints) {
    mixed = mixed || policy != layout.stage_checkpoints.front();
    unsettable = unsettable || settable_policy(policy) != policy;
    if (weight(settable_policy(policy)) > weight(chosen)) chosen = settable_policy(policy);
  }
  if (mixed || unsettable) {
    unsaid.push_back(std::string(mixed ? "a policy per pipeline stage (" : "the policy (") +
                     layout.checkpoint_text() + "): " + chosen + " is given for all");
  }
  return chosen;
}

// Fine-tuning with adapters is another program in each of them (NeMo's or torchtune's PEFT, not
// Megatron-LM's pretrain_gpt.py, torchtitan's or a plain DeepSpeed config).
void say_fine_tuning(const estimate::Architecture& arch, std::vector<std::string>& unsaid) {
  if (arch.lora.enabled()) {
    unsaid.push_back("LoRA fine-tuning (rank " + number(arch.lora.rank) + " on " +
                     lora_targets_text(arch.lora.targets) + ", the base in " +
                     to_string(arch.lora.base) + "): not a setting of this tool");
  }
}

// The window lives in the other tools' model code (Megatron-LM's spec, torchtitan's model
// args, the DeepSpeed script's model), not in the settings exported here.
void say_window(const estimate::Architecture& arch, std::vector<std::string>& unsaid) {
  if (arch.sliding_window > 0) {
    unsaid.push_back("a sliding window of " + number(arch.sliding_window) +
                     " tokens: set in the model code");
  }
}

// A mixture of experts as Megatron-LM's MoE layer takes it, its tokens dispatched by all-to-all.
std::string megatron_expert_arguments(const estimate::Architecture& arch, const Layout& layout,
                                      std::vector<std::string>& unsaid) {
  const MoeOptions& moe = arch.moe;
  std::string a = " --num-experts " + number(moe.experts) + " --moe-router-topk " +
                  number(moe.experts_per_token) + " --moe-ffn-hidden-size " +
                  number(arch.expert_hidden) +
                  " --moe-token-dispatcher-type alltoall --moe-grouped-gemm";
  // Megatron-LM's softmax follows the top-k (weights that sum to 1) unless told pre-softmax,
  // which it requires at top-1 to start at all: there the one weight is the probability, not 1.
  if (!moe.normalise_weights || moe.experts_per_token == 1) a += " --moe-router-pre-softmax";
  if (moe.normalise_weights && moe.experts_per_token == 1) {
    unsaid.push_back(
        "top-1 routing weighted 1 (Megatron-LM's top-1 needs --moe-router-pre-softmax, which "
        "weights the expert by its probability)");
  }
  if (moe.balance_coefficient > 0.0) {
    a += " --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff " +
         decimal_text(moe.balance_coefficient);
  }
  if (moe.capacity_factor > 0.0) {
    a += " --moe-expert-capacity-factor " + decimal_text(moe.capacity_factor);
  }
  if (moe.shared_expert_hidden > 0) {
    // Its sigmoid gate of the token, as Qwen 2 MoE's.
    a += " --moe-shared-expert-intermediate-size " + number(moe.shared_expert_hidden) +
         " --moe-shared-expert-gate";
  }
  if (layout.ep > 1) a += " --expert-model-parallel-size " + number(layout.ep);
  // Each expert split by width over the tensor ranks, as the plan counts it.
  if (layout.tp > 1) a += " --expert-tensor-parallel-size " + number(layout.tp);
  return a;
}

// The blocks of each stage in Megatron-LM's terms: chunks of one size under virtual stages, or
// the first and last stage's own counts with the middle ones even.
std::string megatron_split_arguments(const estimate::Architecture& arch, const Layout& layout,
                                     std::vector<std::string>& unsaid) {
  std::string a;
  const std::vector<int64_t>& split = layout.split;
  if (layout.vp > 1) {
    a += " --num-layers-per-virtual-pipeline-stage " +
         number((arch.layers + layout.pp * layout.vp - 1) / (layout.pp * layout.vp));
    if (!equal_chunks(split.begin(), split.end())) {
      unsaid.push_back("model chunks of unequal size with virtual stages (" + split_text(split) +
                       ")");
    }
  } else if (layout.pp > 1 && !equal_chunks(split.begin(), split.end())) {
    // Megatron-LM splits what the first and last stage leave evenly over the others.
    if (equal_chunks(split.begin() + 1, split.end() - 1)) {
      a += " --decoder-first-pipeline-num-layers " + number(split.front()) +
           " --decoder-last-pipeline-num-layers " + number(split.back());
    } else {
      unsaid.push_back("a split whose middle stages differ (" + split_text(split) + ")");
    }
  }
  return a;
}

}  // namespace

LayoutExport megatron_arguments(const LayoutRequest& request, const LayoutEvaluation& evaluation) {
  const Layout& layout = evaluation.layout;
  const estimate::Architecture& arch = request.arch;
  LayoutExport out;
  std::string& a = out.text;
  a = "pretrain_gpt.py --num-layers " + number(arch.layers) + " --hidden-size " +
      number(arch.d_model) + " --num-attention-heads " + number(arch.heads) +
      " --ffn-hidden-size " + number(arch.mlp_hidden) + " --seq-length " + number(arch.seq_len) +
      " --max-position-embeddings " + number(arch.seq_len);
  if (arch.kv_heads < arch.heads) {
    a += " --group-query-attention --num-query-groups " + number(arch.kv_heads);
  }
  if (arch.gated_mlp) a += " --swiglu";
  if (arch.rms_norm) a += " --normalization RMSNorm";
  if (arch.rotary) a += " --position-embedding-type rope";
  if (!arch.biases) a += " --disable-bias-linear";
  if (!arch.biases && arch.qkv_bias) a += " --add-qkv-bias";  // Qwen 2's
  if (arch.qk_norm) a += " --qk-layernorm";                   // Qwen 3's
  if (arch.head_width > 0) a += " --kv-channels " + number(arch.head_width);
  if (!arch.tied_head) a += " --untie-embeddings-and-output-weights";
  say_window(arch, out.unsaid);
  say_fine_tuning(arch, out.unsaid);
  if (arch.moe.enabled()) a += megatron_expert_arguments(arch, layout, out.unsaid);
  a += " --tensor-model-parallel-size " + number(layout.tp) + " --pipeline-model-parallel-size " +
       number(layout.pp) + megatron_split_arguments(arch, layout, out.unsaid);
  if (layout.sp) a += " --sequence-parallel";
  if (layout.cp > 1) a += " --context-parallel-size " + number(layout.cp);
  // The planner hides the gradients' reduction behind backward, as this flag does.
  if (layout.zero < 3 && layout.dp * layout.cp > 1) {
    // Its default, max(40M, 1M × data ranks), passes the planner's above 40 data ranks.
    a += " --overlap-grad-reduce --ddp-bucket-size " + number(request.bucket_values);
  }
  if (layout.zero == 1 || layout.zero == 2) a += " --use-distributed-optimizer";
  if (layout.zero == 2) {
    out.unsaid.push_back(
        "ZeRO 2: the distributed optimizer keeps the whole gradient buffer "
        "(ZeRO 1's gradient memory)");
  }
  // FSDP2 refuses Megatron-LM's default fused gradient accumulation.
  if (layout.zero == 3) a += " --use-torch-fsdp2 --no-gradient-accumulation-fusion";
  a += " --micro-batch-size " + number(layout.micro_batch) + " --global-batch-size " +
       number(request.global_batch);
  if (request.precision == Precision::kBf16) a += " --bf16";
  if (request.precision == Precision::kFp16) a += " --fp16";
  if (request.fp32_gradients) a += " --accumulate-allreduce-grads-in-fp32";
  const std::string policy = uniform_policy(layout, out.unsaid);
  if (policy == "selective") {
    a += " --recompute-granularity selective";
  } else if (policy != "none") {
    a += " --recompute-granularity full --recompute-method uniform --recompute-num-layers " +
         number(every_interval(policy));
  }
  // Its host optimizer runs only as the precision-aware one.
  if (layout.offload == Offload::kOptimizer) {
    a += " --optimizer-cpu-offload --use-precision-aware-optimizer";
  }
  if (layout.offload == Offload::kParameters) {
    out.unsaid.push_back("parameters in host memory (ZeRO-Infinity's offload_param)");
  }
  if (layout.offload == Offload::kActivations) {
    out.unsaid.push_back("recomputed segments' inputs in host memory");
  }
  return out;
}

// torchtitan 0.2's job file, the last series that reads one (0.3 takes the same settings as
// --section.key options, its checkpointing mode as a subcommand).
LayoutExport torchtitan_toml(const LayoutRequest& request, const LayoutEvaluation& evaluation) {
  const Layout& layout = evaluation.layout;
  LayoutExport out;
  say_window(request.arch, out.unsaid);
  say_fine_tuning(request.arch, out.unsaid);
  const bool shard = layout.zero == 3;
  if (layout.zero == 1 || layout.zero == 2) {
    out.unsaid.push_back("ZeRO " + number(layout.zero) +
                         ": torchtitan replicates (ZeRO 0) or fully shards (FSDP, ZeRO 3)");
  }
  std::string& t = out.text;
  t = "[parallelism]\n";
  t += "data_parallel_replicate_degree = " + number(shard ? 1 : layout.dp) + "\n";
  t += "data_parallel_shard_degree = " + number(shard ? layout.dp : 1) + "\n";
  t += "tensor_parallel_degree = " + number(layout.tp) + "\n";
  // torchtitan's tensor parallelism always splits the sequence too (0.2's TOML has no switch).
  if (layout.tp > 1 && !layout.sp) {
    out.unsaid.push_back("tensor parallelism without sequence parallelism");
  }
  t += "pipeline_parallel_degree = " + number(layout.pp) + "\n";
  if (layout.pp > 1) {
    t += std::string("pipeline_parallel_schedule = \"") +
         (layout.vp > 1 ? "Interleaved1F1B" : "1F1B") + "\"\n";
    t += "pipeline_parallel_microbatch_size = " + number(layout.micro_batch) + "\n";
    if (layout.vp > 1) {
      t += "pipeline_parallel_layers_per_stage = " +
           number((request.arch.layers + layout.pp * layout.vp - 1) / (layout.pp * layout.vp)) +
           "\n";
    }
    if (!equal_chunks(layout.split.begin(), layout.split.end())) {
      out.unsaid.push_back("stages of unequal size (" + split_text(layout.split) + ")");
    }
  }
  t += "context_parallel_degree = " + number(layout.cp) + "\n";
  // torchtitan draws its expert ranks from its FSDP shards and context ranks: without ZeRO 3
  // only the context ranks can hold them.
  if (layout.ep > 1 && ((shard ? layout.dp : 1) * layout.cp) % layout.ep == 0) {
    t += "expert_parallel_degree = " + number(layout.ep) + "\n";
  } else if (layout.ep > 1) {
    out.unsaid.push_back("EP " + number(layout.ep) + " beyond its fully sharded and context " +
                         "ranks (torchtitan's expert ranks come from those)");
  }
  if (request.arch.moe.enabled()) {
    out.unsaid.push_back("the experts' shape and routing: set by the model's own arguments");
  }
  t += "\n[training]\n";
  t += "local_batch_size = " + number(layout.micro_batch * layout.accum) + "\n";
  t += "global_batch_size = " + number(request.global_batch) + "\n";
  t += "seq_len = " + number(request.arch.seq_len) + "\n";
  t += std::string("mixed_precision_param = \"") +
       (request.precision == Precision::kFp32 ? "float32" : "bfloat16") + "\"\n";
  if (layout.offload == Offload::kOptimizer || layout.offload == Offload::kParameters) {
    t += "enable_cpu_offload = true\n";
    if (!shard) out.unsaid.push_back("host offload without FSDP");
  }
  if (layout.offload == Offload::kActivations) {
    out.unsaid.push_back("recomputed segments' inputs in host memory");
  }
  t += "\n[activation_checkpoint]\n";
  const std::string policy = uniform_policy(layout, out.unsaid);
  if (policy == "none") {
    t += "mode = \"none\"\n";
  } else if (policy == "selective") {
    t += "mode = \"selective\"\nselective_ac_option = \"op\"\n";
  } else if (every_interval(policy) == 1) {
    t += "mode = \"full\"\n";
  } else {
    t += "mode = \"selective\"\nselective_ac_option = \"" + number(every_interval(policy)) + "\"\n";
    out.unsaid.push_back(policy + ": torchtitan's layer option recomputes every " +
                         number(every_interval(policy)) +
                         "th block whole and keeps the others, not segments of " +
                         number(every_interval(policy)) + " blocks");
  }
  return out;
}

LayoutExport deepspeed_json(const LayoutRequest& request, const LayoutEvaluation& evaluation) {
  const Layout& layout = evaluation.layout;
  LayoutExport out;
  say_window(request.arch, out.unsaid);
  say_fine_tuning(request.arch, out.unsaid);
  nlohmann::json config;
  config["train_batch_size"] = request.global_batch;
  config["train_micro_batch_size_per_gpu"] = layout.micro_batch;
  config["gradient_accumulation_steps"] = layout.accum;
  if (request.precision == Precision::kBf16) config["bf16"] = {{"enabled", true}};
  if (request.precision == Precision::kFp16) config["fp16"] = {{"enabled", true}};
  nlohmann::json zero = {{"stage", layout.zero}};
  if (layout.offload == Offload::kOptimizer || layout.offload == Offload::kParameters) {
    zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  }
  if (layout.offload == Offload::kParameters) {
    zero["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
  }
  // The buckets the planner counted (DeepSpeed's default is 5e8 values).
  if (layout.zero == 1 || layout.zero == 2) zero["reduce_bucket_size"] = request.bucket_values;
  config["zero_optimization"] = zero;
  const std::string policy = uniform_policy(layout, out.unsaid);
  config["activation_checkpointing"] = {
      {"partition_activations", layout.sp},
      {"cpu_checkpointing", layout.offload == Offload::kActivations},
      {"contiguous_memory_optimization", false},
      {"synchronize_checkpoint_boundary", false},
      {"profile", false}};
  out.text = config.dump(2);
  out.unsaid.push_back("tensor " + number(layout.tp) + ", pipeline " + number(layout.pp) +
                       " and context " + number(layout.cp) +
                       " degrees: set by the model code (Megatron-DeepSpeed), not the JSON");
  if (!equal_chunks(layout.split.begin(), layout.split.end())) {
    out.unsaid.push_back("the stages' blocks (" + split_text(layout.split) +
                         "): set by the model code's pipeline partition, not the JSON");
  }
  if (request.arch.moe.enabled()) {
    out.unsaid.push_back(layout.ep > 1 ? "the experts over " + number(layout.ep) +
                                             " expert ranks: set by the model code "
                                             "(deepspeed.moe's ep_size)"
                                       : "the experts: set by the model code (deepspeed.moe)");
  }
  if (policy != "none") {
    out.unsaid.push_back("which blocks recompute (" + policy +
                         "): chosen by the model code's calls to deepspeed.checkpointing");
  }
  return out;
}

namespace {

// A mixture of experts' shape as `run` takes it.
std::string expert_flags(const estimate::Architecture& arch) {
  const MoeOptions& moe = arch.moe;
  std::string flags = " --experts " + number(moe.experts) + " --experts-per-token " +
                      number(moe.experts_per_token) + " --expert-hidden " +
                      number(arch.expert_hidden) + " --expert-weights " +
                      (moe.normalise_weights ? "normalised" : "softmax");
  if (moe.shared_expert_hidden > 0) {
    flags += " --shared-expert-hidden " + number(moe.shared_expert_hidden);
  }
  if (moe.balance_coefficient > 0.0) {
    flags += " --balance-coefficient " + decimal_text(moe.balance_coefficient);
  }
  if (moe.capacity_factor > 0.0) {
    flags += " --capacity-factor " + decimal_text(moe.capacity_factor);
  }
  return flags;
}

}  // namespace

std::string rematlab_policy(const Layout& layout, std::vector<std::string>& unsaid) {
  const std::vector<std::string>& chosen = layout.stage_checkpoints;
  if (chosen.empty()) return "none";
  // A segment list names a chunk's own blocks: over more than one chunk only a stages: list
  // says which (the engine plans one policy for all over the whole chain).
  const bool chunks = chosen.size() * static_cast<size_t>(layout.vp) > 1;
  const bool mixed = std::any_of(chosen.begin(), chosen.end(), [&](const std::string& p) {
    return p != chosen.front() || (chunks && settable_policy(p) != p);
  });
  // The engine's stages: lists take every policy the planner evaluates but selective.
  const bool listable = std::none_of(chosen.begin(), chosen.end(),
                                     [](const std::string& p) { return p == "selective"; });
  if (!mixed || !listable) return mixed ? uniform_policy(layout, unsaid) : chosen.front();
  // One policy a model chunk, in chain order: chunk c is stage c mod P's (its c / P-th).
  std::string policy = "stages:";
  const size_t stages = chosen.size();
  for (size_t chunk = 0; chunk < stages * static_cast<size_t>(layout.vp); ++chunk) {
    const std::vector<std::string> own =
        chunk_policies(chosen[chunk % stages], static_cast<size_t>(layout.vp));
    policy += (policy.back() == ':' ? "" : "/") + own.at(chunk / stages);
  }
  return policy;
}

LayoutExport rematlab_run(const LayoutRequest& request, const LayoutEvaluation& evaluation) {
  const Layout& layout = evaluation.layout;
  LayoutExport out;
  const estimate::Architecture& arch = request.arch;
  for (const auto& lack : evaluation.engine_lacks) out.unsaid.push_back(lack);
  const std::string shard = to_string(engine_shard(layout));
  if (!arch.engine_shape) out.unsaid.push_back("the shape of " + arch.name + " (estimates only)");
  if (!out.unsaid.empty()) return out;
  std::string& r = out.text;
  r = "rematlab-cli run";
  const auto& presets = preset_names();
  if (std::find(presets.begin(), presets.end(), arch.name) != presets.end()) {
    r += " --preset " + arch.name;
  } else {
    r += std::string(" --arch ") + (arch.rotary ? "llama" : "gpt") + " --layers " +
         number(arch.layers) + " --d-model " + number(arch.d_model) + " --heads " +
         number(arch.heads) + " --kv-heads " + number(arch.kv_heads) + " --mlp-hidden " +
         number(arch.mlp_hidden) + " --vocab " + number(arch.vocab) + " --tie-head " +
         (arch.tied_head ? "true" : "false");
    if (arch.qkv_bias) r += " --qkv-bias true";
    if (arch.qk_norm) r += " --qk-norm true";
    if (arch.head_width > 0) r += " --head-dim " + number(arch.head_width);
    if (arch.sliding_window > 0) r += " --sliding-window " + number(arch.sliding_window);
    if (arch.loss_chunks != 1) r += " --loss-chunks " + number(arch.loss_chunks);
    if (arch.attention != AttentionKind::kSdpa) r += " --attention " + to_string(arch.attention);
    if (arch.dropout > 0.0) r += " --dropout " + decimal_text(arch.dropout);
    if (arch.moe.enabled()) r += expert_flags(arch);
  }
  if (arch.lora.enabled()) {
    r += " --finetune lora --lora-rank " + number(arch.lora.rank) + " --lora-alpha " +
         decimal_text(arch.lora.alpha) + " --lora-targets " + lora_targets_text(arch.lora.targets) +
         " --base-precision " + to_string(arch.lora.base);
  }
  r += " --seq-len " + number(arch.seq_len) + " --nproc " +
       number(layout.tp * layout.pp * layout.dp) + " --tp " + number(layout.tp);
  if (layout.ep > 1) r += " --ep " + number(layout.ep);
  if (layout.pp > 1) r += " --pp " + number(layout.pp);
  if (layout.vp > 1) r += " --virtual-stages " + number(layout.vp);
  if (layout.pp > 1 && layout.split != rule_split(request.arch.layers, layout.pp, layout.vp)) {
    r += " --pp-split " + split_text(layout.split);
  }
  if (layout.sp) r += " --sequence-parallel";
  if (shard != "none") r += " --shard " + shard;
  r += " --batch " + number(layout.micro_batch) + " --accum " + number(layout.accum) +
       " --precision " + to_string(request.precision) + " --checkpoint " +
       rematlab_policy(layout, out.unsaid);
  if (layout.offload == Offload::kActivations) r += " --offload host";
  if (layout.dp > 1) r += " --bucket-size " + number(request.engine_bucket_bytes());
  return out;
}

nlohmann::json export_json(const LayoutRequest& request, const LayoutEvaluation& layout) {
  nlohmann::json json;
  auto add = [&json](const char* name, const LayoutExport& out) {
    json[name] = {{"text", out.text}, {"unsaid", out.unsaid}};
  };
  add("megatron", megatron_arguments(request, layout));
  add("torchtitan", torchtitan_toml(request, layout));
  add("deepspeed", deepspeed_json(request, layout));
  add("rematlab", rematlab_run(request, layout));
  return json;
}

}  // namespace rematlab::layout
