#include "parallel/pipeline_exchange.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "update/parameter_update.h"

namespace rematlab::parallel {
namespace {

using Clock = std::chrono::steady_clock;

// Activations go forward under tag 2m, their gradients back under 2m + 1; the tied head's
// gradients pass under a tag no micro-batch reaches.
int forward_tag(int64_t micro_batch) { return static_cast<int>(2 * micro_batch); }
int backward_tag(int64_t micro_batch) { return static_cast<int>(2 * micro_batch + 1); }
constexpr int kTiedTag = std::numeric_limits<int>::max();

}  // namespace

PipelineExchange::PipelineExchange(std::shared_ptr<DistContext> world) : world_(std::move(world)) {}

PipelineExchange::~PipelineExchange() {
  // A step that failed between a send and its wait: the sends are not waited for (a neighbour
  // may be gone), only dropped. Gloo's pairs reach a send's buffer through a weak pointer that
  // its destruction clears (waiting out a write in progress), and each work is destroyed before
  // the tensor it sends (Pending's order), so no write reads freed memory.
  outputs_sent_.clear();
  gradients_sent_.clear();
  tied_sent_.clear();
}

void PipelineExchange::wait_for(std::deque<Pending>& sent, int64_t through) {
  while (!sent.empty() && sent.front().micro_batch <= through) {
    // The only reference to the work is the one waited on (DistContext::wait).
    const c10::intrusive_ptr<c10d::Work> work = std::move(sent.front().work);
    world_->wait(work, "sending to a neighbouring stage");
    sent.pop_front();
  }
}

void PipelineExchange::send(std::deque<Pending>& sent, const torch::Tensor& tensor, int to, int tag,
                            int64_t micro_batch) {
  std::vector<at::Tensor> tensors{tensor.detach().contiguous()};
  sent.push_back({tensors.front(), world_->backend().send(tensors, to, tag), micro_batch});
}

torch::Tensor PipelineExchange::receive(at::IntArrayRef sizes, const at::TensorOptions& options,
                                        int from, int tag, const char* what) {
  std::vector<at::Tensor> tensors{torch::empty(sizes, options)};
  const auto start = Clock::now();
  world_->wait(world_->backend().recv(tensors, from, tag), what);
  wait_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return tensors.front();
}

void PipelineExchange::send_output(const torch::Tensor& output, int64_t micro_batch) {
  send(outputs_sent_, output, static_cast<int>(stage() + 1), forward_tag(micro_batch), micro_batch);
}

torch::Tensor PipelineExchange::receive_input(at::IntArrayRef sizes,
                                              const at::TensorOptions& options,
                                              int64_t micro_batch) {
  const std::string what = "receiving stage " + std::to_string(stage() - 1) + "'s activations";
  torch::Tensor input = receive(sizes, options, static_cast<int>(stage() - 1),
                                forward_tag(micro_batch), what.c_str());
  // Under 1F1B the previous stage runs the backward of micro-batch j before the forward of
  // j + P − s + 1 (it runs P − s forwards first): the gradients sent to it for every j up to
  // this micro-batch − (P − s) − 1 were taken, and their tensors can go.
  wait_for(gradients_sent_, micro_batch - (stages() - stage()) - 1);
  return input;
}

void PipelineExchange::send_input_gradient(const torch::Tensor& gradient, int64_t micro_batch) {
  send(gradients_sent_, gradient, static_cast<int>(stage() - 1), backward_tag(micro_batch),
       micro_batch);
}

torch::Tensor PipelineExchange::receive_output_gradient(at::IntArrayRef sizes,
                                                        const at::TensorOptions& options,
                                                        int64_t micro_batch) {
  const std::string what = "receiving stage " + std::to_string(stage() + 1) + "'s gradients";
  torch::Tensor gradient = receive(sizes, options, static_cast<int>(stage() + 1),
                                   backward_tag(micro_batch), what.c_str());
  // The next stage formed this gradient from the output sent to it: that send was taken.
  wait_for(outputs_sent_, micro_batch);
  return gradient;
}

void PipelineExchange::finish_sends() {
  const auto start = Clock::now();
  for (auto* sent : {&outputs_sent_, &gradients_sent_, &tied_sent_}) {
    wait_for(*sent, std::numeric_limits<int64_t>::max());
  }
  wait_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

void PipelineExchange::share_gradient_of(const torch::Tensor& weight) {
  if (stages() > 1 && (first() || last())) tied_ = weight;
}

void PipelineExchange::attach(const std::vector<torch::Tensor>& params) { params_ = params; }

bool PipelineExchange::any_rank(bool local) { return world_->any(local); }

double PipelineExchange::mean(double local) { return world_->sum(last() ? local : 0.0); }

std::vector<double> PipelineExchange::max_over_ranks(const std::vector<double>& local) {
  return world_->max(local);
}

void PipelineExchange::add_tied_gradients() {
  torch::NoGradGuard no_grad;
  const int other = static_cast<int>(first() ? stages() - 1 : 0);
  send(tied_sent_, tied_.grad(), other, kTiedTag, 0);
  const torch::Tensor theirs =
      receive(tied_.grad().sizes(), tied_.grad().options(), other, kTiedTag,
              "adding the tied head's gradients of the first and the last stage");
  finish_sends();
  // a + b on one stage, b + a on the other: the same sum, bit for bit.
  tied_.grad().add_(theirs);
}

std::optional<double> PipelineExchange::step(torch::optim::Optimizer& optimizer, double max_norm) {
  if (tied_.defined()) add_tied_gradients();
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& param : params_) {
    // The tied weight's gradient counts once, on the first stage.
    if (!param.grad().defined() || (last() && !first() && param.is_same(tied_))) continue;
    grads.push_back(param.grad());
  }
  const double total = std::sqrt(world_->sum(sum_of_squares(grads)));
  clip_to_norm(params_, max_norm, total);
  optimizer.step();
  optimizer_ = &optimizer;
  return total;
}

void PipelineExchange::report(StepMetrics& metrics) {
  // Every receive blocks the stage that needs it: none of the wait is hidden. It holds the
  // pipeline's bubble too, the time a neighbour was still computing.
  metrics.comm_ms += wait_ms_;
  metrics.comm_wait_ms += wait_ms_;
  wait_ms_ = 0.0;
  ModelStateBytes bytes;
  for (const torch::Tensor& param : params_) {
    bytes.params += static_cast<int64_t>(param.nbytes());
    if (param.grad().defined()) bytes.grads += static_cast<int64_t>(param.grad().nbytes());
  }
  if (optimizer_) bytes.optimizer = optimizer_state_bytes(*optimizer_);
  state_bytes_ = bytes;
}

}  // namespace rematlab::parallel
