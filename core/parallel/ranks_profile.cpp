#include "parallel/ranks_profile.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "plan/chain_profile.h"
#include "plan/profile_key.h"

namespace rematlab::parallel {
namespace {

// Each figure of ChainCosts, in one order, for one collective: its times, then its byte counts.
std::vector<double*> times_of(ChainCosts& costs) {
  std::vector<double*> figures = {&costs.fixed_ms, &costs.embedding_ms, &costs.head_ms,
                                  &costs.time_scale};
  for (StageCost& stage : costs.stages) {
    figures.push_back(&stage.forward_ms);
    figures.push_back(&stage.backward_ms);
    figures.push_back(&stage.early_stop_saving_ms);
  }
  return figures;
}

std::vector<int64_t*> byte_counts_of(ChainCosts& costs) {
  std::vector<int64_t*> counts = {&costs.input_bytes, &costs.head_peak_bytes,
                                  &costs.embedding_backward_peak_bytes};
  for (StageCost& stage : costs.stages) {
    counts.push_back(&stage.kept_bytes);
    counts.push_back(&stage.output_bytes);
    counts.push_back(&stage.forward_transient_bytes);
    counts.push_back(&stage.backward_transient_bytes);
  }
  return counts;
}

}  // namespace

ChainCosts largest_over_ranks(const ChainCosts& costs, GradientExchange& exchange) {
  ChainCosts agreed = costs;
  const std::vector<double*> times = times_of(agreed);
  const std::vector<int64_t*> counts = byte_counts_of(agreed);
  std::vector<double> local;
  for (const double* time : times) local.push_back(*time);
  // Byte counts below 2^53 (1 PiB at most, chain_costs_json.h) are exact as doubles.
  for (const int64_t* count : counts) local.push_back(static_cast<double>(*count));
  const std::vector<double> largest = exchange.max_over_ranks(local);
  std::size_t index = 0;
  for (double* time : times) *time = largest[index++];
  for (int64_t* count : counts) *count = static_cast<int64_t>(largest[index++]);
  // A stage's early-stop saving stays within its forward (each the largest of its own).
  for (StageCost& stage : agreed.stages) {
    stage.early_stop_saving_ms = std::min(stage.early_stop_saving_ms, stage.forward_ms);
  }
  return agreed;
}

KnownChainCosts profile_over_ranks(const RunConfig& config, GradientExchange& exchange,
                                   const std::atomic<bool>* cancel) {
  plan::ProfileOptions options;
  options.cancel = cancel;
  options.tensor_parallel = exchange.tensor_parallel();
  const auto start = std::chrono::steady_clock::now();
  const ChainCosts mine = plan::profile_chain(config, options);
  const double profile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  KnownChainCosts known;
  known.key = plan::profile_key(config, options.repeats);
  known.costs = largest_over_ranks(mine, exchange);
  known.profile_ms = exchange.max_over_ranks({profile_ms}).front();
  known.source = "measured on each of " + std::to_string(config.world_size) +
                 " ranks, the largest of each figure";
  return known;
}

}  // namespace rematlab::parallel
