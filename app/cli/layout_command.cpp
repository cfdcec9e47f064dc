// `rematlab-cli layout`: how to train a model on a cluster, fastest within memory.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>

#include "checkpoint/checkpoint_policy.h"
#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/expert_load_options.h"
#include "cli/layout_text.h"
#include "cli/local_gpu.h"
#include "cli/model_options.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "estimate/architecture.h"
#include "layout/layout_json.h"
#include "layout/layout_rules.h"
#include "layout/layout_search.h"
#include "run/pipeline_config.h"

namespace rematlab::cli {
namespace {

// Whether `config` is another model than the named one. The sequence is the layout's to choose:
// only another shape makes the model another one.
bool reshapes(const std::string& model, const ModelConfig& config) {
  ModelConfig named = estimate::architecture_model_config(model);
  named.seq_len = config.seq_len;
  return estimate::parameter_count(estimate::from_model_config(named)) !=
             estimate::parameter_count(estimate::from_model_config(config)) ||
         named.family != config.family || named.layers != config.layers ||
         named.heads != config.heads || named.key_value_heads() != config.key_value_heads() ||
         named.attention != config.attention || named.dropout != config.dropout ||
         named.qkv_bias != config.qkv_bias || named.qk_norm != config.qk_norm ||
         named.head_width != config.head_width || named.sliding_window != config.sliding_window ||
         !(named.moe == config.moe) ||
         estimate::from_model_config(named).loss_chunks !=
             estimate::from_model_config(config).loss_chunks;
}

struct LayoutOptions {
  std::string model;
  ModelOptions shape;
  std::string gpu;
  std::string device;  // with --gpu local
  std::string db;      // with --gpu local: the runs database of its kept peak
  std::string gpu_memory;
  std::optional<double> peak_flops;
  std::optional<double> efficiency;
  std::optional<double> memory_bandwidth;
  std::optional<double> intra_node_bandwidth;
  std::optional<double> inter_node_bandwidth;
  std::optional<double> collective_latency;
  std::optional<double> intra_node_latency;
  std::optional<double> inter_node_latency;
  bool no_overlap = false;
  int64_t gpus = 0;
  std::optional<int64_t> gpus_per_node;
  std::string host_memory;
  std::optional<int64_t> global_batch;
  std::optional<int64_t> global_batch_tokens;
  std::string precision = "bf16";
  bool fp32_gradients = false;
  double fragmentation = 0.05;
  std::optional<std::string> bucket_size;  // bytes of the planned gradients
  std::string activation_model = "engine";
  std::optional<int64_t> tp, pp, vp, cp, dp, ep, micro_batch, zero;
  ExpertLoadOptions expert_loads;
  bool sequence_parallel = false;
  bool no_sequence_parallel = false;
  std::string checkpoint;
  std::optional<std::string> pp_split;  // a list, or "balanced"
  std::string offload;
  int64_t top = 5;
  bool runnable_here = false;
  bool json = false;

  layout::GpuKind resolve_gpu(const estimate::Architecture& arch) const {
    if (peak_flops && !(std::isfinite(*peak_flops) && *peak_flops > 0.0)) {
      throw InvalidInput("--peak-flops", "must be a positive FLOP/s figure such as 989e12");
    }
    layout::GpuKind kind;
    if (gpu == "local") {
      LocalMeasures given;
      given.peak = peak_flops.value_or(0.0);
      given.bandwidth_given = memory_bandwidth.has_value();
      given.efficiency_given = efficiency.has_value();
      kind = local_gpu_kind(device.empty() ? default_local_device() : device,
                            parse_precision(precision), db, arch, given);
    } else if (!device.empty() || !db.empty()) {
      throw InvalidInput(device.empty() ? "--db" : "--device",
                         "describes the local device: give it with --gpu local");
    } else if (!gpu.empty()) {
      kind = layout::gpu_kind(gpu);
    } else if (gpu_memory.empty() || !peak_flops) {
      throw InvalidInput("--gpu", "name a GPU (" + layout::gpu_names() +
                                      ") or describe one with --gpu-memory and --peak-flops");
    } else {
      // Another GPU: what is not given is a PCIe card's.
      kind.name = "custom";
      kind.description = "custom GPU";
      kind.memory_bandwidth = 1000e9;
      kind.intra_node_bandwidth = kind.inter_node_bandwidth = kind.host_link_bandwidth = 25e9;
      kind.gpus_per_node = 8;
      kind.host_memory_bytes = int64_t{1024} << 30;
      kind.matmul_efficiency = 0.6;
      kind.intra_node_step_latency = layout::kPcieStepLatency;
    }
    apply_overrides(kind);
    return kind;
  }

