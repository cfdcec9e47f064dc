#include "estimate/fit_advice.h"

#include <algorithm>
#include <map>
#include <vector>

#include "checkpoint/checkpoint_policy.h"
#include "estimate/activation_memory.h"
#include "estimate/estimate.h"
#include "estimate/fine_tuning.h"
#include "estimate/flops.h"
#include "estimate/sharded_states.h"
#include "estimate/sharded_units.h"
#include "run/run_config.h"
#include "run/shard_mode.h"

namespace rematlab::estimate {
namespace {

// Ranks in all, what their data ranks shard, and over how many of them the experts are split.
struct RankLayout {
  int64_t ranks = 1;
  std::string shard;
  int64_t expert_ranks = 1;
};

struct Rung {
  std::string checkpoint;
  bool sliced_loss = false;
  bool offload = false;
  double recomputed_flops = 0.0;
  // The peak under this rung: the same on any number of data ranks, but not of expert ranks
  // (each expert's share of rows comes from its group's ranks).
  int64_t activation_bytes = 0;
};

Architecture with_loss(const Architecture& arch, bool sliced) {
  Architecture shaped = arch;
  if (sliced) shaped.loss_chunks = resolve_loss_chunks(kAutoLossChunks, arch.vocab, arch.d_model);
  return shaped;
}

// Policies by the FLOPs they add to a step: nothing; the attention cores; every block (at the
// interval whose peak is lowest); each with the loss whole or in slices (one more head forward);
// then, last, the blocks with the segments' inputs off the device (transfers on top).
std::vector<Rung> ladder(const FitQuestion& question, int64_t best_k) {
  const std::string blocks = "every:" + std::to_string(best_k);
  std::vector<Rung> rungs;
  for (const std::string& policy : {std::string("none"), std::string("selective"), blocks}) {
    for (bool sliced : {false, true}) {
      if (sliced && question.arch.loss_chunks > 1) continue;  // already in slices
      const Architecture arch = with_loss(question.arch, sliced);
      const StepFlops flops =
          step_flops(arch, question.batch * arch.seq_len,
                     CheckpointPolicy::parse(policy).plan_for(arch.layers, 0.0));
      rungs.push_back({policy, sliced, false, flops.hardware - flops.model});
    }
  }
  std::stable_sort(rungs.begin(), rungs.end(), [](const Rung& a, const Rung& b) {
    return a.recomputed_flops < b.recomputed_flops;
  });
  rungs.push_back({blocks, question.arch.loss_chunks <= 1, true, 0.0});
  for (Rung& rung : rungs) {
    rung.activation_bytes =
        estimate_policy_activations(with_loss(question.arch, rung.sliced_loss), question.batch,
                                    question.precision, rung.checkpoint, rung.offload,
                                    question.optimizer, question.layout)
            .peak_bytes;
  }
  return rungs;
}

// The ranks asked for as asked, then sharding more of the model states over their data ranks;
// then more ranks (keeping the tensor-parallel degree), each sharding gradients and optimizer
// state, then the parameters too; with expert ranks, more of them instead.
std::vector<RankLayout> candidate_layouts(const FitQuestion& question) {
  const int64_t tp = question.layout.tp;
  const bool fine_tuning = question.arch.lora.enabled();
  const bool experts = question.arch.moe.enabled();
  // (fp16 shards the optimizer state only: its loss scaling needs whole gradients.)
  const ShardMode most = shard_trains_in(ShardMode::kGradients, question.precision)
                             ? ShardMode::kGradients
                             : ShardMode::kOptimizer;
  std::vector<RankLayout> layouts = {{question.world_size, question.shard, question.expert_ranks}};
  if (question.expert_ranks > 1) {
    // Expert ranks shard nothing (as `run` refuses both): more of them split the experts.
    for (const ExpertSplit& split :
         more_expert_splits(question.arch.moe.experts, question.expert_ranks, question.world_size,
                            question.max_world_size)) {
      layouts.push_back({split.ranks, "none", split.expert_ranks});
    }
  } else {
    const ShardMode asked = parse_shard(question.shard);
    for (const ShardMode more : {most, ShardMode::kParameters}) {
      // The frozen base stays whole; experts are not sharded as parameters yet.
      if ((fine_tuning || experts) && more == ShardMode::kParameters) continue;
      if (question.world_size / tp > 1 && asked < more) {
        layouts.push_back({question.world_size, to_string(more), 1});
      }
    }
    // More ranks would shard only the adapters' few states, never the frozen base: not offered.
    const int64_t most_ranks = fine_tuning ? question.world_size : question.max_world_size;
    for (int64_t ranks = 2 * tp; ranks <= most_ranks; ranks *= 2) {
      if (ranks <= question.world_size) continue;
      layouts.push_back({ranks, to_string(most), 1});
      if (!experts) layouts.push_back({ranks, "parameters", 1});
    }
  }
  return layouts;
}

}  // namespace

std::optional<FitAdvice> advise_fit(const FitQuestion& question, int64_t memory_bytes) {
  const bool fine_tuning = question.arch.lora.enabled();
  const int64_t tp = question.layout.tp;
  const ModelStateBytes whole =
      fine_tuning ? fine_tuning_state_bytes(question.arch, question.precision, question.optimizer)
                  : model_state_bytes(question.params, question.precision, question.optimizer);
  const std::vector<RankLayout> layouts = candidate_layouts(question);
  // Fully sharded, a rank's part reaches its device whole before it is sharded.
  const int64_t build_bytes = model_build_bytes(question.params);
  int64_t best_k = question.best_interval;
  if (best_k <= 0) {
    ActivationInput input;
    input.arch = question.arch;
    input.batch = question.batch;
    input.precision = question.precision;
    input.layout = question.layout;
    best_k = best_interval(input, nullptr);
  }
  std::map<int64_t, std::vector<Rung>> ladders;  // by expert ranks
  auto rungs_at = [&](int64_t expert_ranks) -> const std::vector<Rung>& {
    auto found = ladders.find(expert_ranks);
    if (found == ladders.end()) {
      FitQuestion split = question;
      split.arch.expert_ranks = expert_ranks;
      found = ladders.emplace(expert_ranks, ladder(split, best_k)).first;
    }
    return found->second;
  };
  for (const auto& [ranks, shard, expert_ranks] : layouts) {
    // One expert rank holds the shared weights and its part of the experts.
    const ModelStateBytes held =
        expert_ranks == question.expert_ranks
            ? whole
            : model_state_bytes(expert_rank_parameter_count(question.arch, expert_ranks),
                                question.precision, question.optimizer);
    int64_t states = per_rank_model_states(held, ranks / tp, shard).total();
    if (!shard_trains_in(parse_shard(shard), question.precision)) continue;  // as `run` refuses it
    if (parse_shard(shard) == ShardMode::kParameters) {
      if (build_bytes > memory_bytes) continue;
      states += gathered_unit_bytes(question.arch, question.precision, tp);
    }
    if (states >= memory_bytes) continue;
    for (const Rung& rung : rungs_at(expert_ranks)) {
      const int64_t needed = states + rung.activation_bytes;
      if (needed <= memory_bytes) {
        const int64_t chunks = with_loss(question.arch, rung.sliced_loss).loss_chunks;
        return FitAdvice{rung.checkpoint, chunks, rung.offload, ranks, shard, expert_ranks, needed};
      }
    }
  }
  return std::nullopt;
}

}  // namespace rematlab::estimate
