// What one optimizer step reports to every listener (CLI printer, database writer, GUI).
// Plain values only, so it can cross threads by copy.
#pragma once

#include <cstdint>
#include <limits>

namespace rematlab {

struct StepMetrics {
  int64_t step = 0;  // 0-based
  int64_t total_steps = 0;
  bool warmup = false;  // excluded from the run's medians
  double loss = 0.0;    // mean over the step's micro-batches
  double grad_norm = 0.0;
  double loss_scale = 1.0;  // fp16 dynamic loss scale (1 otherwise)
  bool skipped = false;     // fp16: non-finite gradients, update skipped
  double step_ms = 0.0;
  double forward_ms = 0.0;
  double backward_ms = 0.0;  // recomputation included
  double optimizer_ms = 0.0;
  double tokens_per_s = 0.0;
  int64_t current_bytes = 0;   // live at the end of the step
  int64_t baseline_bytes = 0;  // live when the step began
  int64_t peak_bytes = 0;
  int64_t peak_activation_bytes = 0;  // peak_bytes - baseline_bytes
  // CUDA only (0 on CPU). The allocator's counters above count live tensors; these show what
  // the device really holds: the caching allocator's reserved blocks (its peak within the step)
  // and the device's used memory as nvidia-smi shows it (CUDA context and library workspaces
  // included, other processes too), read at the end of the step.
  int64_t reserved_bytes = 0;
  int64_t device_used_bytes = 0;
  // Live bytes above the baseline when forward ends (largest over micro-batches): what the
  // graph keeps for backward, before backward's own transients and recomputation.
  int64_t saved_activation_bytes = 0;
  int64_t offloaded_peak_bytes = 0;  // most bytes held off the device by offload at once
  double offload_wait_ms = 0.0;      // backward blocked on offloaded inputs coming back
  int64_t rss_bytes = 0;
  int64_t rss_peak_bytes = 0;
  int64_t checkpoint_interval = 0;  // K of every:K in force (schedule too); 0 if none
  int64_t recomputed_segments = 0;
  // Data parallel (0 alone): collectives in flight during the step (the union of their
  // intervals) and the time the training thread was blocked on them; comm_ms - comm_wait_ms ran
  // hidden behind backward and recomputation.
  double comm_ms = 0.0;
  double comm_wait_ms = 0.0;
  // Fully sharded parameters (0 otherwise): all-gathers of parameter units in the step, and how
  // many of them recomputation added (model/parameter_units.h).
  int64_t parameter_gathers = 0;
  int64_t recompute_gathers = 0;
  // A pipeline stage (0 otherwise), within comm_wait_ms: blocked until a neighbouring stage
  // reached a message (sent what this stage waits for, or came to take what it sent: the bubble,
  // fill, drain and any stage slower than this one), and blocked while an activation or gradient
  // passed once its neighbour had sent it (the transfer).
  double bubble_ms = 0.0;
  double transfer_ms = 0.0;
  // A mixture of experts: its blocks' mean load-balancing loss over the step's micro-batches
  // (model/balance_loss.h; k when every expert gets its share); NaN for a dense model.
  double balance_loss = std::numeric_limits<double>::quiet_NaN();
  // A mixture of experts (NaN dense): the most rows one expert took in one block's forward, over
  // its share were the tokens' choices spread evenly (1: balanced); the largest over the step's
  // micro-batches, blocks and ranks.
  double expert_load = std::numeric_limits<double>::quiet_NaN();
  // Expert parallelism (NaN otherwise): the rows one rank's experts took in the step's forwards
  // over the rows its own tokens sent them (1: balanced; its experts' activations hold this many
  // times a balanced rank's), summed over blocks and micro-batches; the largest over ranks.
  double expert_rank_load = std::numeric_limits<double>::quiet_NaN();
  // Expert parallelism (NaN otherwise): the same ratio for one block's forward alone, the largest
  // over blocks, micro-batches and ranks (at least expert_rank_load): what a recomputed block's
  // experts hold, where the step's sum averages the blocks away.
  double expert_block_load = std::numeric_limits<double>::quiet_NaN();
  // Expert parallelism (0 otherwise), within comm_wait_ms: blocked in the all-to-all exchanges
  // that carry tokens' rows to their experts' ranks and back (forward, backward, recomputation).
  double dispatch_ms = 0.0;
};

}  // namespace rematlab