  // The figures given beside --gpu replace its own; each is checked here.
  void apply_overrides(layout::GpuKind& kind) const {
    if (!gpu_memory.empty()) kind.memory_bytes = parse_byte_size(gpu_memory, "--gpu-memory");
    if (peak_flops) kind.peak_bf16 = kind.peak_fp32 = *peak_flops;
    auto bandwidth = [](const std::optional<double>& value, const char* flag, double& into) {
      if (!value) return;
      if (!(std::isfinite(*value) && *value > 0.0)) {
        throw InvalidInput(flag, "must be a positive bytes/s figure such as 300e9");
      }
      into = *value;
    };
    if (memory_bandwidth && !(*memory_bandwidth >= 1e6 && std::isfinite(*memory_bandwidth))) {
      throw InvalidInput("--memory-bandwidth", "must be at least 1e6 bytes/s, such as 3350e9");
    }
    bandwidth(memory_bandwidth, "--memory-bandwidth", kind.memory_bandwidth);
    bandwidth(intra_node_bandwidth, "--intra-node-bandwidth", kind.intra_node_bandwidth);
    bandwidth(inter_node_bandwidth, "--inter-node-bandwidth", kind.inter_node_bandwidth);
    auto latency = [](const std::optional<double>& value, const char* flag, double& into) {
      if (!value) return;
      if (!(std::isfinite(*value) && *value >= 0.0 && *value <= 1.0)) {
        throw InvalidInput(flag, "must be seconds from 0 to 1, such as 8.4e-6");
      }
      into = *value;
    };
    latency(collective_latency, "--collective-latency", kind.collective_latency);
    latency(intra_node_latency, "--intra-node-latency", kind.intra_node_step_latency);
    latency(inter_node_latency, "--inter-node-latency", kind.inter_node_step_latency);
    if (no_overlap) kind.overlaps_communication = false;
  }

  int64_t resolve_global_batch(int64_t seq_len) const {
    if (global_batch && global_batch_tokens) {
      throw InvalidInput("--global-batch-tokens",
                         "give the batch in sequences or in tokens, not both");
    }
    if (global_batch_tokens) {
      if (*global_batch_tokens % seq_len != 0 || *global_batch_tokens < 1) {
        throw InvalidInput("--global-batch-tokens",
                           std::to_string(*global_batch_tokens) + " is not a whole number of " +
                               std::to_string(seq_len) + "-token sequences");
      }
      return *global_batch_tokens / seq_len;
    }
    if (!global_batch) {
      throw InvalidInput("--global-batch", "give the global batch in sequences (or tokens)");
    }
    return *global_batch;
  }

  layout::FixedDimensions resolve_fixed() const {
    layout::FixedDimensions fixed;
    fixed.tp = tp;
    fixed.pp = pp;
    fixed.vp = vp;
    fixed.cp = cp;
    fixed.dp = dp;
    fixed.ep = ep;
    fixed.micro_batch = micro_batch;
    if (pp_split) {
      fixed.pp_split_balanced = *pp_split == kBalancedSplit;
      if (!fixed.pp_split_balanced) fixed.pp_split = parse_pp_split(*pp_split);
      if (!fixed.pp_split_balanced && fixed.pp_split.empty()) {
        throw InvalidInput("--pp-split", "is empty: give the blocks of each chunk (e.g. 9,3) or " +
                                             std::string(kBalancedSplit));
      }
    }
    if (zero && (*zero < 0 || *zero > 3)) {
      throw InvalidInput("--zero", "must be 0, 1, 2 or 3, got " + std::to_string(*zero));
    }
    if (zero) fixed.zero = static_cast<int>(*zero);
    if (sequence_parallel && no_sequence_parallel) {
      throw InvalidInput("--no-sequence-parallel", "contradicts --sequence-parallel");
    }
    if (sequence_parallel) fixed.sp = true;
    if (no_sequence_parallel) fixed.sp = false;
    // validate() says what the planner cannot evaluate (stage_policies.h), knowing the degrees.
    if (!checkpoint.empty()) fixed.checkpoint = CheckpointPolicy::parse(checkpoint).text();
    if (!offload.empty()) fixed.offload = layout::parse_layout_offload(offload);
    return fixed;
  }

