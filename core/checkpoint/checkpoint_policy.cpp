#include "checkpoint/checkpoint_policy.h"

#include <algorithm>
#include <sstream>

#include "checkpoint/stage_blocks.h"
#include "common/byte_size.h"
#include "common/decimal_text.h"
#include "common/errors.h"

namespace rematlab {
namespace {

[[noreturn]] void reject(const std::string& text, const std::string& reason) {
  throw InvalidInput("--checkpoint", "'" + text + "': " + reason);
}

int64_t parse_positive(const std::string& token, const std::string& text, const char* what) {
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(token, &used);
  } catch (const std::exception&) {
    reject(text, std::string(what) + " '" + token + "' is not a whole number");
  }
  if (used != token.size())
    reject(text, std::string(what) + " '" + token + "' is not a whole number");
  if (value < 1) reject(text, std::string(what) + " must be at least 1");
  return value;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, separator)) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.emplace_back();
  return parts;
}

std::vector<Segment> uniform_blocks(int64_t layers, int64_t blocks_per_segment) {
  std::vector<Segment> segments;
  for (int64_t block = 0; block < layers; block += blocks_per_segment) {
    const int64_t last = std::min(layers, block + blocks_per_segment);
    segments.push_back({2 * block, 2 * last, true});
  }
  return segments;
}

// "a3" → 6, "m3" → 7.
int64_t parse_sublayer(const std::string& token, const std::string& text) {
  const bool known_kind = !token.empty() && (token[0] == 'a' || token[0] == 'm');
  const bool digits =
      token.size() > 1 && token.size() <= 7 &&
      std::all_of(token.begin() + 1, token.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!known_kind || !digits) {
    reject(text, "'" + token + "' is not a sublayer (a0, m0, a1, … : a for attention, m for MLP)");
  }
  return 2 * std::stoll(token.substr(1)) + (token[0] == 'm' ? 1 : 0);
}

std::vector<Segment> parse_segment_list(const std::string& args, const std::string& text) {
  if (args.empty()) {
    reject(text, "expected the recomputed segments, e.g. segments:a0-m1,a3 (or none)");
  }
  std::vector<Segment> segments;
  for (const std::string& range : split(args, ',')) {
    const auto dash = range.find('-');
    const int64_t first = parse_sublayer(range.substr(0, dash), text);
    const int64_t last =
        dash == std::string::npos ? first : parse_sublayer(range.substr(dash + 1), text);
    if (last < first) reject(text, "'" + range + "' ends before it begins");
    if (!segments.empty() && first < segments.back().end) {
      reject(text, "'" + range + "' overlaps or precedes the segment before it");
    }
    segments.push_back({first, last + 1, true});
  }
  return segments;
}

}  // namespace

bool KeptOutputs::has(KeptOutput which) const {
  switch (which) {
    case KeptOutput::kQkv:
      return qkv;
    case KeptOutput::kAttentionOut:
      return attention_out;
    case KeptOutput::kMlpIn:
      return mlp_in;
    case KeptOutput::kRouter:
      return router;
    case KeptOutput::kExpertOut:
      return expert_out;
  }
  return false;
}

std::string sublayer_name(int64_t index) {
  return (index % 2 == 0 ? "a" : "m") + std::to_string(index / 2);
}

