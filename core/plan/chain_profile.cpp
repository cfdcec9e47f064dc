#include "plan/chain_profile.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "checkpoint/checkpoint_policy.h"
#include "checkpoint/replay_state.h"
#include "checkpoint/sublayer_tail.h"
#include "memory/device_memory.h"
#include "memory/memory_tracker.h"
#include "model/transformer.h"
#include "runtime/device.h"
#include "runtime/numerics.h"
#include "runtime/runtime_info.h"
#include "update/parameter_update.h"

namespace rematlab::plan {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

// The run's autocast state, when it has one, for the scope's lifetime.
struct AutocastScope {
  explicit AutocastScope(const std::optional<AutocastSnapshot>& state) {
    if (state) scope.emplace(*state);
  }
  std::optional<ScopedAutocast> scope;
};

// What the profile measures of each piece of the step (a forward with grad and its backward).
struct PieceCost {
  double forward_ms = 0.0;
  double backward_ms = 0.0;
  int64_t kept_bytes = 0;  // left by the forward, output included
  int64_t output_bytes = 0;
  int64_t forward_transient_bytes = 0;   // above what it keeps
  int64_t backward_transient_bytes = 0;  // above what it keeps, the output's gradient included
};

// Everything the measurements share, alive for the whole profile: the tracker first, so it
// sees every tensor made after it.
class Bench {
 public:
  Bench(const RunConfig& config, const TensorParallel& tensor_parallel)
      : numerics_({config.tf32, config.deterministic}),
        device_(parse_device(config.device)),
        tracker_(device_) {
    set_intra_op_threads(config.threads);
    torch::manual_seed(config.seed);
    model_ = Transformer(config.model);
    // This rank's part, as the Trainer splits it.
    if (tensor_parallel) {
      model_->split_for_tensor_parallel(tensor_parallel, config.sequence_parallel);
      split_ = true;
    }
    model_->to(device_);
    model_->train();
    for (auto& param : model_->parameters()) {
      if (!param.requires_grad()) continue;  // as the trainer: a frozen base has no gradients
      // As the trainer: gradients exist between steps, so a backward only adds into them.
      param.mutable_grad() = torch::zeros_like(param);
      params_.push_back(param);
    }
    autocast_ = AutocastSnapshot::for_precision(config.precision, device_);
    const auto options = torch::TensorOptions().dtype(torch::kLong).device(device_);
    tokens_ = torch::randint(config.model.vocab, {config.batch, config.model.seq_len}, options);
    targets_ = torch::randint(config.model.vocab, {config.batch, config.model.seq_len}, options);
  }

  double elapsed_ms(Clock::time_point start) const {
    device_memory::synchronize(device_);
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  }

  // Medians over `repeats` runs after an untimed one; memory from a last, quiet run.
  // `forward` returns the output backward starts from.
  PieceCost measure(const std::function<torch::Tensor()>& forward, int repeats) {
    std::vector<double> forward_ms, backward_ms;
    for (int i = 0; i <= repeats; ++i) {
      stop_if_asked();
      device_memory::synchronize(device_);
      auto start = Clock::now();
      torch::Tensor output;
      {
        AutocastScope autocast(autocast_);
        output = forward();
      }
      const double forward_time = elapsed_ms(start);
      const torch::Tensor gradient = torch::ones_like(output);
      start = Clock::now();
      if (output.requires_grad()) output.backward(gradient);  // a frozen embedding has none
      const double backward_time = elapsed_ms(start);
      if (i == 0) continue;
      forward_ms.push_back(forward_time);
      backward_ms.push_back(backward_time);
    }
    PieceCost cost;
    cost.forward_ms = median(forward_ms);
    cost.backward_ms = median(backward_ms);
    const int64_t before = tracker_.current_bytes();
    tracker_.reset_peak();
    torch::Tensor output;
    {
      AutocastScope autocast(autocast_);
      output = forward();
    }
    const int64_t after = tracker_.current_bytes();
    cost.output_bytes = output.nbytes();
    cost.kept_bytes = std::max<int64_t>(after - before, cost.output_bytes);
    cost.forward_transient_bytes = std::max<int64_t>(0, tracker_.peak_bytes() - after);
    tracker_.reset_peak();
    if (output.requires_grad()) output.backward(torch::ones_like(output));
    cost.backward_transient_bytes = std::max<int64_t>(0, tracker_.peak_bytes() - after);
    return cost;
  }

