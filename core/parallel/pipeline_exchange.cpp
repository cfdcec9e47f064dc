#include "parallel/pipeline_exchange.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "update/parameter_update.h"

namespace rematlab::parallel {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The tied head's gradients pass under tags no activation reaches: its notice and the gradient.
constexpr int kTiedNoticeTag = std::numeric_limits<int>::max() - 1;
constexpr int kTiedTag = std::numeric_limits<int>::max();

// Every tensor a stage sends goes after a one-byte notice. Blocked on the notice, the receiver
// waits for its neighbour to come to the send (the bubble); on the tensor after it, for the
// transfer alone: the two apart without comparing two processes' clocks.
torch::Tensor notice_like(const torch::Tensor& tensor) {
  return torch::zeros({1}, tensor.options().dtype(torch::kUInt8));
}

}  // namespace

PipelineExchange::PipelineExchange(std::shared_ptr<DistContext> world, int64_t stages,
                                   int64_t tensor_ranks, DataParallelOptions data_options)
    : all_(std::move(world)) {
  const int rank = all_->rank();
  const int count = static_cast<int>(stages);
  if (count < 1 || tensor_ranks < 1 || all_->world_size() % (count * tensor_ranks) != 0) {
    throw std::logic_error("a pipeline's ranks are not a multiple of its stages' tensor ranks");
  }
  if (all_->world_size() == count) {
    pipe_ = all_;
    return;
  }
  // Stages outermost, as the layout planner places them (layout.h): a stage's ranks are
  // neighbours (one node's links), and rank r's pipeline holds rank r mod S of every stage of S
  // ranks. Made in the same order on every rank: its pipeline, then its stage's group.
  const int stage_ranks = all_->world_size() / count;
  const int place = rank % stage_ranks;
  std::vector<int> pipeline;
  for (int stage = 0; stage < count; ++stage) pipeline.push_back(stage * stage_ranks + place);
  pipe_ = all_->subgroup("pipeline" + std::to_string(place), pipeline);
  std::vector<int> same_stage(static_cast<std::size_t>(stage_ranks));
  std::iota(same_stage.begin(), same_stage.end(), rank / stage_ranks * stage_ranks);
  const auto stage_context =
      all_->subgroup("stage" + std::to_string(rank / stage_ranks), same_stage);
  // A stage's backward reaches its own chunk's buckets only, the same ones in the same order on
  // every data rank of the stage.
  data_options.rounds_skip_untouched = true;
  // Buckets by model chunk, and a tied head's alone (sharded, the first and the last stage add
  // their shards of it in step: a bucket of its own makes each data rank's shard the same
  // elements on both). Asked at attach, after use_chunk_parameters and share_gradient_of.
  data_options.bucket_group = [this](const torch::Tensor& param) -> int64_t {
    if (tied_.defined() && param.is_same(tied_)) return -1;
    const auto found = chunk_of_.find(param.unsafeGetTensorImpl());
    return found == chunk_of_.end() ? 0 : found->second;
  };
  if (tensor_ranks > 1) {
    tensor_ = std::make_shared<TensorParallelExchange>(
        stage_context, static_cast<int>(tensor_ranks), data_options);
    stage_ = tensor_;
  } else {
    data_ = std::make_shared<DataParallel>(stage_context, data_options);
    stage_ = data_;
  }
}

PipelineExchange::~PipelineExchange() {
  // A step that failed between a send and its wait: the sends are not waited for (a neighbour
  // may be gone), only dropped. Gloo's pairs reach a send's buffer through a weak pointer that
  // its destruction clears (waiting out a write in progress), and each work is destroyed before
  // the tensor it sends (Pending's order), so no write reads freed memory.
  sent_.clear();
  tied_sent_.clear();
}

void PipelineExchange::use_schedule(const PipelineSchedule& schedule) {
  if (schedule.stages() != stages()) throw std::logic_error("a schedule for another pipeline");
  // Every message's tags, 4·m·P·V − 1 at most, below the tied head's two (RunConfig's validate
  // refuses more micro-batches first, in the user's words).
  if (4 * schedule.micro_batches() * schedule.stages() * schedule.chunks() >= kTiedNoticeTag) {
    throw std::invalid_argument("more micro-batches than a pipeline's tags can number");
  }
  schedule_.emplace(schedule);
}

bool PipelineExchange::ends_chain(int64_t chunk) const {
  return last() && chunk + 1 == schedule_.value().chunks();
}

int PipelineExchange::stage_of(int64_t virtual_stage) const {
  return static_cast<int>(virtual_stage % stages());
}

int64_t PipelineExchange::chunk_of(int64_t virtual_stage) const { return virtual_stage / stages(); }