namespace {

// The recomputed segments as `segments:` writes them, in ascending order: "a0-m1,a3".
std::string recomputed_list(const std::vector<Segment>& segments) {
  std::string list;
  for (const Segment& segment : segments) {
    if (!segment.recompute) continue;
    list += (list.empty() ? "" : ",") + sublayer_name(segment.begin);
    if (segment.end - segment.begin > 1) list += "-" + sublayer_name(segment.end - 1);
  }
  return list;
}

// schedule:P=K,…: progress fractions from 0, increasing, each with its interval.
std::vector<std::pair<double, int64_t>> parse_schedule(const std::string& args,
                                                       const std::string& text) {
  std::vector<std::pair<double, int64_t>> schedule;
  for (const auto& entry : split(args, ',')) {
    const auto equals = entry.find('=');
    if (equals == std::string::npos) reject(text, "entry '" + entry + "' is not P=K");
    const std::string fraction = entry.substr(0, equals);
    double progress = -1.0;
    const std::size_t used = read_decimal_prefix(fraction, progress);
    if (used == 0 || used != fraction.size() || !(progress >= 0.0 && progress < 1.0)) {
      reject(text, "progress '" + fraction + "' must be a fraction in [0, 1)");
    }
    if (!schedule.empty() && progress <= schedule.back().first) {
      reject(text, "progress points must increase");
    }
    schedule.emplace_back(progress, parse_positive(entry.substr(equals + 1), text, "K"));
  }
  if (schedule.front().first != 0.0) reject(text, "the first entry must start at 0");
  return schedule;
}

// keep:LIST of qkv, attn-out, mlp-in, router, expert-out, or matmul for all of them.
KeptOutputs parse_kept(const std::string& args, const std::string& text) {
  KeptOutputs keep;
  for (const auto& name : split(args, ',')) {
    if (name == "qkv") {
      keep.qkv = true;
    } else if (name == "attn-out") {
      keep.attention_out = true;
    } else if (name == "mlp-in") {
      keep.mlp_in = true;
    } else if (name == "router") {
      keep.router = true;
    } else if (name == "expert-out") {
      keep.expert_out = true;
    } else if (name == "matmul") {
      keep = KeptOutputs::every();
    } else {
      reject(text, "'" + name + "' is not qkv, attn-out, mlp-in, router, expert-out or matmul");
    }
  }
  return keep;
}

}  // namespace

KeptOutputs KeptOutputs::every() { return {true, true, true, true, true}; }

std::string KeptOutputs::text() const {
  if (*this == every()) return "matmul";
  std::string names;
  for (const auto& [kept, name] :
       {std::pair{qkv, "qkv"}, std::pair{attention_out, "attn-out"}, std::pair{mlp_in, "mlp-in"},
        std::pair{router, "router"}, std::pair{expert_out, "expert-out"}}) {
    if (kept) names += (names.empty() ? "" : ",") + std::string(name);
  }
  return names;
}

int64_t CheckpointPlan::recomputed_segments() const {
  return std::count_if(segments.begin(), segments.end(),
                       [](const Segment& s) { return s.recompute; });
}

std::string CheckpointPlan::describe() const {
  std::ostringstream out;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const Segment& segment = segments[i];
    out << (i ? " [" : "[");
    for (int64_t s = segment.begin; s < segment.end; ++s) {
      out << (s > segment.begin ? " " : "") << (s % 2 == 0 ? 'a' : 'm') << s / 2;
    }
    out << (segment.recompute ? "]*" : "]");
  }
  if (recompute_attention_core)
    out << (segments.empty() ? "" : " ") << "(attention cores recomputed)";
  if (keep.any()) out << (segments.empty() ? "" : " ") << "(kept: " << keep.text() << ")";
  return out.str();
}

std::string CheckpointPlan::canonical() const {
  if (recompute_attention_core) return "selective";
  if (keep.any()) return "keep:" + keep.text();  // the blocks of every:1, less what it keeps
  const std::string list = recomputed_list(segments);
  return list.empty() ? "none" : "segments:" + list;
}

// stages:P0/P1/…: each part a policy of its own, planned over its stage's blocks.
void CheckpointPolicy::parse_stages(const std::string& text, const std::string& args) {
  const std::vector<std::string> parts = split(args, '/');
  if (parts.size() < 2) reject(text, "expected stages:POLICY/POLICY/…, e.g. stages:every:1/none");
  kind_ = Kind::kStages;
  text_ = "stages:";
  for (const std::string& part : parts) {
    // A part's own error names the part alone: say whose stage and the whole text.
    const std::string stage_name = "stage " + std::to_string(stages_.size());
    if (part.empty()) reject(text, stage_name + " has no policy (none, every:K, …)");
    CheckpointPolicy stage;
    try {
      stage = parse(part);
    } catch (const InvalidInput& error) {
      reject(text, stage_name + ": " + error.reason());
    }
    const Kind kind = stage.kind();
    if (kind != Kind::kNone && kind != Kind::kEvery && kind != Kind::kSublayer &&
        kind != Kind::kSegments) {
      reject(text,
             "a stage's policy is none, every:K, sublayer:A,F or segments:…, not '" + part + "'");
    }
    text_ += (stages_.empty() ? "" : "/") + stage.text();
    stages_.push_back(std::move(stage));
  }
}

