// The training lifecycle: build → step (forward, backward, update) → metrics.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>

#include "checkpoint/checkpoint_policy.h"
#include "checkpoint/replay_state.h"
#include "data/batch_source.h"
#include "memory/memory_tracker.h"
#include "model/transformer.h"
#include "offload/offload_store.h"
#include "parallel/gradient_exchange.h"
#include "parallel/pipeline_exchange.h"
#include "plan/plan_policy.h"
#include "run/run_config.h"
#include "run/run_summary.h"
#include "run/step_metrics.h"
#include "runtime/numerics.h"
#include "train/loss_scaler.h"

namespace rematlab {

struct TrainerCallbacks {
  std::function<void(const StepMetrics&)>
      on_step;                                // called after every step, on the trainer's thread
  const std::atomic<bool>* cancel = nullptr;  // read between micro-batches
  // False for runs whose speed nobody reads (max-batch probes): no MFU, so no peak to measure.
  bool report_utilisation = true;
};

// A Trainer measures memory on the thread that constructs it: construct and run it on one thread.
class Trainer {
 public:
  // Validates `config` (throws InvalidInput) and builds the model, data and optimizer. With an
  // `exchange` (data parallelism, core/parallel) this process trains its share of every global
  // batch and averages gradients with the others; config.world_size must be its world size.
  // A plan:BUDGET run profiles its chain here unless the config carries kept costs; `cancel`
  // stops that profile (plan::ProfileCancelled).
  explicit Trainer(RunConfig config, std::shared_ptr<parallel::GradientExchange> exchange = nullptr,
                   const std::atomic<bool>* cancel = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Runs every step; a budget overrun, divergence or cancel ends the run with that status.
  RunSummary run(const TrainerCallbacks& callbacks = {});

  // Forward and backward of one step's micro-batches under `plan`, without the update: the
  // gradients are left in the parameters. Returns the mean loss, or nothing when `cancel` was
  // set before a micro-batch. Used by the gradient check.
  std::optional<double> accumulate_gradients(const CheckpointPlan& plan,
                                             const std::atomic<bool>* cancel = nullptr);

  // The peak FLOP/s MFU and HFU are taken against, and where it came from (given after the
  // trainer is built, so that bad input fails before a runs database is opened).
  void use_peak_flops(double flops, const std::string& source);

  // The next micro-batch of this run's data (as step() draws them), for replays that walk the
  // model piece by piece (core/advise).
  TokenBatch next_batch();
  // The autocast state the run's forward passes enter (bf16 / fp16); none under fp32.
  const std::optional<AutocastSnapshot>& autocast() const { return autocast_; }

  Transformer& model() { return model_; }
  const RunConfig& config() const { return config_; }
  const c10::Device& device() const { return device_; }
  const CheckpointPolicy& policy() const { return policy_; }

 private:
  struct Cancelled {};
  StepMetrics step(int64_t index, const TrainerCallbacks& callbacks);
  // The step's micro-batches, forward and backward, without the update: the sum of their
  // losses (a pipeline's last stage's), or nothing when `cancel` was set before one began.
  std::optional<double> micro_batches(const CheckpointPlan& plan, StepMetrics& metrics,
                                      const std::atomic<bool>* cancel);
  double micro_batch(const CheckpointPlan& plan, StepMetrics& metrics, bool last);
  // A pipeline stage's share of the step's micro-batches, in its schedule's order; the sum of
  // their losses on the last stage, 0 elsewhere.
  double pipeline_micro_batches(const CheckpointPlan& plan, StepMetrics& metrics);
  // A pipeline stage keeps its chunks of the model and gives the exchange its schedule.
  void keep_pipeline_chunks();
  // What a micro-batch's backward through a chunk needs from its forward: the chunk's input (its
  // gradient goes back) and its output (the loss where the chunk ends the chain).
  struct PipelineFlight {
    torch::Tensor input;
    torch::Tensor output;
  };
  // One chunk's forward of one micro-batch: received (or embedded), run, and sent on (or its
  // loss formed). `batch` is the micro-batch's where the chunk begins or ends the chain.
  PipelineFlight pipeline_forward(const parallel::PipelineAction& action, const TokenBatch* batch,
                                  const CheckpointPlan& plan);
  bool cancel_requested(const std::atomic<bool>* cancel);
  void update_parameters(StepMetrics& metrics);
  void record_flops(RunSummary& summary) const;

  RunConfig config_;
  ScopedNumerics numerics_;  // before anything touches the device: it may set CUDA's environment
  c10::Device device_;
  // plan:BUDGET: profiled and planned before the tracker starts, so the profile's own tensors
  // are gone before the run measures anything; config_.checkpoint is then the chosen list.
  std::optional<PlannedPolicy> planned_;
  CheckpointPolicy policy_;
  MemoryTracker tracker_;
  std::unique_ptr<BatchSource> data_;
  Transformer model_{nullptr};
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::optional<LossScaler> scaler_;          // fp16 only
  std::optional<AutocastSnapshot> autocast_;  // bf16 / fp16
  std::unique_ptr<OffloadStore> offload_;     // --offload disk
  // Declared after the model: destroyed first, so no gradient hook outlives what it reaches.
  std::shared_ptr<parallel::GradientExchange> exchange_;  // data parallel; null alone
  parallel::PipelineExchange* pipeline_ = nullptr;        // exchange_ when it is a pipeline
};

// A Trainer, with `on_setup` (if given) told true before it is built and false once it is built
// or failed: building the model and data, and profiling them for a plan, report nothing else for
// a while, and someone waiting for progress may want to know.
std::unique_ptr<Trainer> build_trainer(const RunConfig& config,
                                       const std::function<void(bool)>& on_setup,
                                       const std::atomic<bool>* cancel = nullptr);

}  // namespace rematlab
