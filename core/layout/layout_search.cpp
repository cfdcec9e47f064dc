#include "layout/layout_search.h"

#include <algorithm>
#include <chrono>

#include "checkpoint/checkpoint_policy.h"
#include "common/errors.h"
#include "layout/layout_evaluator.h"
#include "layout/layout_rules.h"
#include "layout/stage_policies.h"
#include "run/run_config.h"

namespace rematlab::layout {
namespace {

// Limits of what the search tries unless the request fixes the dimension: virtual stages per
// pipeline rank, sequences per micro-batch, and the fewest tokens a context rank keeps (below
// it the key/value exchange outweighs the attention it splits).
constexpr int64_t kMaxVirtualStages = 16;
constexpr int64_t kMaxMicroBatch = 64;
// Layouts one search weighs at most: Llama 3 405B on 16,384 GPUs weighs under 100,000.
constexpr int64_t kMaxCandidates = 1'000'000;
constexpr int64_t kMinContextTokens = 1024;

std::vector<int64_t> values_or(const std::optional<int64_t>& fixed, std::vector<int64_t> all) {
  if (fixed) return {*fixed};
  return all;
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> found;
  for (int64_t i = 1; i <= n; ++i) {
    if (n % i == 0) found.push_back(i);
  }
  return found;
}

std::vector<int64_t> powers_of_two_up_to(int64_t n) {  // 1, 2, 4, … ≤ n
  std::vector<int64_t> found = {1};
  while (found.back() <= n / 2) found.push_back(found.back() * 2);
  return found;
}

Layout degrees(int64_t tp, int64_t pp, int64_t cp, int64_t dp, bool sp) {
  Layout layout;
  layout.tp = tp;
  layout.pp = pp;
  layout.cp = cp;
  layout.dp = dp;
  layout.sp = sp;
  return layout;
}

// The values each dimension the request leaves open takes, whatever the others are.
struct OpenValues {
  std::vector<int64_t> tps, cps, pps, zeros;
  std::vector<Offload> offloads;
};

OpenValues open_values(const LayoutRequest& request) {
  const FixedDimensions& fixed = request.fixed;
  const int64_t gpus = request.cluster.gpus;
  // Fine-tuning is modelled on one tensor rank and one context rank, with its base whole on
  // every data rank (fine_tuning_problem): the others are not weighed, nor counted impossible.
  const bool tuned = request.arch.lora.enabled();
  // Nor are experts over tensor ranks beside expert ranks (experts_problem): fixed expert ranks
  // leave one tensor rank.
  const bool expert_ranks_fixed = request.arch.moe.enabled() && fixed.ep && *fixed.ep > 1;
  OpenValues open;
  open.offloads = {Offload::kNone, Offload::kOptimizer, Offload::kParameters,
                   Offload::kActivations};
  if (tuned) open.offloads = {Offload::kNone, Offload::kOptimizer, Offload::kActivations};
  if (request.engine_only) open.offloads = {Offload::kNone, Offload::kActivations};
  if (fixed.offload) open.offloads = {*fixed.offload};
  open.tps =
      values_or(fixed.tp, tuned || expert_ranks_fixed ? std::vector<int64_t>{1}
                                                      : divisors(request.cluster.node_gpus()));
  std::vector<int64_t> cps;
  for (int64_t cp : powers_of_two_up_to(request.engine_only || tuned ? 1 : gpus)) {
    if (cp == 1 || request.arch.seq_len / cp >= kMinContextTokens) cps.push_back(cp);
  }
  open.cps = values_or(fixed.cp, cps);
  const int64_t most_pp = std::min(request.arch.layers, gpus);
  std::vector<int64_t> pps;
  for (int64_t pp = 1; pp <= most_pp; ++pp) pps.push_back(pp);
  open.pps = values_or(fixed.pp, pps);
  open.zeros = tuned ? std::vector<int64_t>{0, 1, 2} : std::vector<int64_t>{0, 1, 2, 3};
  if (fixed.zero) open.zeros = {*fixed.zero};
  return open;
}

// Data × context ranks that may split a mixture of experts' experts: those dividing both (1 for
// a dense model, and for experts already split over `tp` tensor ranks).
std::vector<int64_t> expert_ranks(const LayoutRequest& request, int64_t data_ranks, int64_t tp) {
  std::vector<int64_t> found;
  for (int64_t ep : divisors(tp > 1 ? 1 : data_ranks)) {
    if (ep == 1 || (request.arch.moe.enabled() && request.arch.moe.experts % ep == 0)) {
      found.push_back(ep);
    }
  }
  return values_or(request.fixed.ep, found);
}

// Sequences per micro-batch that divide each data-parallel replica's share of the batch.
std::vector<int64_t> micro_batches(const LayoutRequest& request, int64_t dp) {
  const int64_t per_replica = request.global_batch % dp == 0 ? request.global_batch / dp : 0;
  std::vector<int64_t> batches = {1};
  if (per_replica > 0) {
    batches = divisors(std::min({per_replica, kMaxMicroBatch, countable_micro_batch(request)}));
  }
  batches.erase(std::remove_if(batches.begin(), batches.end(),
                               [&](int64_t b) { return per_replica % b != 0; }),
                batches.end());
  return values_or(request.fixed.micro_batch, batches);
}

// Every combination the request leaves open, in a fixed order.
template <typename Visit>
void for_each_layout(const LayoutRequest& request, Visit visit) {
  const FixedDimensions& fixed = request.fixed;
  const int64_t gpus = request.cluster.gpus;
  const int64_t layers = request.arch.layers;
  const OpenValues open = open_values(request);
  for (int64_t tp : open.tps) {
    std::vector<bool> sps = {false, true};
    if (fixed.sp) sps = {*fixed.sp};
    for (bool sp : sps) {
      if (sp && tp == 1 && !fixed.sp) continue;
      for (int64_t cp : open.cps) {
        for (int64_t pp : open.pps) {
          const int64_t model_ranks = tp * cp * pp;
          if (model_ranks <= 0 || gpus % model_ranks != 0) {
            if (fixed.tp && fixed.pp && fixed.cp) visit(degrees(tp, pp, cp, 0, sp));
            continue;
          }
          const int64_t dp = gpus / model_ranks;
          if (fixed.dp && *fixed.dp != dp) {
            visit(degrees(tp, pp, cp, *fixed.dp, sp));
            continue;
          }
          std::vector<int64_t> vps = {1};
          for (int64_t v = 2; pp > 1 && v <= kMaxVirtualStages && pp * v <= layers; ++v) {
            vps.push_back(v);
          }
          // A split given as a list has a count for each chunk: so many a stage.
          const auto given_chunks = static_cast<int64_t>(fixed.pp_split.size());
          if (given_chunks > 0) vps = {given_chunks / pp};
          const std::vector<int64_t> batches = micro_batches(request, dp);
          for (int64_t ep : expert_ranks(request, dp * cp, tp)) {
            for (int64_t vp : values_or(fixed.vp, vps)) {
              // The fixed policy's for each rank, once for every layout of these chunks (one cut
              // at the chunks' edges comes with fixed degrees and a split by rule or list).
              std::vector<std::string> policies;
              if (fixed.checkpoint) {
                const bool cut = !is_searched_policy(CheckpointPolicy::parse(*fixed.checkpoint));
                const std::vector<int64_t> split = !cut || !fixed.pp_split.empty()
                                                       ? fixed.pp_split
                                                       : rule_split(request.arch.layers, pp, vp);
                policies = rank_policies(*fixed.checkpoint, pp, vp, split);
              }
              for (int64_t b : batches) {
                const int64_t accum = std::max<int64_t>(1, request.global_batch / dp / b);
                for (int64_t zero : open.zeros) {
                  for (Offload offload : open.offloads) {
                    // Over one data-parallel rank every stage shards nothing: ZeRO only for the
                    // offload that needs its stage (ZeRO-Offload on a single GPU).
                    const bool needed = (offload == Offload::kOptimizer && zero == 1) ||
                                        (offload == Offload::kParameters && zero == 3);
                    if (!fixed.zero && dp * cp == 1 && zero > 0 && !needed) continue;
                    Layout layout = degrees(tp, pp, cp, dp, sp);
                    layout.ep = ep;
                    layout.vp = vp;
                    layout.zero = static_cast<int>(zero);
                    layout.micro_batch = b;
                    layout.accum = accum;
                    layout.offload = offload;
                    layout.stage_checkpoints = policies;
                    visit(layout);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

LayoutPoint point_of(const LayoutEvaluation& evaluation, const Layout& layout) {
  return {layout, evaluation.memory.total(), evaluation.step_s, evaluation.fits,
          evaluation.device_fits};
}

// Offloading activations when no stage recomputes moves nothing: the same layout as without.
bool offloads_nothing(const LayoutEvaluation& evaluation) {
  return evaluation.layout.offload == Offload::kActivations && !evaluation.recomputes;
}

// The layouts are counted first (far cheaper than weighing them): a search that would run for
// minutes is refused with what narrows it.
void require_searchable(const LayoutRequest& request) {
  int64_t candidates = 0;
  for_each_layout(request, [&candidates](const Layout&) { ++candidates; });
  if (candidates > kMaxCandidates) {
    throw InvalidInput("layout", std::to_string(candidates) +
                                     " layouts to weigh, more than the planner searches (" +
                                     std::to_string(kMaxCandidates) +
                                     "): fix some of --tp, --pp, --cp, --micro-batch or --zero");
  }
}

// Searching only what RematLab's engine runs: why it does not run `layout`, or nothing.
std::string engine_problem(const LayoutRequest& request, const Layout& layout) {
  if (!shard_trains_in(engine_shard(layout), request.precision)) {
    return "RematLab's engine shards parameters (ZeRO 3) in fp32 only";
  }
  std::string lack = engine_pipeline_lack(layout);
  if (lack.empty()) lack = engine_experts_lack(request, layout);
  return lack.empty() ? "" : "RematLab's engine does not run " + lack;
}

}  // namespace

LayoutAnswer search_layouts(const LayoutRequest& request, const std::atomic<bool>* cancel) {
  validate(request);
  const auto started = std::chrono::steady_clock::now();
  require_searchable(request);
  LayoutEvaluator evaluator(request);
  LayoutAnswer answer;
  std::string first_problem;
  auto stop_if_cancelled = [cancel] {
    if (cancel && cancel->load(std::memory_order_relaxed)) throw SearchCancelled{};
  };
  for_each_layout(request, [&](const Layout& layout) {
    stop_if_cancelled();
    std::string problem = structural_problem(request, layout);
    if (problem.empty() && request.engine_only) problem = engine_problem(request, layout);
    if (!problem.empty()) {
      ++answer.impossible;
      if (first_problem.empty()) first_problem = problem;
      return;
    }
    const LayoutEvaluation evaluation = evaluator.evaluate(layout, /*detail=*/false);
    if (!offloads_nothing(evaluation)) answer.points.push_back(point_of(evaluation, layout));
  });
  stop_if_cancelled();
  if (answer.points.empty()) {
    throw InvalidInput("layout", first_problem.empty() ? "no layout to evaluate" : first_problem);
  }

  std::vector<const LayoutPoint*> fitting;
  std::vector<const LayoutPoint*> over;
  for (const LayoutPoint& point : answer.points) (point.fits ? fitting : over).push_back(&point);
  // Equally fast, the smaller first; ties beyond keep the search's order (stable).
  std::stable_sort(fitting.begin(), fitting.end(), [](const auto* a, const auto* b) {
    return a->step_s < b->step_s || (a->step_s == b->step_s && a->memory_bytes < b->memory_bytes);
  });
  std::stable_sort(over.begin(), over.end(),
                   [](const auto* a, const auto* b) { return a->memory_bytes < b->memory_bytes; });
  const size_t top = static_cast<size_t>(request.top);
  for (size_t i = 0; i < std::min(top, fitting.size()); ++i) {
    answer.best.push_back(evaluator.evaluate(fitting[i]->layout));
  }
  for (size_t i = 0; i < std::min(top, over.size()); ++i) {
    answer.nearest.push_back(evaluator.evaluate(over[i]->layout));
  }
  const LayoutPoint* host_limited = nullptr;
  for (const LayoutPoint* point : over) {
    if (point->layout.offload == Offload::kNone && answer.nearest_without_offload.size() < top) {
      answer.nearest_without_offload.push_back(evaluator.evaluate(point->layout));
    }
    if (point->device_fits && (!host_limited || point->step_s < host_limited->step_s)) {
      host_limited = point;
    }
  }
  // Worth saying only when it would beat what already fits.
  const bool faster =
      fitting.empty() || (host_limited && host_limited->step_s < fitting[0]->step_s);
  if (host_limited && faster) {
    answer.with_more_host.push_back(evaluator.evaluate(host_limited->layout));
  }
  // The frontier: by memory, each one faster than every smaller one.
  std::vector<const LayoutPoint*> by_memory = fitting;
  std::stable_sort(by_memory.begin(), by_memory.end(), [](const auto* a, const auto* b) {
    return a->memory_bytes < b->memory_bytes ||
           (a->memory_bytes == b->memory_bytes && a->step_s < b->step_s);
  });
  double fastest = 0.0;
  for (const LayoutPoint* point : by_memory) {
    if (answer.frontier.empty() || point->step_s < fastest) {
      answer.frontier.push_back(evaluator.evaluate(point->layout));
      fastest = point->step_s;
    }
  }
  answer.search_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return answer;
}

}  // namespace rematlab::layout
