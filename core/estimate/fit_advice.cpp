#include "estimate/fit_advice.h"

#include <vector>

#include "estimate/activation_memory.h"
#include "estimate/estimate.h"
#include "estimate/sharded_states.h"

namespace rematlab::estimate {
namespace {

struct Rung {
  std::string checkpoint;
  bool sliced_loss = false;
  bool offload = false;
};

// Policies by what they recompute: nothing; the attention core; every block (at the interval
// whose peak is lowest); the same with the head and loss in slices (one more head forward); and
// with each segment's input off the device (disk traffic on top).
std::vector<Rung> ladder(const FitQuestion& question) {
  ActivationInput input;
  input.arch = question.arch;
  input.batch = question.batch;
  input.precision = question.precision;
  const std::string blocks = "every:" + std::to_string(best_interval(input, nullptr));
  std::vector<Rung> rungs = {{"none"}, {"selective"}, {blocks}};
  if (question.arch.loss_chunks <= 1) rungs.push_back({blocks, true});
  rungs.push_back({blocks, question.arch.loss_chunks <= 1, true});
  return rungs;
}

}  // namespace

std::optional<FitAdvice> advise_fit(const FitQuestion& question, int64_t memory_bytes) {
  const ModelStateBytes whole =
      model_state_bytes(question.params, question.precision, question.optimizer);
  // The ranks asked for as asked; then more ranks, each sharding gradients and optimizer state.
  std::vector<std::pair<int64_t, std::string>> layouts = {{question.world_size, question.shard}};
  for (int64_t ranks = 2; ranks <= question.max_world_size; ranks *= 2) {
    if (ranks > question.world_size) layouts.emplace_back(ranks, "gradients");
  }
  const std::vector<Rung> rungs = ladder(question);
  for (const auto& [ranks, shard] : layouts) {
    const int64_t states = per_rank_model_states(whole, ranks, shard).total();
    if (states >= memory_bytes) continue;
    for (const Rung& rung : rungs) {
      Architecture arch = question.arch;
      if (rung.sliced_loss) {
        arch.loss_chunks = resolve_loss_chunks(kAutoLossChunks, arch.vocab, arch.d_model);
      }
      const int64_t needed =
          states + estimate_policy_activations(arch, question.batch, question.precision,
                                               rung.checkpoint, rung.offload)
                       .peak_bytes;
      if (needed <= memory_bytes) {
        return FitAdvice{rung.checkpoint, arch.loss_chunks, rung.offload, ranks, shard, needed};
      }
    }
  }
  return std::nullopt;
}

}  // namespace rematlab::estimate
