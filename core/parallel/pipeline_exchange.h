// Pipeline parallelism over P ranks, one stage each: stage s runs its share of the blocks (the
// first also the embedding, the last also the final norm, the head and the loss), in V chunks
// under the interleaved schedule, and hands each micro-batch's output to the next virtual stage
// and its input's gradient back to the previous one, point to point (from the last stage to the
// first between a micro-batch's rounds through the stages). Every stage of a pipeline trains the
// same rows of every global batch; its own parameters get their whole gradients from its own
// backward, so the update needs no reduction but two: a tied head's weight, which the first and
// the last stage both hold and whose gradients they add, and the gradient norm, whose squares
// every stage adds to. Several pipelines are data ranks: each stage's gradients are first
// averaged over the pipelines (an all-reduce per parameter after the step's micro-batches, not
// overlapped with them). Not yet combined with tensor parallelism or sharding (run_config's
// validate refuses those).
#pragma once

#include <torch/torch.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/dist_context.h"
#include "parallel/gradient_exchange.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/shard_update.h"

namespace rematlab::parallel {

class PipelineExchange final : public GradientExchange {
 public:
  // `stages` ranks a pipeline; with D·P ranks, rank r is stage r / D of pipeline r mod D, and the
  // D pipelines are data ranks, each training its own rows, their gradients averaged stage by
  // stage before the update.
  PipelineExchange(std::shared_ptr<DistContext> world, int64_t stages);
  ~PipelineExchange() override;

  int64_t stage() const { return pipe_->rank(); }
  int64_t stages() const { return pipe_->world_size(); }
  bool first() const { return stage() == 0; }
  bool last() const { return stage() + 1 == stages(); }

  // The order every stage runs (the same on every rank; before the first step). It tells which
  // chunks begin and end the chain, and when a send was taken: once its receiver sent this
  // stage something from a later action of its own.
  void use_schedule(const PipelineSchedule& schedule);
  // Chunk `chunk` of this stage begins the chain (the embedding) or ends it (head and loss).
  const PipelineSchedule& schedule() const { return schedule_.value(); }
  bool begins_chain(int64_t chunk) const { return first() && chunk == 0; }
  bool ends_chain(int64_t chunk) const;

  // To the next virtual stage: a micro-batch's output of this stage's chunk `chunk`. Returns at
  // once; the tensor is held until the receiver took it, which a later receive from it proves,
  // so a stage holds only what its neighbours have not reached yet.
  void send_output(const torch::Tensor& output, int64_t chunk, int64_t micro_batch);
  // From the previous virtual stage: its output for `micro_batch`, the input of chunk `chunk`.
  torch::Tensor receive_input(at::IntArrayRef sizes, const at::TensorOptions& options,
                              int64_t chunk, int64_t micro_batch);
  // To the previous virtual stage: the gradient of the input chunk `chunk` received.
  void send_input_gradient(const torch::Tensor& gradient, int64_t chunk, int64_t micro_batch);
  // From the next virtual stage: the gradient of chunk `chunk`'s output for `micro_batch`.
  torch::Tensor receive_output_gradient(at::IntArrayRef sizes, const at::TensorOptions& options,
                                        int64_t chunk, int64_t micro_batch);
  // Waits until every send went out; called once a step's micro-batches are done.
  void finish_sends();

  // A tied head: the token embedding's weight, which the first stage uses as the embedding and
  // the last as the head; their gradients are added before the update (on other stages a no-op).
  void share_gradient_of(const torch::Tensor& weight);

  void attach(const std::vector<torch::Tensor>& params) override;
  // The pipelines train different rows: one data rank each.
  int64_t world_size() const override { return all_->world_size() / pipe_->world_size(); }
  int64_t rank() const override { return all_->rank() % world_size(); }
  bool any_rank(bool local) override;
  // The step's loss, which only the last stage forms: its value on every stage.
  double mean(double local) override;
  std::vector<double> max_over_ranks(const std::vector<double>& local) override;
  void before_backward(bool /*last*/) override {}
  void after_backward(bool /*last*/) override {}
  std::optional<double> step(torch::optim::Optimizer& optimizer, double max_norm) override;
  void report(StepMetrics& metrics) override;

  // This stage's weights, gradients and AdamW moments, as measured at the last report.
  const ModelStateBytes& model_state_bytes() const { return state_bytes_; }

 private:
  struct Pending {
    torch::Tensor tensor;  // alive until sent: declared first, so destroyed after the work
    c10::intrusive_ptr<c10d::Work> work;
    int to = 0;            // the receiving stage
    int64_t taken_at = 0;  // the position of the receiver's action that takes it
  };
  // One message between virtual stages: `sender` virtual stage's output (or, `gradient`, its
  // input's gradient) for `micro_batch`.
  struct Message {
    int64_t sender = 0;
    int64_t micro_batch = 0;
    bool gradient = false;
  };
  int stage_of(int64_t virtual_stage) const;
  int64_t chunk_of(int64_t virtual_stage) const;
  // The receiver's action that takes `message`, and the sender's that sent it.
  PipelineAction receiving_action(const Message& message) const;
  PipelineAction sending_action(const Message& message) const;
  int tag_of(const Message& message) const;
  void send(const torch::Tensor& tensor, const Message& message);
  torch::Tensor receive(at::IntArrayRef sizes, const at::TensorOptions& options,
                        const Message& message, const std::string& what);
  // Waits for the sends to `to` its action at `position` or before took, and lets them go.
  void release_taken(int to, int64_t position);
  void wait_for_all(std::deque<Pending>& sent);
  void add_tied_gradients();

  std::shared_ptr<DistContext> all_;   // every rank
  std::shared_ptr<DistContext> pipe_;  // this pipeline's stages
  std::shared_ptr<DistContext> data_;  // this stage's ranks in every pipeline; null with one
  void average_over_pipelines();
  std::vector<torch::Tensor> params_;
  torch::Tensor tied_;  // undefined: no tied head, or not held here
  std::optional<PipelineSchedule> schedule_;
  // Sends not yet known to be taken, oldest first: activations and their gradients; the tied
  // head's gradient.
  std::deque<Pending> sent_;
  std::deque<Pending> tied_sent_;
  double wait_ms_ = 0.0;                          // blocked on a neighbour since the last report
  torch::optim::Optimizer* optimizer_ = nullptr;  // the last step's, for its state's size
  ModelStateBytes state_bytes_;
};

}  // namespace rematlab::parallel
