// Everything that defines one training run; the unit a sweep expands into and the database keeps.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/precision.h"
#include "model/model_config.h"
#include "run/shard_mode.h"

namespace rematlab {

struct KnownChainCosts;  // run/chain_costs.h: only held here, by pointer

enum class OffloadKind { kNone, kHost, kDisk };
struct OffloadSpec {
  OffloadKind kind = OffloadKind::kNone;
  std::string directory;  // disk:DIR; empty for the system temp directory
};
OffloadSpec parse_offload(const std::string& text);  // throws InvalidInput("--offload", …)

// A checkpoint value that may carry its own offload, "POLICY" or "POLICY+OFFLOAD" (e.g.
// "every:1+disk"; the offload is none, host, disk or disk:DIR after a '+'), the one place that
// form is read: sweep axes, `study`, the window's list, and records read back.
struct PolicyAndOffload {
  std::string checkpoint;
  std::optional<std::string> offload;  // absent: the run's own --offload applies
};
PolicyAndOffload split_policy_and_offload(const std::string& text);

// Limits that keep absurd input from hanging or exhausting the machine before anything runs.
inline constexpr int64_t kMaxSteps = 1'000'000'000;
inline constexpr int64_t kMaxBatch = 1'000'000;
inline constexpr int kMaxWorldSize = 4096;  // processes in one run
int max_threads();                          // 4 × the hardware threads, at least 16

struct RunConfig {
  std::string preset = "tiny";
  ModelConfig model = ModelConfig{};
  int64_t batch = 8;         // micro-batch
  int64_t accum = 1;         // micro-batches per optimizer step
  int64_t steps = 20;        // optimizer steps
  int64_t warmup_steps = 1;  // excluded from medians (capped at steps - 1)
  double lr = 1e-3;
  double weight_decay = 0.01;
  double grad_clip = 1.0;  // max global gradient norm; 0 disables clipping
  uint64_t seed = 0;
  int threads = 0;  // LibTorch intra-op threads (and its BLAS); 0 keeps LibTorch's default
  Precision precision = Precision::kFp32;
  std::string device = "cpu";
  std::string checkpoint = "none";
  std::string offload = "none";  // none | host | disk[:DIR]
  std::string data = "synthetic";
  int64_t budget_bytes = 0;  // 0: no budget
  bool timeline = false;     // record one step's memory timeline
  // FLOP/s that MFU is taken against (0: measured once per process before training) and where
  // it came from (store/peak_flops_registry.h). Not part of the stored config: the run's result
  // records the peak it used.
  double peak_flops = 0.0;
  std::string peak_flops_source;
  // fp16 dynamic loss scaling: the first scale, and how many good steps in a row double it.
  double loss_scale = 65536.0;
  int64_t loss_scale_growth_interval = 2000;
  // Process-wide LibTorch switches, set while the run's Trainer lives (core/runtime/numerics.h).
  bool tf32 = false;           // CUDA fp32 matmuls on TF32 tensor cores; no effect on CPU
  bool deterministic = false;  // deterministic algorithms only (an error where none exists)
  // Data parallel (core/parallel): processes that each train `batch` rows of every global batch,
  // what they partition (none | optimizer | gradients | parameters) and the gradient bucket size.
  int64_t world_size = 1;
  std::string shard = "none";
  int64_t bucket_bytes = int64_t{25} << 20;
  // Tensor parallelism: ranks that split every layer of one model (attention heads, MLP width,
  // vocabulary); world_size / tp of those groups train as data parallelism does.
  int64_t tp = 1;
  // With tp: the residual stream and the norms between the layers split along the sequence.
  bool sequence_parallel = false;
  // Pipeline parallelism: ranks that each run a share of the blocks, one after another, the
  // step's `accum` micro-batches flowing through them in 1F1B order (parallel/pipeline_schedule);
  // with virtual_stages V > 1 each rank runs V chunks of the blocks, interleaved. A stage may be
  // tp tensor ranks; world_size / (pp · tp) pipelines train as data ranks.
  int64_t pp = 1;
  int64_t virtual_stages = 1;
  // --pp-split: the blocks of each of the pp · virtual_stages model chunks in chain order (chunk
  // c·P + s is stage s's c-th); empty, they split as checkpoint/stage_blocks.h's rule does.
  std::vector<int64_t> pp_split;
  // --pp-split balanced: pp_split chosen when the run starts from the chain's measured costs
  // (plan/balanced_split.h); the record keeps the split chosen, its name says "balanced".
  bool pp_split_balanced = false;
  // Once balanced (not recorded in the config): each chunk's measured forwards and backwards
  // over a step, as the split was chosen from them (`run` prints them, its --json carries them).
  std::vector<double> pp_split_chunk_ms;
  // Expert parallelism: data ranks that split a mixture of experts' experts between them, each
  // token's rows sent to its expert's rank and back (all-to-all); the data ranks in groups of
  // ep, each group holding every expert once.
  int64_t ep = 1;
  // For `plan:`: the chain's costs measured earlier for this configuration, kept in the runs
  // database (store/profile_registry.h), so that the run plans without profiling again. Used
  // only while its key still matches the config (a max-batch probe changes the batch). Not
  // part of the stored config.
  std::shared_ptr<const KnownChainCosts> known_chain_costs;