CheckpointPolicy CheckpointPolicy::parse(const std::string& text) {
  CheckpointPolicy policy;
  policy.text_ = text;
  const auto colon = text.find(':');
  const std::string head = text.substr(0, colon);
  const std::string args = colon == std::string::npos ? "" : text.substr(colon + 1);
  const bool has_args = colon != std::string::npos;

  if (head == "none" || head == "selective") {
    if (has_args) reject(text, head + " takes no arguments");
    policy.kind_ = head == "none" ? Kind::kNone : Kind::kSelective;
  } else if (head == "every") {
    if (!has_args) reject(text, "expected every:K, e.g. every:2");
    policy.kind_ = Kind::kEvery;
    policy.every_ = parse_positive(args, text, "K");
    policy.text_ = "every:" + std::to_string(policy.every_);
  } else if (head == "sublayer") {
    const auto parts = split(args, ',');
    if (parts.size() != 2) reject(text, "expected sublayer:A,F, e.g. sublayer:1,2");
    policy.kind_ = Kind::kSublayer;
    policy.attention_stride_ = parse_positive(parts[0], text, "A");
    policy.mlp_stride_ = parse_positive(parts[1], text, "F");
    policy.text_ = "sublayer:" + std::to_string(policy.attention_stride_) + "," +
                   std::to_string(policy.mlp_stride_);
  } else if (head == "schedule") {
    if (!has_args || args.empty()) reject(text, "expected schedule:P=K,…, e.g. schedule:0=2,0.5=5");
    policy.kind_ = Kind::kSchedule;
    policy.schedule_ = parse_schedule(args, text);
    policy.text_ = "schedule:";
    for (const auto& [progress, k] : policy.schedule_) {
      policy.text_ += (policy.text_.back() == ':' ? "" : ",") + decimal_text(progress) + "=" +
                      std::to_string(k);
    }
  } else if (head == "keep") {
    if (!has_args || args.empty()) {
      reject(text,
             "expected keep:LIST of qkv, attn-out, mlp-in, router, expert-out or matmul, e.g. "
             "keep:matmul");
    }
    policy.kind_ = Kind::kKeep;
    policy.keep_ = parse_kept(args, text);
    policy.text_ = "keep:" + policy.keep_.text();
  } else if (head == "segments") {
    policy.kind_ = Kind::kSegments;
    policy.recomputed_ = parse_segment_list(args, text);
    policy.text_ = "segments:" + recomputed_list(policy.recomputed_);  // sorted, one spelling
  } else if (head == "plan") {
    if (!has_args || args.empty()) {
      reject(text, "expected plan:BUDGET, the activation memory to fit, e.g. plan:200MiB");
    }
    policy.kind_ = Kind::kPlan;
    try {
      policy.plan_budget_bytes_ = parse_byte_size(args, "--checkpoint");
    } catch (const InvalidInput&) {
      reject(text, "'" + args + "' is not a memory size (e.g. 200MiB, 2GiB)");
    }
    if (policy.plan_budget_bytes_ <= 0) reject(text, "the budget must be positive");
    policy.text_ = "plan:" + byte_size_text(policy.plan_budget_bytes_);
  } else if (head == "stages") {
    policy.parse_stages(text, args);
  } else {
    reject(text,
           "unknown policy (use none, every:K, sublayer:A,F, selective, schedule:P=K,…, "
           "keep:LIST, segments:FIRST-LAST,…, stages:P/P/…, plan:BUDGET)");
  }
  return policy;
}

std::string CheckpointPolicy::canonical_text(const std::string& text) {
  try {
    return parse(text).text();
  } catch (const InvalidInput&) {
    return text;  // validate() refuses it in its own words
  }
}