PipelineAction PipelineExchange::receiving_action(const Message& message) const {
  const int64_t receiver = message.gradient ? message.sender - 1 : message.sender + 1;
  return {!message.gradient, chunk_of(receiver), message.micro_batch};
}

PipelineAction PipelineExchange::sending_action(const Message& message) const {
  return {!message.gradient, chunk_of(message.sender), message.micro_batch};
}

int PipelineExchange::tag_of(const Message& message, bool notice) const {
  const int64_t chain = stages() * schedule_.value().chunks();
  return static_cast<int>(4 * (message.micro_batch * chain + message.sender) +
                          (message.gradient ? 2 : 0) + (notice ? 1 : 0));
}

void PipelineExchange::release_taken(int to, int64_t position) {
  for (auto it = sent_.begin(); it != sent_.end();) {
    if (it->to != to || it->taken_at > position) {
      ++it;
      continue;
    }
    // The only reference to the work is the one waited on (DistContext::wait). Taken already,
    // it is done or all but; any wait is for the neighbour to finish taking it: bubble.
    const c10::intrusive_ptr<c10d::Work> work = std::move(it->work);
    const auto start = Clock::now();
    pipe_->wait(work, "sending to a neighbouring stage");
    bubble_ms_ += ms_since(start);
    it = sent_.erase(it);
  }
}

void PipelineExchange::send(const torch::Tensor& tensor, const Message& message) {
  const int64_t receiver = message.gradient ? message.sender - 1 : message.sender + 1;
  const int to = stage_of(receiver);
  const int64_t taken_at = schedule_.value().position(to, receiving_action(message));
  std::vector<at::Tensor> notice{notice_like(tensor)};
  sent_.push_back(
      {notice.front(), pipe_->backend().send(notice, to, tag_of(message, true)), to, taken_at});
  std::vector<at::Tensor> tensors{tensor.detach().contiguous()};
  sent_.push_back(
      {tensors.front(), pipe_->backend().send(tensors, to, tag_of(message, false)), to, taken_at});
}

void PipelineExchange::receive_after_notice(std::vector<at::Tensor>& tensors, int from, int tag,
                                            int notice_tag, const char* what) {
  std::vector<at::Tensor> notice{notice_like(tensors.front())};
  // Both posted first: the tensor may pass as soon as the neighbour sends it.
  const auto notified = pipe_->backend().recv(notice, from, notice_tag);
  const auto received = pipe_->backend().recv(tensors, from, tag);
  const auto start = Clock::now();
  pipe_->wait(notified, what);
  const auto reached = Clock::now();
  bubble_ms_ += ms_since(start);
  pipe_->wait(received, what);
  transfer_ms_ += ms_since(reached);
}

torch::Tensor PipelineExchange::receive(at::IntArrayRef sizes, const at::TensorOptions& options,
                                        const Message& message, const std::string& what) {
  const int from = stage_of(message.sender);
  std::vector<at::Tensor> tensors{torch::empty(sizes, options)};
  receive_after_notice(tensors, from, tag_of(message, false), tag_of(message, true), what.c_str());
  // The sender ran every action before this message's: what it took of ours in them was taken.
  release_taken(from, schedule_.value().position(from, sending_action(message)));
  return tensors.front();
}

void PipelineExchange::send_output(const torch::Tensor& output, int64_t chunk,
                                   int64_t micro_batch) {
  send(output, {chunk * stages() + stage(), micro_batch, false});
}

torch::Tensor PipelineExchange::receive_input(at::IntArrayRef sizes,
                                              const at::TensorOptions& options, int64_t chunk,
                                              int64_t micro_batch) {
  const Message message{chunk * stages() + stage() - 1, micro_batch, false};
  return receive(sizes, options, message,
                 "receiving stage " + std::to_string(stage_of(message.sender)) + "'s activations");
}

void PipelineExchange::send_input_gradient(const torch::Tensor& gradient, int64_t chunk,
                                           int64_t micro_batch) {
  send(gradient, {chunk * stages() + stage(), micro_batch, true});
}

torch::Tensor PipelineExchange::receive_output_gradient(at::IntArrayRef sizes,
                                                        const at::TensorOptions& options,
                                                        int64_t chunk, int64_t micro_batch) {
  const Message message{chunk * stages() + stage() + 1, micro_batch, true};
  return receive(sizes, options, message,
                 "receiving stage " + std::to_string(stage_of(message.sender)) + "'s gradients");
}

