// Pipeline parallelism: P stages, each of T·D ranks (T tensor ranks of each of D data ranks).
// Stage s runs its share of the blocks (the first also the embedding, the last also the final
// norm, the head and the loss), in V chunks under the interleaved schedule, and hands each
// micro-batch's output to the next virtual stage and its input's gradient back to the previous
// one, point to point, each rank to the rank of the same tensor part and data rank there (from
// the last stage to the first between a micro-batch's rounds through the stages). A pipeline (one
// rank of each stage) trains the same rows of every global batch; each stage's parameters get
// their gradients from its own backward. Within a stage its T·D ranks are a tensor-parallel
// exchange of their own (or, with T = 1, a data-parallel one): each chunk's last backward
// (under sharded gradients every backward) averages its buckets over the data ranks while the
// others run, and the tensor ranks sum the
// rows each formed only part of. Then the pipeline reduces two things: a tied head's weight,
// which the first and the last stage both hold and whose gradients they add (whole, or sharded
// each data rank's shard of them), and the gradient norm, whose squares every stage adds to. The
// stage's data ranks may shard its optimizer state and gradients (ZeRO 1–2); not yet combined
// with sharded parameters, offload or LoRA (run_config's validate refuses them).
#pragma once

#include <torch/torch.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "parallel/data_parallel.h"
#include "parallel/dist_context.h"
#include "parallel/gradient_exchange.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/shard_update.h"
#include "parallel/tensor_parallel_exchange.h"

namespace rematlab::parallel {

class PipelineExchange final : public GradientExchange {
 public:
  // `stages` ranks a pipeline. With P·D·T ranks, rank r is stage r / (D·T), and within its stage
  // tensor part r mod T of data rank (r / T) mod D: Megatron's order, tensor ranks innermost,
  // stages outermost (as the layout planner places them). Each data rank trains its own rows;
  // the stage's gradients are averaged over them before the update.
  PipelineExchange(std::shared_ptr<DistContext> world, int64_t stages, int64_t tensor_ranks = 1,
                   DataParallelOptions data_options = {});
  ~PipelineExchange() override;
  // Its data ranks' bucketing asks it about parameters: it stays where it was made.
  PipelineExchange(const PipelineExchange&) = delete;
  PipelineExchange& operator=(const PipelineExchange&) = delete;

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
  // Waits until every send went out.
  void finish_sends();
  // Before each backward: `last_of_chunk`, the chunk's last micro-batch, after which its
  // gradients are whole and the stage's data ranks average them while the others run (sharded
  // gradients: every backward's are reduced, see after_chunk_backward).
  void before_chunk_backward(bool last_of_chunk);
  // After each backward (`final`: the stage's last of the step): a stage whose data ranks reduce
  // every backward's gradients (sharded gradients) reduces this one's now.
  void after_chunk_backward(bool final);
  // Once a step's micro-batches are done: every send went out, and the stage's gradients are
  // averaged over its data ranks and summed over its tensor ranks where each formed a part.
  void finish_micro_batches();

  // The parameters of each of this stage's model chunks: the stage's data ranks bucket each
  // chunk's apart (a chunk's backward then reduces its own buckets only). Before attach.
  void use_chunk_parameters(const std::vector<std::vector<torch::Tensor>>& chunks);
  // A tied head: the token embedding's weight, which the first stage uses as the embedding and
  // the last as the head; their gradients are added before the update (on other stages a no-op).
  void share_gradient_of(const torch::Tensor& weight);

  TensorParallel tensor_parallel() const override;
  void use_layout(TensorParallelLayout layout) override;
  void attach(const std::vector<torch::Tensor>& params) override;
  // The pipelines train different rows: one data rank each (its tensor ranks the same rows).
  int64_t world_size() const override { return stage_ ? stage_->world_size() : 1; }
  int64_t rank() const override { return stage_ ? stage_->rank() : 0; }
  bool any_rank(bool local) override;
  // The step's loss, which only the last stage forms: its value on every stage.
  double mean(double local) override;
  std::vector<double> max_over_ranks(const std::vector<double>& local) override;
  // The Trainer's pipeline path calls before_chunk_backward and finish_micro_batches instead.
  void before_backward(bool /*last*/) override {}
  void after_backward(bool /*last*/) override {}
  std::optional<double> step(torch::optim::Optimizer& optimizer, double max_norm) override;
  void report(StepMetrics& metrics) override;

  // This stage's weights, gradients and AdamW moments, as measured at the last report.
  const ModelStateBytes& model_state_bytes() const { return state_bytes_; }
  // The stage's averaging buckets at their fullest (0 with one rank a stage).
  int64_t buffer_peak_bytes() const;

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
  // The tag of `message`'s tensor, or of the notice sent before it.
  int tag_of(const Message& message, bool notice) const;
  void send(const torch::Tensor& tensor, const Message& message);
  torch::Tensor receive(at::IntArrayRef sizes, const at::TensorOptions& options,
                        const Message& message, const std::string& what);
  // Waits for the sends to `to` its action at `position` or before took, and lets them go.
  void release_taken(int to, int64_t position);
  // Receives a notice and then `tensors` from `from`, the wait for each counted apart.
  void receive_after_notice(std::vector<at::Tensor>& tensors, int from, int tag, int notice_tag,
                            const char* what);
  void wait_for_all(std::deque<Pending>& sent);
  void add_tied_gradients();
  std::optional<std::size_t> find_tied_bucket() const;

  double stage_squares();
  // The tied head is in the norm once, on the first stage: the last leaves it out.
  bool counts_tied_elsewhere() const { return last() && !first() && tied_.defined(); }
  // The exchange over the stage's data ranks (its tensor part's, with tensor ranks), and whether
  // it shards model states over them. Only with more than one rank a stage.
  DataExchange& stage_data() const;
  bool sharded() const;

  std::shared_ptr<DistContext> all_;   // every rank
  std::shared_ptr<DistContext> pipe_;  // this pipeline's stages: one rank of each
  // The stage's other ranks: its tensor ranks and the other pipelines' (null: one rank a stage).
  // stage_ is one of the two below.
  std::shared_ptr<GradientExchange> stage_;
  std::shared_ptr<TensorParallelExchange> tensor_;
  std::shared_ptr<DataParallel> data_;
  std::vector<torch::Tensor> params_;
  torch::Tensor tied_;                                 // undefined: no tied head, or not held here
  std::optional<std::size_t> tied_bucket_;             // sharded: the tied head's own bucket
  std::unordered_map<const void*, int64_t> chunk_of_;  // by parameter (TensorImpl)
  std::optional<PipelineSchedule> schedule_;
  // Sends not yet known to be taken, oldest first: activations and their gradients; the tied
  // head's gradient.
  std::deque<Pending> sent_;
  std::deque<Pending> tied_sent_;
  // Since the last report: blocked until a neighbour reached a message, and while one passed.
  double bubble_ms_ = 0.0;
  double transfer_ms_ = 0.0;
  torch::optim::Optimizer* optimizer_ = nullptr;  // the last step's, for its state's size
  ModelStateBytes state_bytes_;
};

}  // namespace rematlab::parallel
