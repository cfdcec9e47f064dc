#include "model/lora_options.h"

#include <array>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "common/errors.h"

namespace rematlab {
namespace {

constexpr std::array<std::pair<const char*, LoraTarget>, 7> kNames = {{{"q", kLoraQ},
                                                                       {"k", kLoraK},
                                                                       {"v", kLoraV},
                                                                       {"o", kLoraO},
                                                                       {"gate", kLoraGate},
                                                                       {"up", kLoraUp},
                                                                       {"down", kLoraDown}}};

}  // namespace

uint32_t parse_lora_targets(const std::string& text) {
  if (text == "all") return kEveryLoraTarget;
  uint32_t targets = 0;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty()) throw InvalidInput("--lora-targets", "has an empty item in '" + text + "'");
    bool known = false;
    for (const auto& [name, bit] : kNames) {
      if (item == name) {
        targets |= bit;
        known = true;
      }
    }
    if (!known) {
      throw InvalidInput("--lora-targets", "unknown projection '" + item +
                                               "' (use q, k, v, o, gate, up, down or all)");
    }
  }
  if (targets == 0) throw InvalidInput("--lora-targets", "names no projection");
  if (text.back() == ',') throw InvalidInput("--lora-targets", "ends with a comma: '" + text + "'");
  return targets;
}

std::string lora_targets_text(uint32_t targets) {
  std::string text;
  for (const auto& [name, bit] : kNames) {
    if (targets & bit) text += (text.empty() ? "" : ",") + std::string(name);
  }
  return text;
}

BasePrecision parse_base_precision(const std::string& text) {
  if (text == "fp32") return BasePrecision::kFp32;
  if (text == "bf16") return BasePrecision::kBf16;
  if (text == "int8") return BasePrecision::kInt8;
  if (text == "nf4") return BasePrecision::kNf4;
  throw InvalidInput("--base-precision",
                     "unknown precision '" + text + "' (use fp32, bf16, int8 or nf4)");
}

bool is_quantised(BasePrecision base) {
  return base == BasePrecision::kInt8 || base == BasePrecision::kNf4;
}

QuantisedFormat quantised_format(BasePrecision base) {
  if (base == BasePrecision::kInt8) return QuantisedFormat::kInt8;
  if (base == BasePrecision::kNf4) return QuantisedFormat::kNf4;
  throw std::logic_error("quantised_format of a base stored unquantised");
}

std::string to_string(BasePrecision precision) {
  switch (precision) {
    case BasePrecision::kBf16:
      return "bf16";
    case BasePrecision::kInt8:
      return "int8";
    case BasePrecision::kNf4:
      return "nf4";
    case BasePrecision::kFp32:
      break;
  }
  return "fp32";
}

}  // namespace rematlab
