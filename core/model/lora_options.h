// Fine-tuning with low-rank adapters (LoRA, Hu et al. 2021): which projections get one, of what
// rank and scale. Without them (rank 0) every parameter trains, as in pre-training.
#pragma once

#include <cstdint>
#include <string>

#include "common/quantised_format.h"

namespace rematlab {

// The projections an adapter can sit on (--lora-targets), as bits: attention's q, k, v and
// output projections, the MLP's gate (Llama), up and down.
enum LoraTarget : uint32_t {
  kLoraQ = 1u << 0,
  kLoraK = 1u << 1,
  kLoraV = 1u << 2,
  kLoraO = 1u << 3,
  kLoraGate = 1u << 4,
  kLoraUp = 1u << 5,
  kLoraDown = 1u << 6,
};
inline constexpr uint32_t kEveryLoraTarget = (1u << 7) - 1;
inline constexpr int64_t kMaxLoraRank = 65536;

// How the frozen model's projection weights are stored (--base-precision): as trained (fp32);
// in bf16, half the bytes, which the bf16 matmuls of --precision bf16 read as they are; or
// weight-only quantised, int8 with a scale per row or 4-bit NormalFloat in blocks, dequantised
// wherever a projection runs (checkpoint/quantised_weight.h).
enum class BasePrecision { kFp32, kBf16, kInt8, kNf4 };

struct LoraOptions {
  int64_t rank = 0;      // 0: no adapters, every parameter trains
  double alpha = 0.0;    // the adapters' output is scaled by alpha / rank
  uint32_t targets = 0;  // LoraTarget bits
  BasePrecision base = BasePrecision::kFp32;

  bool enabled() const { return rank > 0; }
  bool adapts(LoraTarget target) const { return enabled() && (targets & target) != 0; }
  double scale() const { return alpha / static_cast<double>(rank); }
};

// "q,k,v,o,gate,up,down" (any subset, any order; "all" for every one) to bits; throws
// InvalidInput("--lora-targets", …) naming what is unknown.
uint32_t parse_lora_targets(const std::string& text);
// The bits as parse_lora_targets reads them, in the order above.
std::string lora_targets_text(uint32_t targets);

// "fp32", "bf16", "int8" or "nf4"; throws InvalidInput("--base-precision", …) for anything else.
BasePrecision parse_base_precision(const std::string& text);
std::string to_string(BasePrecision precision);

// Whether `base` is stored quantised, and in which format (int8 or nf4 only).
bool is_quantised(BasePrecision base);
QuantisedFormat quantised_format(BasePrecision base);

}  // namespace rematlab
