#include "train/run_config.h"

#include <torch/cuda.h>

#include <algorithm>

#include "checkpoint/checkpoint_policy.h"
#include "common/errors.h"

namespace rematlab {

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "fp32";
}

Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::kFp32;
  if (text == "bf16") return Precision::kBf16;
  if (text == "fp16") return Precision::kFp16;
  throw InvalidInput("--precision", "unknown precision '" + text + "' (use fp32, bf16 or fp16)");
}

int64_t RunConfig::timed_warmup_steps() const {
  return std::max<int64_t>(0, std::min(warmup_steps, steps - 1));
}

c10::Device parse_device(const std::string& text) {
  const bool cuda = text == "cuda" || text.rfind("cuda:", 0) == 0;
  if (text != "cpu" && !cuda) {
    throw InvalidInput("--device", "unknown device '" + text + "' (use cpu, cuda or cuda:N)");
  }
  if (text == "cpu") return c10::Device(c10::kCPU);
  if (!torch::cuda::is_available()) {
    throw InvalidInput("--device", "'" + text + "' requested but no CUDA device is available");
  }
  int index = 0;
  if (text.size() > 5) {
    std::size_t used = 0;
    try {
      index = std::stoi(text.substr(5), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size() - 5 || index < 0) {
      throw InvalidInput("--device", "'" + text + "' has no valid device index");
    }
  }
  if (index >= static_cast<int>(torch::cuda::device_count())) {
    throw InvalidInput("--device", "'" + text + "': only " +
                                       std::to_string(torch::cuda::device_count()) +
                                       " CUDA device(s) present");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void validate(const RunConfig& config) {
  validate(config.model);
  auto positive = [](int64_t value, const char* flag) {
    if (value <= 0) throw InvalidInput(flag, "must be positive, got " + std::to_string(value));
  };
  positive(config.batch, "--batch");
  positive(config.accum, "--accum");
  positive(config.steps, "--steps");
  if (config.warmup_steps < 0) throw InvalidInput("--warmup-steps", "must not be negative");
  if (!(config.lr > 0.0)) throw InvalidInput("--lr", "must be positive");
  if (config.threads < 0) throw InvalidInput("--threads", "must not be negative");
  if (config.budget_bytes < 0) throw InvalidInput("--budget", "must be positive");
  if (!(config.loss_scale >= 1.0)) throw InvalidInput("--loss-scale", "must be at least 1");
  positive(config.loss_scale_growth_interval, "--loss-scale-growth-interval");
  const c10::Device device = parse_device(config.device);
  if (config.precision == Precision::kFp16 && !device.is_cuda()) {
    throw InvalidInput("--precision", "fp16 needs a CUDA device (on CPU use bf16)");
  }
  const CheckpointPolicy policy = CheckpointPolicy::parse(config.checkpoint);
  const OffloadSpec offload = parse_offload(config.offload);
  if (offload.kind == OffloadKind::kHost && !device.is_cuda()) {
    throw InvalidInput("--offload", "host offload needs a CUDA device (moving CPU memory to host "
                                    "memory saves nothing); use disk");
  }
  if (offload.kind != OffloadKind::kNone && policy.is_none()) {
    throw InvalidInput("--offload", "offload moves the inputs that recomputed segments save; "
                                    "choose a --checkpoint policy other than none");
  }
}

OffloadSpec parse_offload(const std::string& text) {
  if (text == "none") return {OffloadKind::kNone, ""};
  if (text == "host") return {OffloadKind::kHost, ""};
  if (text == "disk") return {OffloadKind::kDisk, ""};
  if (text.rfind("disk:", 0) == 0 && text.size() > 5) return {OffloadKind::kDisk, text.substr(5)};
  throw InvalidInput("--offload", "unknown offload '" + text + "' (use none, host, disk or disk:DIR)");
}

nlohmann::json to_json(const RunConfig& config) {
  return {
      {"preset", config.preset},
      {"layers", config.model.layers},
      {"d_model", config.model.d_model},
      {"heads", config.model.heads},
      {"seq_len", config.model.seq_len},
      {"vocab", config.model.vocab},
      {"dropout", config.model.dropout},
      {"attention", to_string(config.model.attention)},
      {"batch", config.batch},
      {"accum", config.accum},
      {"steps", config.steps},
      {"warmup_steps", config.warmup_steps},
      {"lr", config.lr},
      {"weight_decay", config.weight_decay},
      {"grad_clip", config.grad_clip},
      {"seed", config.seed},
      {"threads", config.threads},
      {"precision", to_string(config.precision)},
      {"device", config.device},
      {"checkpoint", config.checkpoint},
      {"offload", config.offload},
      {"data", config.data},
      {"budget_bytes", config.budget_bytes},
      {"timeline", config.timeline},
      {"loss_scale", config.loss_scale},
      {"loss_scale_growth_interval", config.loss_scale_growth_interval},
      {"tf32", config.tf32},
      {"deterministic", config.deterministic},
  };
}

std::string describe_run(const RunConfig& config) {
  std::string text = config.checkpoint;
  if (config.offload != "none") text += "+" + config.offload;
  text += " b" + std::to_string(config.batch);
  if (config.precision != Precision::kFp32) text += " " + to_string(config.precision);
  return text;
}

}  // namespace rematlab
