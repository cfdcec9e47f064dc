#include "layout/layout.h"

#include "common/byte_size.h"
#include "common/errors.h"
#include "estimate/model_state.h"
#include "layout/layout_rules.h"

namespace rematlab::layout {

int64_t LayoutRequest::gradient_bytes() const {
  return fp32_gradients ? 4 : estimate::bytes_per_value(precision);
}

void LayoutRequest::set_bucket_size(const std::string& text) {
  const int64_t bytes = parse_byte_size(text, "--bucket-size");
  const int64_t g = gradient_bytes();
  // At most run's limit, 1 TiB of its fp32 gradients, which take the same values.
  const int64_t most = (int64_t{1} << 38) * g;
  const std::string kind = g == 4 ? "fp32" : "16-bit";
  if (bytes < g || bytes > most) {
    throw InvalidInput("--bucket-size", "must be between one gradient (" + std::to_string(g) +
                                            " bytes) and " + format_bytes(most) + " of " + kind +
                                            " gradients");
  }
  if (bytes % g != 0) {
    throw InvalidInput("--bucket-size", std::to_string(bytes) +
                                            " bytes are not a whole number of " + kind +
                                            " gradients (" + std::to_string(g) + " bytes each)");
  }
  bucket_values = bytes / g;
}

std::string to_string(Offload offload) {
  switch (offload) {
    case Offload::kOptimizer:
      return "optimizer";
    case Offload::kParameters:
      return "parameters";
    case Offload::kActivations:
      return "activations";
    case Offload::kNone:
      break;
  }
  return "none";
}

Offload parse_layout_offload(const std::string& text) {
  for (Offload offload :
       {Offload::kNone, Offload::kOptimizer, Offload::kParameters, Offload::kActivations}) {
    if (text == to_string(offload)) return offload;
  }
  throw InvalidInput("--offload", "unknown offload '" + text +
                                      "' (use none, optimizer, parameters or activations)");
}

std::string Layout::checkpoint_text() const {
  std::string text;
  bool uniform = true;
  for (const auto& policy : stage_checkpoints) {
    uniform = uniform && policy == stage_checkpoints.front();
    text += (text.empty() ? "" : "|") + policy;
  }
  if (uniform && !stage_checkpoints.empty()) return stage_checkpoints.front();
  return text;
}

int64_t split_blocks(const Layout& layout) {
  int64_t blocks = 0;
  for (const int64_t chunk : layout.split) blocks += chunk;
  return blocks;
}

std::string split_text(const std::vector<int64_t>& split) {
  std::string text;
  for (const int64_t chunk : split) text += (text.empty() ? "" : ",") + std::to_string(chunk);
  return text;
}

ShardMode engine_shard(const Layout& layout) {
  static const ShardMode kByStage[] = {ShardMode::kNone, ShardMode::kOptimizer,
                                       ShardMode::kGradients, ShardMode::kParameters};
  return layout.dp > 1 ? kByStage[layout.zero] : ShardMode::kNone;
}

std::string layout_name(const Layout& layout) {
  std::string name = "TP " + std::to_string(layout.tp);
  if (layout.sp) name += "+SP";
  name += " PP " + std::to_string(layout.pp);
  if (layout.vp > 1) name += "×" + std::to_string(layout.vp);
  if (!layout.split.empty() &&
      layout.split != rule_split(split_blocks(layout), layout.pp, layout.vp)) {
    name += " split " + split_text(layout.split);
  }
  if (layout.cp > 1) name += " CP " + std::to_string(layout.cp);
  name += " DP " + std::to_string(layout.dp);
  if (layout.ep > 1) name += " EP " + std::to_string(layout.ep);
  if (layout.zero > 0) name += " ZeRO " + std::to_string(layout.zero);
  name += " micro-batch " + std::to_string(layout.micro_batch);
  if (layout.offload != Offload::kNone) name += " offload " + to_string(layout.offload);
  return name;
}

}  // namespace rematlab::layout
