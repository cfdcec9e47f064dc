#include <cmath>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/estimate_text.h"
#include "cli/expert_load_options.h"
#include "cli/model_options.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "estimate/estimate.h"
#include "parallel/dist_env.h"
#include "run/run_config.h"
#include "run/shard_mode.h"

namespace rematlab::cli {
namespace {

struct EstimateOptions {
  std::string model;
  ModelOptions shape;
  std::optional<double> params;
  std::string precision = "fp32";
  std::string optimizer = "adamw";
  std::string checkpoint = "none";
  std::string offload = "none";
  int64_t batch = 1;
  std::vector<std::string> device_memory;
  std::optional<int64_t> nproc;  // absent: one process, or the tensor ranks of --tp
  std::string shard = "none";
  int64_t tp = 1;
  int64_t ep = 1;
  ExpertLoadOptions expert_loads;
  bool sequence_parallel = false;
  bool json = false;

  estimate::EstimateRequest resolve() const {
    estimate::EstimateRequest request;
    if (params && shape.gives_fine_tuning()) {
      throw InvalidInput("--params",
                         "is a size alone; fine-tuning is counted from a shape: give --model");
    }
    if (!model.empty() || shape.changes_shape() || shape.gives_fine_tuning()) {
      // Shape flags refine a named model as `run` applies them; alone they refine `tiny`.
      ModelConfig config = estimate::architecture_model_config(model.empty() ? "tiny" : model);
      shape.apply(config);
      validate(config);  // before any figure is derived from its sizes
      estimate::Architecture arch = estimate::from_model_config(config);
      arch.name = !shape.source().empty() ? shape.source()
                  : model.empty()         ? "custom"
                                          : model + (shape.changes_shape() ? "*" : "");
      arch.engine_shape = estimate::is_engine_preset(model);
      estimate::validate(arch);
      request.arch = arch;
    }
    if (params) {
      // At most 10^15: its bytes (up to 20 a parameter) stay within what int64 counts.
      if (!(std::isfinite(*params) && *params >= 1.0 && *params <= 1e15)) {
        throw InvalidInput("--params", "must be a count from 1 to 1e15 such as 70e9");
      }
      request.nominal_params = std::llround(*params);
    }
    request.precision = parse_precision(precision);
    request.optimizer = estimate::parse_optimizer(optimizer);
    request.checkpoint = checkpoint;
    const OffloadSpec spec = parse_offload(offload);
    if (spec.kind == OffloadKind::kHost) {
      throw InvalidInput("--offload", "host offload is not estimated yet (use none or disk)");
    }
    request.offload = spec.kind == OffloadKind::kDisk;
    request.batch = batch;
    for (const auto& size : device_memory) {
      request.device_memories.push_back(parse_byte_size(size, "--device-memory"));
    }
    if (nproc && (*nproc < 1 || *nproc > kMaxWorldSize)) {
      throw InvalidInput("--nproc", "must be between 1 and " + std::to_string(kMaxWorldSize));
    }
    // Tensor ranks alone are one tensor group: --nproc defaults to them.
    request.world_size = nproc.value_or(tp);
    request.layout = {tp, sequence_parallel};
    request.expert_ranks = ep;
    // make_estimate checks the loads against --ep.
    expert_loads.apply(request.arch ? &*request.arch : nullptr);
    parse_shard(shard);  // names --shard when unknown
    request.shard = shard;
    return request;
  }
};

}  // namespace

Command add_estimate_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "estimate", "Predict parameters, model-state and activation memory, fit and FLOPs");
  auto options = std::make_shared<EstimateOptions>();
  std::string models;
  for (const auto& name : estimate::architecture_names())
    models += (models.empty() ? "" : ", ") + name;
  command->add_option("--model,--preset", options->model, "Named shape: " + models);
  options->shape.add_to(*command);
  command->add_option("--params", options->params,
                      "Nominal parameter count (e.g. 70e9) for the model-state figures");
  command->add_option("--precision", options->precision, "fp32, bf16 or fp16")
      ->capture_default_str();
  command->add_option("--optimizer", options->optimizer, "adamw or sgd")->capture_default_str();
  command
      ->add_option("--checkpoint", options->checkpoint,
                   "none | every:K | sublayer:A,F | selective | schedule:P=K,… | keep:LIST "
                   "(qkv, attn-out, mlp-in, router, expert-out, matmul) | segments:LIST | "
                   "stages:P/P/… | plan:BUDGET")
      ->capture_default_str();
  command->add_option("--offload", options->offload, "none or disk (segment inputs off device)")
      ->capture_default_str();
  command->add_option("--batch", options->batch, "Micro-batch size")->capture_default_str();
  command->add_option("--device-memory", options->device_memory,
                      "Device memory to fit (repeatable; default 24GiB 40GiB 80GiB 141GiB)");
  command->add_option("--nproc", options->nproc,
                      "Ranks in all (default 1, or the --tp ranks): model states per rank");
  command
      ->add_option("--shard", options->shard,
                   "none, optimizer (optimizer state and master copy divided among the data "
                   "ranks, --nproc / --tp), gradients (gradients too) or parameters (weights "
                   "too)")
      ->capture_default_str();
  command
      ->add_option("--tp", options->tp,
                   "Tensor-parallel ranks (heads, MLP or experts' width and vocabulary split; "
                   "figures per rank)")
      ->capture_default_str();
  command
      ->add_option("--ep", options->ep,
                   "Expert-parallel ranks (a mixture's experts split over data ranks; figures "
                   "per rank)")
      ->capture_default_str();
  options->expert_loads.add_to(*command, "activations");
  command->add_flag("--sequence-parallel", options->sequence_parallel,
                    "Split the residual stream and norms along the sequence between tensor ranks");
  command->add_flag("--json", options->json, "Print one JSON object as the last line of stdout");
  return {command, [options]() {
            const estimate::Estimate result = estimate::make_estimate(options->resolve());
            if (options->json) {
              print_json_line(estimate::to_json(result));
            } else {
              std::cout << estimate_to_text(result);
            }
            return 0;
          }};
}

}  // namespace rematlab::cli