void PipelineExchange::wait_for_all(std::deque<Pending>& sent) {
  while (!sent.empty()) {
    const c10::intrusive_ptr<c10d::Work> work = std::move(sent.front().work);
    pipe_->wait(work, "sending to a neighbouring stage");
    sent.pop_front();
  }
}

void PipelineExchange::finish_sends() {
  // Waiting for neighbours still computing to come and take the last sends: bubble.
  const auto start = Clock::now();
  wait_for_all(sent_);
  wait_for_all(tied_sent_);
  bubble_ms_ += ms_since(start);
}

void PipelineExchange::use_chunk_parameters(const std::vector<std::vector<torch::Tensor>>& chunks) {
  if (!params_.empty()) throw std::logic_error("a stage's chunks are given before attach");
  chunk_of_.clear();
  for (std::size_t chunk = 0; chunk < chunks.size(); ++chunk) {
    for (const torch::Tensor& param : chunks[chunk]) {
      chunk_of_[param.unsafeGetTensorImpl()] = static_cast<int64_t>(chunk);
    }
  }
}

void PipelineExchange::share_gradient_of(const torch::Tensor& weight) {
  if (!params_.empty()) throw std::logic_error("a tied head is shared before attach");
  if (stages() > 1 && (first() || last())) tied_ = weight;
}

void PipelineExchange::before_chunk_backward(bool last_of_chunk) {
  if (stage_) stage_->before_backward(last_of_chunk);
}

void PipelineExchange::after_chunk_backward(bool final) {
  // The last is reduced in finish_micro_batches, once the sends are out.
  if (stage_ && !final) stage_->after_backward(false);
}

void PipelineExchange::finish_micro_batches() {
  finish_sends();
  if (stage_) stage_->after_backward(true);
}

TensorParallel PipelineExchange::tensor_parallel() const {
  return tensor_ ? tensor_->tensor_parallel() : nullptr;
}

void PipelineExchange::use_layout(TensorParallelLayout layout) {
  if (tensor_) tensor_->use_layout(std::move(layout));
}

void PipelineExchange::attach(const std::vector<torch::Tensor>& params) {
  params_ = params;
  if (!stage_) return;
  const bool tied_counted_first = counts_tied_elsewhere();
  if (tensor_ && tied_counted_first) tensor_->count_elsewhere(tied_);
  stage_->attach(params);
  tied_bucket_ = find_tied_bucket();
  if (!sharded()) return;
  // Sharded: the stage's data exchange clips and updates its shards with the norm of the whole
  // model, so each rank's squares are added over the stages (its pipeline) before the data ranks
  // add theirs; the tied head counts once, on the first stage.
  ShardSquares stage_squares;
  if (tensor_) {
    stage_squares = [tensor = tensor_.get()](const std::vector<torch::Tensor>& grads) {
      return tensor->sharded_squares(grads);
    };
  } else {
    std::vector<ElementRange> counted;
    for (std::size_t index = 0; index < params.size(); ++index) {
      if (tied_counted_first && params[index].is_same(tied_)) continue;
      counted.push_back({index, 0, params[index].numel()});
    }
    const std::vector<ShardPiece> pieces =
        pieces_in_shards(data_->shard_layouts(), static_cast<int>(data_->rank()), counted);
    stage_squares = [pieces](const std::vector<torch::Tensor>& grads) {
      return sum_of_squares(shard_views(grads, pieces));
    };
  }
  stage_data().count_squares_with([this, stage_squares](const std::vector<torch::Tensor>& grads) {
    const double squares = stage_squares(grads);
    // The stages meet here, as unsharded below (step): the wait for the last one's backwards is
    // bubble.
    const auto start = Clock::now();
    const double pipeline = pipe_->sum(squares);
    bubble_ms_ += ms_since(start);
    return pipeline;
  });
}

DataExchange& PipelineExchange::stage_data() const {
  if (tensor_) return tensor_->data();
  return *data_;
}

bool PipelineExchange::sharded() const { return stage_ && !stage_data().shard_layouts().empty(); }

int64_t PipelineExchange::buffer_peak_bytes() const {
  if (tensor_) return tensor_->buffer_peak_bytes();
  return data_ ? data_->buffer_peak_bytes() : 0;
}

bool PipelineExchange::any_rank(bool local) { return all_->any(local); }

// The last stage's losses, averaged over its ranks (a data rank's tensor ranks hold one loss).
double PipelineExchange::mean(double local) {
  return all_->sum(last() ? local : 0.0) / static_cast<double>(all_->world_size() / stages());
}

std::vector<double> PipelineExchange::max_over_ranks(const std::vector<double>& local) {
  return all_->max(local);
}

