#include "cli/run_options.h"

#include "checkpoint/checkpoint_policy.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "model/model_config.h"

namespace rematlab::cli {

void RunOptions::add_to(CLI::App& command, const std::string& budget_help) {
  std::string presets;
  for (const auto& name : preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  command.add_option("--preset", preset_, "Model preset: " + presets)->capture_default_str();
  model_.add_to(command);
  command.add_option("--batch", batch_, "Micro-batch size (default 8)");
  command.add_option("--accum", accum_, "Micro-batches per optimizer step (default 1)");
  command.add_option("--steps", steps_, "Optimizer steps (default 20)");
  command.add_option("--warmup-steps", warmup_steps_,
                     "Steps excluded from the medians (default 1)");
  command.add_option("--lr", lr_, "AdamW learning rate (default 1e-3)");
  command.add_option("--seed", seed_, "Seed for weights, data and dropout (default 0)");
  command.add_option("--threads", threads_,
                     "LibTorch intra-op threads, its BLAS included (default: LibTorch's)");
  command.add_option("--precision", precision_, "fp32, bf16 (autocast) or fp16 (CUDA only)")
      ->capture_default_str();
  command.add_option("--device", device_, "cpu, cuda or cuda:N")->capture_default_str();
  command
      .add_option("--checkpoint", checkpoint_,
                  "none | every:K | sublayer:A,F | selective | schedule:P=K,… | keep:LIST "
                  "(qkv, attn-out, mlp-in, router, expert-out, matmul) | segments:LIST | "
                  "stages:P/P/… | plan:BUDGET")
      ->capture_default_str();
  command
      .add_option("--offload", offload_,
                  "none | disk[:DIR] (saved segment inputs to files) | host (pinned memory; CUDA)")
      ->capture_default_str();
  command.add_option("--data", data_, "synthetic[:markov|:copy] or text:FILE")
      ->capture_default_str();
  command.add_option("--budget", budget_,
                     budget_help.empty() ? "Memory budget (bytes, KiB, MiB, GiB): a step above "
                                           "it ends the run as oom"
                                         : budget_help);
  command.add_flag("--timeline", timeline_, "Record one step's memory timeline");
  command.add_option("--loss-scale", loss_scale_,
                     "fp16: initial dynamic loss scale (default 65536)");
  command.add_option("--loss-scale-growth-interval", loss_scale_growth_,
                     "fp16: good steps in a row that double the loss scale (default 2000)");
  command.add_flag("--tf32", tf32_,
                   "CUDA: fp32 matmuls on TF32 tensor cores (faster, ~1e-3 relative error)");
  command.add_flag("--deterministic", deterministic_,
                   "Deterministic algorithms only (`check` turns this on for CUDA)");
  command.add_option("--peak-flops", peak_flops_,
                     "FLOP/s for MFU and HFU (default: measured once, as `rematlab-cli peak`)");
  command.add_flag("--json", json, "Print one JSON object as the last line of stdout");
}

RunConfig RunOptions::resolve() const {
  RunConfig config;
  config.preset = preset_;
  config.model = model_preset(preset_);
  model_.apply(config.model);
  if (!model_.source().empty()) config.preset = model_.source();  // where the shape came from
  if (batch_) config.batch = *batch_;
  if (accum_) config.accum = *accum_;
  if (steps_) config.steps = *steps_;
  if (warmup_steps_) config.warmup_steps = *warmup_steps_;
  if (lr_) config.lr = *lr_;
  if (seed_) config.seed = *seed_;
  if (threads_) config.threads = *threads_;
  config.precision = parse_precision(precision_);
  config.device = device_;
  config.checkpoint = CheckpointPolicy::canonical_text(checkpoint_);
  config.offload = offload_;
  config.data = data_;
  if (!budget_.empty()) config.budget_bytes = parse_byte_size(budget_, "--budget");
  config.timeline = timeline_;
  if (loss_scale_) config.loss_scale = *loss_scale_;
  if (loss_scale_growth_) config.loss_scale_growth_interval = *loss_scale_growth_;
  config.tf32 = tf32_;
  config.deterministic = deterministic_;
  if (peak_flops_) {
    if (!(*peak_flops_ > 0.0)) throw InvalidInput("--peak-flops", "must be positive");
    config.peak_flops = *peak_flops_;
  }
  validate(config);
  return config;
}

}  // namespace rematlab::cli
