// What makes a layout possible at all, before memory: degrees that divide what they split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layout/layout.h"

namespace rematlab::layout {

// Empty when the layout can be built; else one line naming the first rule it breaks ("TP 3 does
// not divide 64 heads").
std::string structural_problem(const LayoutRequest& request, const Layout& layout);
// Of those rules, fine-tuning's (arch.lora enabled): LoRA is modelled on data ranks and pipeline
// stages only, with ZeRO 1 or 2 sharding the adapters' states and the base whole on each rank.
std::string fine_tuning_problem(const Layout& layout);
// Of those rules, a mixture of experts' (or EP on a dense model): its experts whole on each
// tensor rank is not modelled, so TP 1; ep divides the data ranks and the experts.
std::string experts_problem(const LayoutRequest& request, const Layout& layout);

// What RematLab's engine lacks to run `layout`'s pipeline (run_config's validate_pipeline
// refuses it); empty when it has no pipeline or the engine runs it.
std::string engine_pipeline_lack(const Layout& layout);
// What it lacks to train `layout`'s experts (run_config's validate_experts_layout refuses it):
// experts over pipeline stages, their parameters sharded, or their states sharded beside EP.
std::string engine_experts_lack(const LayoutRequest& request, const Layout& layout);

// The blocks of each of the p · v model chunks in chain order (as --pp-split takes them), split as
// the engine splits them where a run gives no --pp-split (stage_block_bounds: the middle ones
// ⌈L / (p · v)⌉ blocks, the first and the last what is left, as Llama 3 405B's first and last
// stages held one layer less, for the embedding and the head).
std::vector<int64_t> rule_split(int64_t layers, int64_t pp, int64_t vp);
// A chain's chunks by pipeline rank: rank r holds chunks r, r + p, … (v of them).
std::vector<std::vector<int64_t>> chunks_by_rank(const std::vector<int64_t>& split, int64_t pp);

// The vocabulary as Megatron-LM pads it: to a multiple of 128 · tp.
int64_t padded_vocab(int64_t vocab, int64_t tp);

// Limits far beyond any cluster or batch trained today, small enough that no count overflows.
inline constexpr int64_t kMaxGpus = int64_t{1} << 24;
inline constexpr int64_t kMaxGpusPerNode = 1024;
inline constexpr int64_t kMaxStepTokens = int64_t{1} << 40;

// The largest micro-batch whose figures the planner counts without overflow (0 when not even
// one sequence): the search tries no larger one.
int64_t countable_micro_batch(const LayoutRequest& request);

// Checks the request itself (cluster, batch) and each fixed degree on its own and against the
// others it is fixed with; throws InvalidInput naming the flag.
void validate(const LayoutRequest& request);

}  // namespace rematlab::layout