// The first and the last stage add their gradients of the tied head: whole, or (sharded) this
// data rank's shard of them, which covers the same elements on both stages (its own bucket).
void PipelineExchange::add_tied_gradients() {
  torch::NoGradGuard no_grad;
  const int other = static_cast<int>(first() ? stages() - 1 : 0);
  torch::Tensor mine =
      tied_bucket_ ? stage_data().gradient_shards().at(*tied_bucket_) : tied_.grad();
  std::vector<at::Tensor> sent{mine.detach().contiguous()};
  std::vector<at::Tensor> notice{notice_like(mine)};
  tied_sent_.push_back(
      {notice.front(), pipe_->backend().send(notice, other, kTiedNoticeTag), other, 0});
  tied_sent_.push_back({sent.front(), pipe_->backend().send(sent, other, kTiedTag), other, 0});
  std::vector<at::Tensor> theirs{torch::empty_like(mine)};
  receive_after_notice(theirs, other, kTiedTag, kTiedNoticeTag,
                       "adding the tied head's gradients of the first and the last stage");
  finish_sends();  // before `mine` changes under its send
  // a + b on one stage, b + a on the other: the same sum, bit for bit.
  mine.add_(theirs.front());
}

// Sharded: the bucket that holds the tied head alone (its own, so that its shards are the same
// elements on both end stages), found once at attach.
std::optional<std::size_t> PipelineExchange::find_tied_bucket() const {
  if (!tied_.defined() || !sharded()) return std::nullopt;
  const std::vector<BucketLayout>& layouts = stage_data().shard_layouts();
  for (std::size_t bucket = 0; bucket < layouts.size(); ++bucket) {
    for (const BucketSlot& slot : layouts[bucket].slots) {
      if (!params_[slot.param].is_same(tied_)) continue;
      if (layouts[bucket].slots.size() != 1) {
        throw std::logic_error("a tied head shares its bucket: its shards differ between stages");
      }
      return bucket;
    }
  }
  throw std::logic_error("the tied head is in none of the stage's buckets");
}

// This stage's share of the squared gradient norm, the tied weight's counted once (on the first
// stage), and every split parameter's parts once over its tensor ranks.
double PipelineExchange::stage_squares() {
  const bool skip_tied = counts_tied_elsewhere();
  if (tensor_) return tensor_->squared_norm(skip_tied ? tied_ : torch::Tensor());
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& param : params_) {
    if (!param.grad().defined() || (skip_tied && param.is_same(tied_))) continue;
    grads.push_back(param.grad());
  }
  return sum_of_squares(grads);
}

std::optional<double> PipelineExchange::step(torch::optim::Optimizer& optimizer, double max_norm) {
  // The stage's gradients are averaged over its data ranks already (finish_micro_batches): every
  // pipeline's stage s holds the same ones, and (unsharded) the norm is one pipeline's.
  if (tied_.defined()) add_tied_gradients();
  if (sharded()) {
    optimizer_ = &optimizer;
    return stage_->step(optimizer, max_norm);  // the norm over every stage's shards (attach)
  }
  torch::NoGradGuard no_grad;
  const double squares = stage_squares();
  // The stages meet here: every other one waits for the last to finish its backwards (the
  // drain), which is bubble.
  const auto start = Clock::now();
  const double total = std::sqrt(pipe_->sum(squares));
  bubble_ms_ += ms_since(start);
  clip_to_norm(params_, max_norm, total);
  optimizer.step();
  optimizer_ = &optimizer;
  return total;
}

void PipelineExchange::report(StepMetrics& metrics) {
  // Every receive blocks the stage that needs it: none of the wait is hidden.
  // The stage's tensor and data ranks' figures first: the data side sets comm_ms and
  // comm_wait_ms (CommTimer::report), the rest adds to them.
  if (stage_) stage_->report(metrics);
  metrics.bubble_ms = bubble_ms_;
  metrics.transfer_ms = transfer_ms_;
  metrics.comm_ms += bubble_ms_ + transfer_ms_;
  metrics.comm_wait_ms += bubble_ms_ + transfer_ms_;
  bubble_ms_ = transfer_ms_ = 0.0;
  if (sharded()) {
    state_bytes_ = stage_data().model_state_bytes();  // the shards' states are the exchange's
    return;
  }
  ModelStateBytes bytes;
  for (const torch::Tensor& param : params_) {
    bytes.params += static_cast<int64_t>(param.nbytes());
    if (param.grad().defined()) bytes.grads += static_cast<int64_t>(param.grad().nbytes());
  }
  if (optimizer_) bytes.optimizer = optimizer_state_bytes(*optimizer_);
  state_bytes_ = bytes;
}

}  // namespace rematlab::parallel