  int64_t timed_warmup_steps() const;
  // Where each model chunk's blocks begin and end (pp_split's, or the rule's). Of a validated
  // config: throws std::invalid_argument for a split validate() refuses.
  std::vector<int64_t> chunk_bounds() const;
  // The ranks that train different rows: world_size / (tp × pp).
  int64_t data_ranks() const {
    // Divided in turn rather than by tp·pp: a stored record's degrees may be anything, and
    // their product could overflow.
    return std::max<int64_t>(1, world_size / std::max<int64_t>(1, tp) / std::max<int64_t>(1, pp));
  }
  // Per data-parallel rank: the tensor ranks and stages of one data rank train the same tokens.
  int64_t tokens_per_step() const { return batch * accum * model.seq_len; }
};

// Whether `model` splits over tp ≥ 2 tensor ranks (and its sequence too, under sequence
// parallelism): tp divides the heads, the MLP width and the vocabulary, and divides the
// key/value heads or is a multiple of them. Throws InvalidInput("--tp", …) naming the first that
// does not. `run` and `estimate` share it.
void validate_tensor_split(const ModelConfig& model, int64_t tp, bool sequence_parallel);
// The precisions each shard mode trains in (InvalidInput("--shard") else); estimate asks too.
void validate_shard_precision(ShardMode shard, Precision precision);
// The refusal of a layout a mixture of experts does not train under (tensor or pipeline ranks,
// sharded parameters), attributed to `flag`; `run` and `estimate` share it.
InvalidInput experts_layout_not_built(const std::string& flag);
// --ep on its own: 1 to kMaxWorldSize expert ranks that divide `moe`'s experts and the data
// ranks (InvalidInput("--ep") else); `run` and `estimate` share it.
void validate_expert_ranks(int64_t expert_ranks, const MoeOptions& moe, int64_t data_ranks);
// What splits `experts` further than `expert_ranks` on `world_size` ranks: each larger count of
// expert ranks that divides the experts, on the fewest ranks from `world_size` up that it
// divides (more ranks at the same split hold no less), up to `max_ranks`; fewest ranks first,
// then fewest expert ranks (the least all-to-all). Empty for counts no run could have.
struct ExpertSplit {
  int64_t ranks = 1;
  int64_t expert_ranks = 1;
};
std::vector<ExpertSplit> more_expert_splits(int64_t experts, int64_t expert_ranks,
                                            int64_t world_size, int64_t max_ranks);
bool shard_trains_in(ShardMode shard, Precision precision);  // validate_shard_precision passes

// Throws InvalidInput naming the offending flag. Checks that the device exists, that fp16 runs
// on CUDA only, that the checkpoint policy parses and that the offload mode is available.
void validate(const RunConfig& config);

nlohmann::json to_json(const RunConfig& config);
// to_json with every setting a report shows, also those the record keeps only where set beyond
// their default: pp, virtual_stages and ep (a run of one stage has one, not none).
nlohmann::json shown_json(const RunConfig& config);

// A short name for legends and run lists: policy, offload, batch and a non-default precision,
// e.g. "every:1+disk b8 bf16".
std::string describe_run(const RunConfig& config);
// The same with the batch said otherwise: "b=max" for a search not done yet.
std::string describe_run(const RunConfig& config, const std::string& batch);
// The model a run trained, for tables: its preset and shape, e.g. "tiny (2×64, seq 64)".
std::string describe_model(const RunConfig& config);

}  // namespace rematlab