  // What an early-stopped recomputation saves at a segment's last sublayer: the median time of
  // its tail with grad (output projection, dropout, residual add) less that of the tail as the
  // recomputation forms it (no projection; dropout's mask is still drawn), each from operands
  // made untimed just before. Where the early stop does not apply (an operand layout it does
  // not replicate) the recomputation runs the whole tail, and nothing is saved.
  double early_stop_saving_ms(Sublayer& sublayer, const torch::Tensor& x, int repeats) {
    std::vector<double> whole, stopped;
    for (int i = 0; i <= repeats; ++i) {
      stop_if_asked();
      for (const bool early : {false, true}) {
        AutocastScope autocast(autocast_);
        const SublayerTail tail = sublayer.forward_until_tail(x);
        device_memory::synchronize(device_);
        const auto start = Clock::now();
        const torch::Tensor output = early ? tail_without_projection(tail) : tail.complete();
        if (early && !output.defined()) return 0.0;
        const double ms = elapsed_ms(start);
        if (i > 0) (early ? stopped : whole).push_back(ms);
      }
    }
    return std::max(0.0, median(whole) - median(stopped));
  }

  // A Stop is answered within one repeat of one piece (measure and early_stop_saving_ms ask).
  void stop_if_asked() const {
    if (cancel_ && cancel_->load()) throw ProfileCancelled();
  }

  const std::atomic<bool>* cancel_ = nullptr;
  bool split_ = false;       // over tensor ranks: its pieces run collectives
  ScopedNumerics numerics_;  // before anything touches the device
  c10::Device device_;
  MemoryTracker tracker_;
  Transformer model_{nullptr};
  std::vector<torch::Tensor> params_;
  std::optional<AutocastSnapshot> autocast_;
  torch::Tensor tokens_, targets_;
};

void scale_to_a_whole_step(Bench& bench, const RunConfig& config, int repeats, ChainCosts& costs) {
  // The pieces ran one by one, each on its own input in hot caches; inside a step the chain's
  // activations pass through memory and every piece is slower (by 15-25 % on the CPU here). One
  // whole forward and backward under `none` measures by how much, and the pieces' times are
  // scaled to it: `none` is predicted as measured, and every plan in the same units.
  // A model that only fits with checkpointing cannot take that step: its pieces stay unscaled.
  const CheckpointPlan keep_all = CheckpointPolicy::none().plan_for(config.model.layers, 0.0);
  double whole_ms = 0.0;
  try {
    const PieceCost whole = bench.measure(
        [&] { return bench.model_->loss(bench.tokens_, bench.targets_, keep_all); }, repeats);
    whole_ms = static_cast<double>(config.accum) * (whole.forward_ms + whole.backward_ms);
  } catch (const c10::OutOfMemoryError&) {
    // A tensor rank that stopped part-way would leave the others inside a collective: the
    // profile fails there instead, and the run ends naming the rank.
    if (bench.split_) throw;
    device_memory::empty_cache(bench.device_);
  }
  double pieces_ms = costs.fixed_ms;
  for (const StageCost& stage : costs.stages) pieces_ms += stage.forward_ms + stage.backward_ms;
  costs.time_scale = pieces_ms > 0.0 && whole_ms > 0.0 ? whole_ms / pieces_ms : 1.0;
  for (StageCost& stage : costs.stages) {
    stage.forward_ms *= costs.time_scale;
    stage.backward_ms *= costs.time_scale;
    stage.early_stop_saving_ms *= costs.time_scale;
  }
  costs.fixed_ms *= costs.time_scale;  // the embedding's and the head's, so far
  costs.embedding_ms *= costs.time_scale;
  costs.head_ms *= costs.time_scale;
}

// The median time of the update, as the trainer runs it (update/parameter_update.h).
double update_ms(Bench& bench, const RunConfig& config, int repeats) {
  const std::unique_ptr<torch::optim::AdamW> optimizer = make_optimizer(bench.params_, config);
  std::vector<double> times;
  for (int i = 0; i <= repeats; ++i) {
    const auto start = Clock::now();
    clip_and_step(*optimizer, bench.params_, max_grad_norm(config));
    zero_gradients(bench.params_);
    const double ms = bench.elapsed_ms(start);
    if (i > 0) times.push_back(ms);
  }
  return median(times);
}

}  // namespace

