// Pipeline parallelism over P ranks, one stage each: stage s runs its share of the blocks (the
// first also the embedding, the last also the final norm, the head and the loss) and hands each
// micro-batch's output to stage s + 1 and its input's gradient back to stage s − 1, point to
// point. Every stage trains the same rows of every global batch; its own parameters get their
// whole gradients from its own backward, so the update needs no reduction but two: a tied head's
// weight, which the first and the last stage both hold and whose gradients they add, and the
// gradient norm, whose squares every stage adds to. Not yet combined with tensor or data
// parallelism (run_config's validate refuses that).
#pragma once

#include <torch/torch.h>

#include <deque>
#include <memory>
#include <vector>

#include "parallel/dist_context.h"
#include "parallel/gradient_exchange.h"
#include "parallel/shard_update.h"

namespace rematlab::parallel {

class PipelineExchange final : public GradientExchange {
 public:
  // Rank r of `world` is stage r of world->world_size().
  explicit PipelineExchange(std::shared_ptr<DistContext> world);
  ~PipelineExchange() override;

  int64_t stage() const { return world_->rank(); }
  int64_t stages() const { return world_->world_size(); }
  bool first() const { return stage() == 0; }
  bool last() const { return stage() + 1 == stages(); }

  // To the next stage: a micro-batch's output. Returns at once; the tensor is held until the
  // next stage took it, which the schedule tells (a send is let go once a receive proves it
  // was taken, so a stage holds only what its neighbours have not reached yet).
  void send_output(const torch::Tensor& output, int64_t micro_batch);
  // From the previous stage: its output for `micro_batch`, of `sizes` and `options`.
  torch::Tensor receive_input(at::IntArrayRef sizes, const at::TensorOptions& options,
                              int64_t micro_batch);
  // To the previous stage: the gradient of the input it sent for `micro_batch`.
  void send_input_gradient(const torch::Tensor& gradient, int64_t micro_batch);
  // From the next stage: the gradient of the output sent to it for `micro_batch`.
  torch::Tensor receive_output_gradient(at::IntArrayRef sizes, const at::TensorOptions& options,
                                        int64_t micro_batch);
  // Waits until every send went out; called once a step's micro-batches are done.
  void finish_sends();

  // A tied head: the token embedding's weight, which the first stage uses as the embedding and
  // the last as the head; their gradients are added before the update (on other stages a no-op).
  void share_gradient_of(const torch::Tensor& weight);

  void attach(const std::vector<torch::Tensor>& params) override;
  // Every stage trains every row: one data rank.
  int64_t world_size() const override { return 1; }
  int64_t rank() const override { return 0; }
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
  torch::Tensor receive(at::IntArrayRef sizes, const at::TensorOptions& options, int from, int tag,
                        const char* what);
  struct Pending {
    torch::Tensor tensor;  // alive until sent: declared first, so destroyed after the work
    c10::intrusive_ptr<c10d::Work> work;
    int64_t micro_batch = 0;
  };
  void send(std::deque<Pending>& sent, const torch::Tensor& tensor, int to, int tag,
            int64_t micro_batch);
  // Waits for the sends in `sent` of micro-batches up to `through` (each already taken, or
  // about to be) and lets their tensors go.
  void wait_for(std::deque<Pending>& sent, int64_t through);
  void add_tied_gradients();

  std::shared_ptr<DistContext> world_;
  std::vector<torch::Tensor> params_;
  torch::Tensor tied_;  // undefined: no tied head, or not held here
  // Sends not yet known to be taken, oldest first: outputs to the next stage, gradients to the
  // previous one, the tied head's gradient.
  std::deque<Pending> outputs_sent_;
  std::deque<Pending> gradients_sent_;
  std::deque<Pending> tied_sent_;
  double wait_ms_ = 0.0;                          // blocked on a neighbour since the last report
  torch::optim::Optimizer* optimizer_ = nullptr;  // the last step's, for its state's size
  ModelStateBytes state_bytes_;
};

}  // namespace rematlab::parallel