  layout::LayoutRequest resolve() const {
    layout::LayoutRequest request;
    const bool imported = !shape.source().empty();
    if (model.empty() && !imported) {
      throw InvalidInput("--model", "name the model to lay out (or give --model-config)");
    }
    ModelConfig config = estimate::architecture_model_config(imported ? "tiny" : model);
    shape.apply(config);
    validate(config);  // before any figure is derived from its sizes
    request.arch = estimate::from_model_config(config);
    estimate::validate(request.arch);  // before any count divides by its sizes
    request.arch.name = imported ? shape.source() : model + (reshapes(model, config) ? "*" : "");
    request.arch.engine_shape = imported || estimate::is_engine_preset(model);
    expert_loads.apply(&request.arch);  // layout::validate checks the loads with --ep
    if (gpus < 1) throw InvalidInput("--gpus", "must be at least 1");
    request.cluster.gpus = gpus;
    request.global_batch = resolve_global_batch(request.arch.seq_len);
    request.precision = parse_precision(precision);
    request.fp32_gradients = fp32_gradients;
    request.fragmentation = fragmentation;
    if (bucket_size) request.set_bucket_size(*bucket_size);
    if (activation_model == "megatron") {
      request.activation_model = layout::ActivationModel::kMegatron;
    } else if (activation_model != "engine") {
      throw InvalidInput("--activation-model",
                         "unknown model '" + activation_model + "' (use engine or megatron)");
    }
    if (efficiency) {
      if (!(*efficiency >= layout::LayoutRequest::kMinMatmulEfficiency && *efficiency <= 1.0)) {
        throw InvalidInput("--efficiency", "must be a share of peak in [0.001, 1]");
      }
      request.matmul_efficiency = *efficiency;
    }
    request.top = top;
    request.engine_only = runnable_here;
    request.fixed = resolve_fixed();
    // --gpu local may measure its peak: every other flag is checked first, on a stand-in GPU.
    if (gpu == "local") {
      layout::LayoutRequest checked = request;
      layout::GpuKind stand_in = layout::gpu_kind("h100-sxm");
      apply_overrides(stand_in);
      place_on(stand_in, checked);
      layout::validate(checked);
    }
    place_on(resolve_gpu(request.arch), request);
    layout::validate(request);
    return request;
  }