ChainCosts profile_chain(const RunConfig& requested, const ProfileOptions& options) {
  // The chain as it runs without checkpointing or a budget: what every plan is made from.
  RunConfig config = requested;
  config.checkpoint = "none";
  config.budget_bytes = 0;
  validate(config);
  const int repeats = std::max(1, options.repeats);
  const double micro_batches = static_cast<double>(config.accum);
  if ((config.tp > 1) != static_cast<bool>(options.tensor_parallel)) {
    throw InvalidInput("--tp",
                       "a chain split over tensor ranks is profiled by all of its ranks "
                       "at once, in the run: give --checkpoint plan:BUDGET to `run`");
  }
  Bench bench(config, options.tensor_parallel);
  bench.cancel_ = options.cancel;
  Transformer& model = bench.model_;
  ChainCosts costs;

  // The embedding: a fixed cost, and at the very end of backward a peak of its own (its weight's
  // gradient is made whole before it is added into the one the step keeps).
  const PieceCost embedding = bench.measure([&] { return model->embed(bench.tokens_); }, repeats);
  costs.input_bytes = embedding.output_bytes;
  costs.embedding_backward_peak_bytes = embedding.backward_transient_bytes;
  costs.embedding_ms = micro_batches * (embedding.forward_ms + embedding.backward_ms);
  costs.fixed_ms += costs.embedding_ms;

  torch::Tensor input;  // the chain as the stages see it, made without grad
  {
    torch::NoGradGuard no_grad;
    AutocastScope autocast(bench.autocast_);
    input = model->embed(bench.tokens_);
  }
  const auto& sublayers = model->sublayers();
  for (std::size_t i = 0; i < sublayers.size(); ++i) {
    const torch::Tensor x = input.detach().requires_grad_(true);
    const PieceCost piece = bench.measure([&] { return sublayers[i]->forward(x); }, repeats);
    const double saving_ms = bench.early_stop_saving_ms(*sublayers[i], x, repeats);
    StageCost stage;
    stage.forward_ms = micro_batches * piece.forward_ms;
    stage.backward_ms = micro_batches * piece.backward_ms;
    stage.early_stop_saving_ms = micro_batches * std::min(saving_ms, piece.forward_ms);
    stage.kept_bytes = piece.kept_bytes;
    stage.output_bytes = piece.output_bytes;
    stage.forward_transient_bytes = piece.forward_transient_bytes;
    stage.backward_transient_bytes = piece.backward_transient_bytes;
    costs.stages.push_back(stage);
    {
      torch::NoGradGuard no_grad;
      AutocastScope autocast(bench.autocast_);
      input = sublayers[i]->forward(input);
    }
    if (options.on_progress) options.on_progress(static_cast<int64_t>(i) + 1, sublayers.size());
  }

  // The head and loss, above the chain's output: the logits (or one slice of them) live here.
  const torch::Tensor last = input.detach().requires_grad_(true);
  const PieceCost head =
      bench.measure([&] { return model->head_loss(last, bench.targets_); }, repeats);
  costs.head_peak_bytes =
      head.kept_bytes + std::max(head.forward_transient_bytes, head.backward_transient_bytes);
  costs.head_ms = micro_batches * (head.forward_ms + head.backward_ms);
  costs.fixed_ms += costs.head_ms;

  scale_to_a_whole_step(bench, config, repeats, costs);
  bench.stop_if_asked();  // measure() asks within every piece; the update is timed here
  costs.fixed_ms += update_ms(bench, config, repeats);
  return costs;
}

}  // namespace rematlab::plan