// The stages' own plans, each moved to where its blocks are in the chain.
std::vector<Segment> CheckpointPolicy::stage_segments(
    int64_t layers, const std::vector<int64_t>& chunk_blocks) const {
  std::vector<Segment> segments;
  const auto count = static_cast<int64_t>(stages_.size());
  if (count > layers) {
    reject(text_, std::to_string(count) + " stages for " + std::to_string(layers) +
                      " blocks: every stage needs one block at least");
  }
  // A split of another number of chunks is the run's to refuse first (validate), in its words.
  const std::vector<int64_t> bounds = chunk_block_bounds(layers, count, chunk_blocks);
  for (std::size_t stage = 0; stage < stages_.size(); ++stage) {
    // The stage's blocks as a model of their own, moved to where they are in the chain.
    const int64_t first = 2 * bounds[stage];
    const int64_t blocks = bounds[stage + 1] - bounds[stage];
    CheckpointPlan own;
    try {
      own = stages_[stage].plan_for(blocks, 0.0);
    } catch (const InvalidInput& error) {
      // Its own words count the stage's blocks as a model's: say which stage, how many.
      reject(text_, "stage " + std::to_string(stage) + " (" + std::to_string(blocks) +
                        (blocks == 1 ? " block" : " blocks") +
                        ", named from a0): " + error.reason());
    }
    for (const Segment& segment : own.segments) {
      segments.push_back({first + segment.begin, first + segment.end, segment.recompute});
    }
  }
  return segments;
}

CheckpointPlan CheckpointPolicy::plan_for(int64_t layers, double progress,
                                          const std::vector<int64_t>& chunk_blocks) const {
  CheckpointPlan plan;
  switch (kind_) {
    case Kind::kNone:
      plan.segments.push_back({0, 2 * layers, false});
      break;
    case Kind::kSelective:
      plan.segments.push_back({0, 2 * layers, false});
      plan.recompute_attention_core = true;
      break;
    case Kind::kEvery:
      plan.interval = every_;
      plan.segments = uniform_blocks(layers, every_);
      break;
    case Kind::kKeep:
      // Blocks recomputed as under every:1, less the kept projections.
      plan.interval = 1;
      plan.segments = uniform_blocks(layers, 1);
      plan.keep = keep_;
      break;
    case Kind::kSchedule: {
      int64_t interval = schedule_.front().second;
      for (const auto& [threshold, k] : schedule_) {
        if (progress >= threshold) interval = k;
      }
      plan.interval = interval;
      plan.segments = uniform_blocks(layers, interval);
      break;
    }
    case Kind::kSublayer: {
      std::vector<int64_t> boundaries;
      for (int64_t block = 0; block < layers; ++block) {
        if (block % attention_stride_ == 0) boundaries.push_back(2 * block);
        if (block % mlp_stride_ == 0) boundaries.push_back(2 * block + 1);
      }
      boundaries.push_back(2 * layers);
      for (std::size_t i = 0; i + 1 < boundaries.size(); ++i) {
        plan.segments.push_back({boundaries[i], boundaries[i + 1], true});
      }
      break;
    }
    case Kind::kStages:
      plan.segments = stage_segments(layers, chunk_blocks);
      break;
    case Kind::kPlan:
      reject(text_, "a plan is chosen when the run starts, from its measured costs");
    case Kind::kSegments: {
      const int64_t sublayers = 2 * layers;
      if (recomputed_.back().end > sublayers) {
        reject(text_, sublayer_name(recomputed_.back().end - 1) +
                          " is past the model's last "
                          "sublayer, " +
                          sublayer_name(sublayers - 1));
      }
      int64_t next = 0;  // the first sublayer not yet in a segment
      for (const Segment& segment : recomputed_) {
        if (segment.begin > next) plan.segments.push_back({next, segment.begin, false});
        plan.segments.push_back(segment);
        next = segment.end;
      }
      if (next < sublayers) plan.segments.push_back({next, sublayers, false});
      break;
    }
  }
  return plan;
}

}  // namespace rematlab