  void place_on(const layout::GpuKind& kind, layout::LayoutRequest& request) const {
    request.cluster.gpu = kind;
    request.cluster.gpus_per_node = gpus_per_node.value_or(kind.gpus_per_node);
    request.cluster.host_memory_bytes = host_memory.empty()
                                            ? kind.host_memory_bytes
                                            : parse_byte_size(host_memory, "--host-memory");
  }
};

// The flags that name or describe the GPU and its links.
void add_gpu_options(CLI::App& command, LayoutOptions& options) {
  command.add_option("--gpu", options.gpu,
                     "GPU kind: " + layout::gpu_names() +
                         ", or local (this machine's device: its memory, and its matmul peak, "
                         "element-wise bandwidth and matmul efficiency measured)");
  command.add_option("--device", options.device,
                     "With --gpu local: cpu, cuda or cuda:N (default: cuda when present)");
  command.add_option("--db", options.db,
                     "With --gpu local: the runs database whose peak (`peak --save`) to use "
                     "(default: the usual one)");
  command.add_option("--gpu-memory", options.gpu_memory, "Memory per GPU (replaces the kind's)");
  command.add_option("--peak-flops", options.peak_flops,
                     "Dense peak FLOP/s in the training precision (replaces the kind's)");
  command.add_option("--efficiency", options.efficiency,
                     "Share of peak the model's matmuls reach (default: the kind's; measured at "
                     "the model's shapes with --gpu local)");
  command.add_option("--memory-bandwidth", options.memory_bandwidth,
                     "Bytes/s the GPU's element-wise work and optimizer update stream through "
                     "its memory (replaces the kind's)");
  command.add_option("--intra-node-bandwidth", options.intra_node_bandwidth,
                     "Bytes/s per GPU and direction inside a node");
  command.add_option("--inter-node-bandwidth", options.inter_node_bandwidth,
                     "Bytes/s per GPU and direction between nodes");
  command.add_option("--collective-latency", options.collective_latency,
                     "Seconds each collective costs whatever its size (default 8.4e-6)");
  command.add_option("--intra-node-latency", options.intra_node_latency,
                     "Seconds per ring step inside a node (default 3.4e-6 NVLink, 5.7e-6 PCIe)");
  command.add_option("--inter-node-latency", options.inter_node_latency,
                     "Seconds per ring step between nodes (default 9.6e-6)");
  command.add_flag("--no-overlap", options.no_overlap,
                   "Nothing hides collectives behind the compute (a CPU whose cores run both; "
                   "--gpu local --device cpu sets it). With --runnable-here it also means the "
                   "engine's collectives on Gloo, as it runs them on the CPU");
}

// The layout's dimensions and settings a search keeps fixed when given.
void add_dimension_options(CLI::App& command, LayoutOptions& options) {
  command.add_option("--tp", options.tp, "Tensor-parallel degree (searched when absent)");
  command.add_option("--pp", options.pp, "Pipeline stages");
  command.add_option("--virtual-stages", options.vp, "Model chunks per pipeline rank");
  command.add_option("--cp", options.cp, "Context-parallel degree");
  command.add_option("--dp", options.dp, "Data-parallel degree");
  command.add_option("--ep", options.ep,
                     "With experts: data × context ranks that split each set of experts "
                     "(searched over those dividing them and the experts when absent)");
  options.expert_loads.add_to(command, "activations, all-to-all and expert compute");
  command.add_flag("--sequence-parallel", options.sequence_parallel,
                   "Keep sequence parallelism on (searched when neither flag is given)");
  command.add_flag("--no-sequence-parallel", options.no_sequence_parallel,
                   "Keep sequence parallelism off");
  command.add_option("--zero", options.zero, "ZeRO stage 0-3 over the data-parallel ranks");
  command.add_option("--micro-batch", options.micro_batch, "Sequences per micro-batch");
  command.add_option("--pp-split", options.pp_split,
                     "The blocks of each model chunk in chain order (e.g. 9,3; with --pp), or "
                     "balanced: every pipeline searched split by its blocks' predicted times "
                     "(default: the engine's rule)");
  command.add_option("--checkpoint", options.checkpoint,
                     "none, selective or every:K (else chosen per stage); with --pp and "
                     "--virtual-stages sublayer:, segments: or stages: (what plan: chose)");
  command.add_option("--offload", options.offload, "none, optimizer, parameters or activations");
}

}  // namespace

Command add_layout_command(CLI::App& app, const std::atomic<bool>& cancel) {
  auto* command = app.add_subcommand(
      "layout",
      "How to train a model on a cluster: parallelism, ZeRO, offload, micro-batch "
      "and checkpointing, fastest within memory");
  auto options = std::make_shared<LayoutOptions>();
  std::string models;
  for (const auto& name : estimate::architecture_names()) {
    models += (models.empty() ? "" : ", ") + name;
  }
  command->add_option("--model,--preset", options->model, "Named shape: " + models);
  options->shape.add_to(*command);
  add_gpu_options(*command, *options);
  command->add_option("--gpus", options->gpus, "GPUs in all")->required();
  command->add_option("--gpus-per-node", options->gpus_per_node,
                      "GPUs per node (default: the kind's usual server, 8 or 4)");
  command->add_option("--host-memory", options->host_memory, "Host memory per node");
  command->add_option("--global-batch", options->global_batch, "Sequences per optimizer step");
  command->add_option("--global-batch-tokens", options->global_batch_tokens,
                      "Tokens per optimizer step (instead of --global-batch)");
  command->add_option("--precision", options->precision, "bf16, fp16 or fp32")
      ->capture_default_str();
  command->add_flag("--fp32-gradients", options->fp32_gradients,
                    "Gradients accumulated in fp32 (Megatron-LM's default)");
  command
      ->add_option("--fragmentation", options->fragmentation,
                   "Allowance for the allocator's fragmentation, a share of what is allocated")
      ->capture_default_str();
  command->add_option("--bucket-size", options->bucket_size,
                      "Gradients a data rank reduces at once, in bytes of the planned gradients "
                      "(16-bit unless fp32: run's --bucket-size counts the engine's fp32 ones; "
                      "e.g. 25MiB; default 40M values, Megatron-LM's)");
  command
      ->add_option("--activation-model", options->activation_model,
                   "engine (RematLab's accounting) or megatron (Korthikanti et al.'s terms)")
      ->capture_default_str();
  add_dimension_options(*command, *options);
  command->add_option("--top", options->top, "Layouts to list")->capture_default_str();
  command->add_flag("--runnable-here", options->runnable_here,
                    "Only layouts RematLab's engine runs (no context parallelism, pipelines "
                    "without sharded parameters or offload, model states on the GPUs)");
  command->add_flag("--json", options->json, "Print one JSON object as the last line of stdout");
  return {command, [options, &cancel]() {
            const layout::LayoutRequest request = options->resolve();
            layout::LayoutAnswer answer;
            try {
              answer = layout::search_layouts(request, &cancel);
            } catch (const layout::SearchCancelled&) {
              std::cerr << "rematlab-cli: stopped before the search was done" << std::endl;
              return 130;
            }
            if (options->json) {
              print_json_line(layout::to_json(request, answer));
            } else {
              std::cout << layout_to_text(request, answer);
            }
            return 0;
          }};
}

}  // namespace rematlab::cli
