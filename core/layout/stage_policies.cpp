#include "layout/stage_policies.h"

#include <algorithm>
#include <stdexcept>

#include "common/errors.h"
#include "layout/layout_rules.h"

namespace rematlab::layout {

bool is_searched_policy(const CheckpointPolicy& policy) {
  using Kind = CheckpointPolicy::Kind;
  return policy.kind() == Kind::kNone || policy.kind() == Kind::kSelective ||
         policy.kind() == Kind::kEvery;
}

std::string evaluated_policy(const CheckpointPolicy& policy, const std::string& whole) {
  using Kind = CheckpointPolicy::Kind;
  const Kind kind = policy.kind();
  if (!is_searched_policy(policy) && kind != Kind::kSublayer && kind != Kind::kSegments) {
    throw InvalidInput("--checkpoint",
                       "the layout planner estimates stages under none, selective, every:K, "
                       "sublayer: and segments: (got " +
                           whole + (policy.is_plan() ? "; give the policy the plan chose" : "") +
                           ")");
  }
  return policy.text();
}

std::vector<std::string> cut_at_chunks(const CheckpointPolicy& policy,
                                       const std::vector<int64_t>& split) {
  int64_t layers = 0;
  for (const int64_t blocks : split) layers += blocks;
  const CheckpointPlan whole = policy.plan_for(layers, 0.0, split);
  std::vector<std::string> chunks;
  int64_t first = 0;  // the chunk's first sublayer in the chain
  for (const int64_t blocks : split) {
    const int64_t last = first + 2 * blocks;
    CheckpointPlan own;
    for (const Segment& segment : whole.segments) {
      const int64_t begin = std::max(segment.begin, first);
      const int64_t end = std::min(segment.end, last);
      if (begin < end) own.segments.push_back({begin - first, end - first, segment.recompute});
    }
    chunks.push_back(own.canonical());
    first = last;
  }
  return chunks;
}

std::vector<std::string> rank_policies(const std::string& text, int64_t pp, int64_t vp,
                                       const std::vector<int64_t>& split) {
  const CheckpointPolicy policy = CheckpointPolicy::parse(text);
  std::vector<std::string> chunks;
  if (policy.kind() == CheckpointPolicy::Kind::kStages) {
    for (const CheckpointPolicy& chunk : policy.stages()) {
      chunks.push_back(evaluated_policy(chunk, text));
    }
    if (static_cast<int64_t>(chunks.size()) != pp * vp) {
      throw InvalidInput("--checkpoint", text + " gives " + std::to_string(chunks.size()) +
                                             " policies for " + std::to_string(pp * vp) +
                                             " model chunks");
    }
  } else if (is_searched_policy(policy) || pp * vp == 1) {
    return std::vector<std::string>(static_cast<size_t>(pp), evaluated_policy(policy, text));
  } else {
    evaluated_policy(policy, text);
    if (static_cast<int64_t>(split.size()) != pp * vp) {
      throw std::logic_error("a split of every model chunk is needed to cut " + text);
    }
    chunks = cut_at_chunks(policy, split);
  }
  std::vector<std::string> policies;
  for (int64_t rank = 0; rank < pp; ++rank) {
    std::string entry = chunks[static_cast<size_t>(rank)];
    bool shared = true;
    for (int64_t chunk = rank + pp; chunk < pp * vp; chunk += pp) {
      shared = shared && chunks[static_cast<size_t>(chunk)] == entry;
    }
    for (int64_t chunk = rank + pp; !shared && chunk < pp * vp; chunk += pp) {
      entry += "/" + chunks[static_cast<size_t>(chunk)];
    }
    policies.push_back(entry);
  }
  return policies;
}

std::vector<std::string> chunk_policies(const std::string& rank_policy, size_t chunks) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t slash = rank_policy.find('/'); slash != std::string::npos;
       slash = rank_policy.find('/', begin)) {
    parts.push_back(rank_policy.substr(begin, slash - begin));
    begin = slash + 1;
  }
  parts.push_back(rank_policy.substr(begin));
  if (parts.size() == 1) parts.resize(chunks, parts.front());
  return parts;
}

void check_named_blocks(const std::vector<std::string>& rank_policies,
                        const std::vector<int64_t>& split, int64_t pp) {
  const std::vector<std::vector<int64_t>> chunks = chunks_by_rank(split, pp);
  if (rank_policies.size() != chunks.size()) throw std::logic_error("a policy for every rank");
  for (size_t rank = 0; rank < rank_policies.size(); ++rank) {
    const std::vector<int64_t>& blocks = chunks[rank];
    const std::vector<std::string> policies = chunk_policies(rank_policies[rank], blocks.size());
    if (policies.size() != blocks.size()) throw std::logic_error("a policy for every chunk");
    for (size_t chunk = 0; chunk < blocks.size(); ++chunk) {
      try {
        CheckpointPolicy::parse(policies[chunk]).plan_for(blocks[chunk], 0.0);
      } catch (const InvalidInput& error) {
        // Its own words count the chunk's blocks as a model's: say which rank and chunk.
        throw InvalidInput("--checkpoint", "pipeline rank " + std::to_string(rank) + "'s chunk " +
                                               std::to_string(chunk) + " (" +
                                               std::to_string(blocks[chunk]) +
                                               (blocks[chunk] == 1 ? " block" : " blocks") +
                                               ", named from a0): " + error.reason());
      }
    }
  }
}

}  // namespace rematlab::layout
