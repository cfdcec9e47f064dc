// The checkpoint policies the layout evaluator meets, as the numbers its caches key on: the ones
// its search weighs, and any a stage is given (stage_policies.h) with what they recompute.
#include <utility>

#include "checkpoint/checkpoint_policy.h"
#include "layout/layout_evaluator.h"
#include "layout/stage_policies.h"

namespace rematlab::layout {

int64_t LayoutEvaluator::policy_code(const std::string& text) {
  const auto found = named_codes_.find(text);
  if (found != named_codes_.end()) return found->second;
  const bool per_chunk = text.find('/') != std::string::npos;
  if (!per_chunk) {
    const CheckpointPolicy parsed = CheckpointPolicy::parse(text);
    if (parsed.kind() == CheckpointPolicy::Kind::kNone) return kNonePolicy;
    if (parsed.kind() == CheckpointPolicy::Kind::kSelective) return kSelectivePolicy;
    if (parsed.kind() == CheckpointPolicy::Kind::kEvery) return parsed.plan_for(1, 0.0).interval;
  }
  const int64_t code = kFirstNamedPolicy - static_cast<int64_t>(named_policies_.size());
  named_policies_.push_back(text);
  named_codes_.emplace(text, code);
  if (per_chunk) {
    std::vector<int64_t> chunks;
    for (const std::string& chunk : chunk_policies(text, 1)) chunks.push_back(policy_code(chunk));
    chunk_codes_.emplace(code, std::move(chunks));
  }
  return code;
}

std::string LayoutEvaluator::policy_text(int64_t code) const {
  if (code == kNonePolicy) return "none";
  if (code == kSelectivePolicy) return "selective";
  if (code > 0) return "every:" + std::to_string(code);
  return named_policies_.at(static_cast<size_t>(kFirstNamedPolicy - code));
}

bool LayoutEvaluator::per_chunk(int64_t policy) const { return chunk_codes_.count(policy) > 0; }

int64_t LayoutEvaluator::chunk_policy(int64_t policy, size_t chunk) const {
  const auto found = chunk_codes_.find(policy);
  return found == chunk_codes_.end() ? policy : found->second.at(chunk);
}

double LayoutEvaluator::rerun_share(int64_t policy, const Stage& stage) {
  if (policy > 0) return 1.0;  // every:K: every block's forward again
  if (policy > kFirstNamedPolicy || stage.layers == 0) return 0.0;
  int64_t recomputed = 0;
  for (size_t chunk = 0; chunk < stage.chunks.size(); ++chunk) {
    for (const Segment& segment : plan(chunk_policy(policy, chunk), stage.chunks[chunk]).segments) {
      if (segment.recompute) recomputed += segment.end - segment.begin;
    }
  }
  return static_cast<double>(recomputed) / static_cast<double>(2 * stage.layers);
}

const CheckpointPlan& LayoutEvaluator::plan(int64_t policy, int64_t layers) {
  const auto key = std::make_pair(policy, layers);
  const auto found = plan_cache_.find(key);
  if (found != plan_cache_.end()) return found->second;
  const CheckpointPlan made = CheckpointPolicy::parse(policy_text(policy)).plan_for(layers, 0.0);
  return plan_cache_.emplace(key, made).first->second;
}

}  // namespace rematlab::layout
