#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>

#include "common/byte_size.h"
#include "common/errors.h"
#include "estimate/flops.h"
#include "memory/device_memory.h"
#include "memory/memory_phase.h"
#include "memory/process_memory.h"
#include "offload/disk_offload.h"
#include "offload/host_offload.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/ranks_profile.h"
#include "plan/balanced_split.h"
#include "plan/profile_key.h"
#include "runtime/device.h"
#include "runtime/peak_flops.h"
#include "runtime/runtime_info.h"
#include "update/parameter_update.h"

namespace rematlab {
namespace {

using Clock = std::chrono::steady_clock;

double elapsed_ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

// Data draws come from their own generator, so they never shift the dropout stream.
constexpr uint64_t kDataSeedSalt = 0x9E3779B97F4A7C15ull;
// Data parallel: rank r > 0 draws its dropout from seed ^ (r × this).
constexpr uint64_t kRankSeedSalt = 0xD1B54A32D192ED03ull;
// Pipeline parallel: stage s > 0 draws its dropout from seed ^ (s × this).
constexpr uint64_t kStageSeedSalt = 0x8CB92BA72F3D8DD7ull;

// --pp-split balanced: every stage splits the chain from the same costs (agreed over the ranks,
// or brought from the runs database), before any stage builds its blocks.
void balance_pipeline_split(RunConfig& config, const std::atomic<bool>* cancel) {
  const plan::BalancedSplit split = plan::balanced_chunk_blocks(
      plan::chain_costs_for(config, cancel).costs, config.pp * config.virtual_stages);
  config.pp_split = split.chunk_blocks;
  config.pp_split_chunk_ms = split.chunk_ms;
}

// plan:BUDGET (and the costs a balanced split takes). Over several ranks the chain is measured
// on every one at once and agreed on (parallel/ranks_profile.h), unless the run brings costs kept
// for it; then planned as one process plans, or, in a pipeline, stage by stage for the
// micro-batches each holds.
std::optional<PlannedPolicy> resolve_plan(RunConfig& config, parallel::GradientExchange* exchange,
                                          const std::atomic<bool>* cancel) {
  if (exchange && plan::needs_chain_costs(config) && !plan::brings_chain_costs(config)) {
    config.known_chain_costs = std::make_shared<const KnownChainCosts>(
        parallel::profile_over_ranks(config, *exchange, cancel));
  }
  if (config.pp_split_balanced) balance_pipeline_split(config, cancel);
  if (config.pp == 1) return plan::resolve_planned_policy(config, cancel);
  plan::PipelineShape pipeline;
  pipeline.stages = config.pp;
  pipeline.chunks = config.virtual_stages;
  pipeline.micro_batches = config.accum;
  pipeline.layers = config.model.layers;
  pipeline.chunk_blocks = config.pp_split;
  pipeline.most_held = [&config](int64_t stage, const std::vector<int64_t>& weights) {
    return parallel::PipelineSchedule::most_held(config.pp, stage, config.accum, weights);
  };
  return plan::resolve_planned_policy(config, cancel, &pipeline);
}

}  // namespace

Trainer::Trainer(RunConfig config, std::shared_ptr<parallel::GradientExchange> exchange,
                 const std::atomic<bool>* cancel)
    : config_((validate(config), std::move(config))),  // nothing is built from invalid input
      numerics_({config_.tf32, config_.deterministic}),
      device_(parse_device(config_.device)),
      planned_(resolve_plan(config_, exchange.get(), cancel)),
      policy_(CheckpointPolicy::parse(config_.checkpoint)),
      tracker_(device_),
      exchange_(std::move(exchange)),
      pipeline_(dynamic_cast<parallel::PipelineExchange*>(exchange_.get())) {
  const int64_t world = exchange_ ? exchange_->world_size() * config_.tp * config_.pp : 1;
  if (config_.world_size != world) {
    throw InvalidInput("--nproc", "a run over " + std::to_string(config_.world_size) +
                                      " ranks needs its launcher (rematlab-cli run --nproc, "
                                      "torchrun or srun); this process has " +
                                      std::to_string(world));
  }
  set_intra_op_threads(config_.threads);
  data_ = make_batch_source(config_.data, config_.model.seq_len, config_.model.vocab,
                            config_.seed ^ kDataSeedSalt);
  torch::manual_seed(config_.seed);
  model_ = Transformer(config_.model);
  // Every rank built the whole model from the same seed: each keeps its part.
  if (exchange_ && exchange_->tensor_parallel()) {
    exchange_->use_layout(
        model_->split_for_tensor_parallel(exchange_->tensor_parallel(), config_.sequence_parallel));
  }
  if (exchange_ && exchange_->expert_parallel()) {
    exchange_->use_experts(model_->split_for_expert_parallel(exchange_->expert_parallel()));
  }
  if (pipeline_) keep_pipeline_chunks();
  model_->to(device_);
  model_->train();
  std::shared_ptr<ParameterUnits> units =
      exchange_ ? exchange_->shard_parameters(model_->parameter_units()) : nullptr;
  for (auto& param : model_->parameters()) {
    if (!param.requires_grad()) continue;  // a frozen base (fine-tuning): no gradient, no state
    // Gradients exist from the start so every step begins with the same model states (sharded
    // parameters keep only their shards' gradients: no whole ones to build first).
    if (!units) param.mutable_grad() = torch::zeros_like(param);
    params_.push_back(param);
  }
  optimizer_ = make_optimizer(params_, config_);
  autocast_ = AutocastSnapshot::for_precision(config_.precision, device_);
  if (config_.precision == Precision::kFp16) {
    scaler_.emplace(config_.loss_scale, config_.loss_scale_growth_interval);
  }
  if (exchange_) {
    if (units) model_->use_parameter_units(std::move(units));
    exchange_->attach(params_);
    // Dropout draws from the default generator: each rank its own stream (rank 0 keeps the
    // run's), or every rank would drop the same positions of its different rows. The tensor
    // ranks of one data rank share its stream: they drop the same positions of the same rows.
    // Pipeline stages run different blocks from one stream each: the same stream would drop
    // the same positions in each stage's first block.
    const uint64_t stage = pipeline_ ? static_cast<uint64_t>(pipeline_->stage()) : 0;
    if (exchange_->rank() > 0 || stage > 0) {
      torch::manual_seed(config_.seed ^ (kRankSeedSalt * static_cast<uint64_t>(exchange_->rank())) ^
                         (kStageSeedSalt * stage));
    }
  }
  const OffloadSpec offload = parse_offload(config_.offload);
  if (offload.kind == OffloadKind::kDisk) {
    DiskOffloadOptions options;
    options.parent = offload.directory;
    offload_ = make_disk_offload_store(options);
  } else if (offload.kind == OffloadKind::kHost) {
    offload_ = make_host_offload_store(device_);
  }
}

Trainer::~Trainer() = default;

TokenBatch Trainer::next_batch() {
  if (!exchange_) return data_->next(config_.batch);
  // Every process draws the same global batch and trains its own rows of it, so N processes of
  // batch B see exactly what one process of batch N·B would.
  TokenBatch global = data_->next(config_.batch * exchange_->world_size());
  const int64_t first = exchange_->rank() * config_.batch;
  return {global.tokens.narrow(0, first, config_.batch).contiguous(),
          global.targets.narrow(0, first, config_.batch).contiguous()};
}

bool Trainer::cancel_requested(const std::atomic<bool>* cancel) {
  const bool local = cancel && cancel->load();
  return exchange_ ? exchange_->any_rank(local) : local;
}

double Trainer::micro_batch(const CheckpointPlan& plan, StepMetrics& metrics, bool last) {
  const TokenBatch batch = next_batch();
  const torch::Tensor tokens = batch.tokens.to(device_);
  const torch::Tensor targets = batch.targets.to(device_);

  auto start = Clock::now();
  torch::Tensor loss;
  {
    ScopedMemoryPhase phase(MemoryPhase::kForward);
    ScopedOffload offload(offload_.get());
    std::optional<ScopedAutocast> autocast;
    if (autocast_) autocast.emplace(*autocast_);
    loss = model_->loss(tokens, targets, plan) / static_cast<double>(config_.accum);
  }
  device_memory::synchronize(device_);
  metrics.forward_ms += elapsed_ms(start);
  metrics.saved_activation_bytes =
      std::max(metrics.saved_activation_bytes, tracker_.current_bytes() - metrics.baseline_bytes);

  start = Clock::now();
  if (offload_) offload_->begin_backward();
  {
    ScopedMemoryPhase phase(MemoryPhase::kBackward);
    if (exchange_) exchange_->before_backward(last);
    (scaler_ ? scaler_->scale(loss) : loss).backward();
    if (exchange_) exchange_->after_backward(last);
  }
  const double value = loss.item<double>() * static_cast<double>(config_.accum);
  metrics.backward_ms += elapsed_ms(start);
  return value;
}

void Trainer::keep_pipeline_chunks() {
  const int64_t stages = pipeline_->stages();
  const int64_t chunks = config_.virtual_stages;
  pipeline_->use_schedule(parallel::PipelineSchedule(stages, chunks, config_.accum));
  // Chunk c of stage s is the chain's chunk c·P + s of P·V.
  const std::vector<int64_t> blocks = config_.chunk_bounds();
  std::vector<std::pair<int64_t, int64_t>> kept;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const auto at = static_cast<std::size_t>(chunk * stages + pipeline_->stage());
    kept.emplace_back(2 * blocks[at], 2 * blocks[at + 1]);  // two sublayers a block
  }
  model_->keep_chunks(kept);
  pipeline_->use_chunk_parameters(model_->chunk_parameters());
  // A frozen base's tied head (fine-tuning) gets no gradient to add.
  if (config_.model.tie_head && model_->head_weight().requires_grad()) {
    pipeline_->share_gradient_of(model_->head_weight());
  }
}

std::optional<double> Trainer::micro_batches(const CheckpointPlan& plan, StepMetrics& metrics,
                                             const std::atomic<bool>* cancel) {
  // Each micro-batch's loss enters backward divided by the accumulation steps (and scaled for
  // fp16): so do the experts' balance losses.
  if (BalanceLedger* balance = model_->balance()) {
    balance->set_gradient_scale((scaler_ ? scaler_->current() : 1.0) /
                                static_cast<double>(config_.accum));
  }
  if (pipeline_) {
    // Stages wait on one another inside the step: it is cancelled before it begins.
    if (cancel_requested(cancel)) return std::nullopt;
    return pipeline_micro_batches(plan, metrics);
  }
  double loss_sum = 0.0;
  for (int64_t micro = 0; micro < config_.accum; ++micro) {
    if (cancel_requested(cancel)) return std::nullopt;
    loss_sum += micro_batch(plan, metrics, micro + 1 == config_.accum);
  }
  return loss_sum;
}

double Trainer::pipeline_micro_batches(const CheckpointPlan& plan, StepMetrics& metrics) {
  parallel::PipelineExchange& pipe = *pipeline_;
  // Each chunk's backwards run in the order of its forwards.
  std::vector<std::deque<PipelineFlight>> in_flight(
      static_cast<std::size_t>(config_.virtual_stages));
  // Every stage draws every batch, in order, at its first chunk's forward; the last keeps the
  // targets until its last chunk's.
  std::deque<TokenBatch> batches;
  double loss_sum = 0.0;
  const parallel::PipelineSchedule& schedule = pipe.schedule();
  for (int64_t index = 0; index < schedule.length(); ++index) {
    const parallel::PipelineAction action = schedule.action(pipe.stage(), index);
    std::deque<PipelineFlight>& chunk_flights = in_flight[static_cast<std::size_t>(action.chunk)];
    if (action.forward) {
      if (action.chunk == 0) batches.push_back(next_batch());
      auto start = Clock::now();
      // Only a chunk that begins the chain reads the tokens (those just drawn), and only one that
      // ends it the targets (the oldest batch's: its forwards go in micro-batch order too).
      const TokenBatch* batch = action.chunk == 0                            ? &batches.back()
                                : action.chunk + 1 == config_.virtual_stages ? &batches.front()
                                                                             : nullptr;
      chunk_flights.push_back(pipeline_forward(action, batch, plan));
      if (action.chunk + 1 == config_.virtual_stages) batches.pop_front();
      device_memory::synchronize(device_);
      metrics.forward_ms += elapsed_ms(start);
      metrics.saved_activation_bytes = std::max(metrics.saved_activation_bytes,
                                                tracker_.current_bytes() - metrics.baseline_bytes);
      continue;
    }
    PipelineFlight flight = std::move(chunk_flights.front());
    chunk_flights.pop_front();
    const auto start = Clock::now();
    {
      ScopedMemoryPhase phase(MemoryPhase::kBackward);
      // Each chunk's backwards run in micro-batch order: its last one completes its gradients.
      pipe.before_chunk_backward(action.micro_batch + 1 == config_.accum);
      if (pipe.ends_chain(action.chunk)) {
        loss_sum += flight.output.item<double>() * static_cast<double>(config_.accum);
        (scaler_ ? scaler_->scale(flight.output) : flight.output).backward();
      } else {
        const torch::Tensor gradient = pipe.receive_output_gradient(
            flight.output.sizes(), flight.output.options(), action.chunk, action.micro_batch);
        torch::autograd::backward({flight.output}, {gradient});
      }
      flight.output.reset();
      if (!pipe.begins_chain(action.chunk)) {
        pipe.send_input_gradient(flight.input.grad(), action.chunk, action.micro_batch);
      }
      // The schedule ends with a backward: the stage's last of the step.
      pipe.after_chunk_backward(index + 1 == schedule.length());
    }
    metrics.backward_ms += elapsed_ms(start);
  }
  pipe.finish_micro_batches();
  return loss_sum;
}

Trainer::PipelineFlight Trainer::pipeline_forward(const parallel::PipelineAction& action,
                                                  const TokenBatch* batch,
                                                  const CheckpointPlan& plan) {
  parallel::PipelineExchange& pipe = *pipeline_;
  ScopedMemoryPhase phase(MemoryPhase::kForward);
  std::optional<ScopedAutocast> autocast;
  if (autocast_) autocast.emplace(*autocast_);
  PipelineFlight flight;
  if (pipe.begins_chain(action.chunk)) {
    flight.input = batch->tokens.to(device_);
  } else {
    // The residual stream stays in the parameters' dtype (autocast casts only inside matmuls);
    // under sequence parallelism each tensor rank holds its slice of the positions.
    const int64_t positions =
        config_.model.seq_len / (config_.sequence_parallel ? std::max<int64_t>(1, config_.tp) : 1);
    flight.input = pipe.receive_input({config_.batch, positions, config_.model.d_model},
                                      torch::TensorOptions().dtype(torch::kFloat32).device(device_),
                                      action.chunk, action.micro_batch)
                       .requires_grad_(true);
  }
  flight.output = model_->chunk_output(flight.input, plan, static_cast<std::size_t>(action.chunk));
  if (pipe.ends_chain(action.chunk)) {
    flight.output = model_->head_loss(flight.output, batch->targets.to(device_)) /
                    static_cast<double>(config_.accum);
  } else {
    TORCH_CHECK(flight.output.scalar_type() == torch::kFloat32, "a pipeline stage's output in ",
                flight.output.scalar_type(), " where the next stage receives fp32");
    pipe.send_output(flight.output, action.chunk, action.micro_batch);
  }
  return flight;
}

void Trainer::update_parameters(StepMetrics& metrics) {
  ScopedMemoryPhase phase(MemoryPhase::kOptimizer);
  const auto start = Clock::now();
  bool finite = true;
  if (scaler_) {
    finite = scaler_->unscale(params_);
    if (exchange_) finite = !exchange_->any_rank(!finite);
    metrics.loss_scale = scaler_->current();
  }
  if (finite) {
    const double max_norm = max_grad_norm(config_);
    const std::optional<double> norm =
        exchange_ ? exchange_->step(*optimizer_, max_norm) : std::nullopt;
    if (norm) {
      metrics.grad_norm = *norm;
    } else {
      metrics.grad_norm = clip_and_step(*optimizer_, params_, max_norm);
    }
  }
  metrics.skipped = !finite;
  if (scaler_) scaler_->update(finite);
  zero_gradients(params_);  // sharded gradients leave none between steps
  device_memory::synchronize(device_);
  metrics.optimizer_ms = elapsed_ms(start);
}

StepMetrics Trainer::step(int64_t index, const TrainerCallbacks& callbacks) {
  StepMetrics metrics;
  metrics.step = index;
  metrics.total_steps = config_.steps;
  metrics.warmup = index < config_.timed_warmup_steps();
  const CheckpointPlan plan = policy_.plan_for(
      config_.model.layers, static_cast<double>(index) / config_.steps, config_.pp_split);
  metrics.checkpoint_interval = plan.interval;
  metrics.recomputed_segments = plan.recomputed_segments();

  device_memory::synchronize(device_);
  if (offload_) offload_->reset_step_counters();
  tracker_.reset_peak();
  metrics.baseline_bytes = tracker_.current_bytes();
  BalanceLedger* balance = model_->balance();
  const auto start = Clock::now();
  const std::optional<double> accumulated = micro_batches(plan, metrics, callbacks.cancel);
  if (!accumulated) throw Cancelled{};
  double loss_sum = *accumulated;
  update_parameters(metrics);
  if (exchange_) loss_sum = exchange_->mean(loss_sum);  // the global batch's loss
  if (balance) {
    const std::optional<double> recorded = balance->take();
    metrics.balance_loss = recorded ? *recorded : std::numeric_limits<double>::quiet_NaN();
    if (exchange_) metrics.balance_loss = exchange_->mean(metrics.balance_loss);
    constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
    metrics.expert_load = balance->take_load().value_or(kNone);
    metrics.expert_rank_load = balance->take_rank_load().value_or(kNone);
    metrics.expert_block_load = balance->take_block_rank_load().value_or(kNone);
    if (exchange_) {
      const std::vector<double> most = exchange_->max_over_ranks(
          {metrics.expert_load, metrics.expert_rank_load, metrics.expert_block_load});
      metrics.expert_load = most[0];
      metrics.expert_rank_load = most[1];
      metrics.expert_block_load = most[2];
    }
  }
  metrics.step_ms = elapsed_ms(start);

  metrics.loss = loss_sum / static_cast<double>(config_.accum);
  // Every data rank trains tokens_per_step() tokens in the same step (its tensor ranks and
  // stages the same ones): tokens/s of the whole run.
  const int64_t data_ranks = config_.data_ranks();
  metrics.tokens_per_s =
      static_cast<double>(config_.tokens_per_step() * data_ranks) / (metrics.step_ms / 1e3);
  if (exchange_) exchange_->report(metrics);
  metrics.current_bytes = tracker_.current_bytes();
  metrics.peak_bytes = tracker_.peak_bytes();
  metrics.peak_activation_bytes = metrics.peak_bytes - metrics.baseline_bytes;
  metrics.reserved_bytes = tracker_.reserved_bytes();
  metrics.device_used_bytes = tracker_.device_used_bytes();
  if (offload_) {
    metrics.offloaded_peak_bytes = offload_->offloaded_peak_bytes();
    metrics.offload_wait_ms = offload_->wait_ms();
  }
  const ProcessMemory process = read_process_memory();
  metrics.rss_bytes = process.rss_bytes;
  metrics.rss_peak_bytes = process.rss_peak_bytes;
  return metrics;
}

RunSummary Trainer::run(const TrainerCallbacks& callbacks) {
  if (callbacks.report_utilisation && config_.peak_flops <= 0.0) {
    // No runs database resolved one (store/peak_flops_registry.h): measure before any training,
    // once per process, while nothing of this run competes with the probe.
    config_.peak_flops = cached_peak_flops(device_, config_.precision);
    config_.peak_flops_source = "measured in this process before training (no runs database)";
  }
  RunSummary summary;
  summary.config = config_;
  summary.params = config_.model.parameter_count();
  summary.planned = planned_;
  if (planned_ && planned_->chosen.empty()) {
    summary.status = RunStatus::kOom;
    summary.message = "no checkpoint plan fits " + format_bytes(planned_->budget_bytes) +
                      " of activations; the smallest budget one fits is " +
                      format_bytes(planned_->smallest_feasible_bytes);
    summary.summarize();
    return summary;
  }
  const int64_t timeline_step = config_.timeline ? config_.timed_warmup_steps() : -1;
  for (int64_t index = 0; index < config_.steps; ++index) {
    if (index == timeline_step) tracker_.begin_timeline();
    StepMetrics metrics;
    try {
      metrics = step(index, callbacks);
    } catch (const Cancelled&) {
      summary.status = RunStatus::kCancelled;
      summary.message = "cancelled at step " + std::to_string(index);
      break;
    } catch (const c10::OutOfMemoryError& error) {
      // Alone, a real allocator out-of-memory is a result, not a crash: free the cache and
      // report it. With other processes it is this one's failure: they cannot go on without it.
      if (exchange_) throw;
      device_memory::empty_cache(device_);
      summary.status = RunStatus::kOom;
      summary.message = "step " + std::to_string(index) +
                        " ran out of device memory: " + error.what_without_backtrace();
      break;
    }
    if (index == timeline_step) {
      summary.timeline = tracker_.end_timeline();
      summary.timeline_step = index;
    }
    summary.steps.push_back(metrics);
    if (callbacks.on_step) callbacks.on_step(metrics);
    const bool over_budget = config_.budget_bytes > 0 && metrics.peak_bytes > config_.budget_bytes;
    // Every process stops at the same step, or the others would wait for it.
    if (exchange_ ? exchange_->any_rank(over_budget) : over_budget) {
      summary.status = RunStatus::kOom;
      summary.message =
          over_budget
              ? "step " + std::to_string(index) + " peaked at " + format_bytes(metrics.peak_bytes) +
                    ", above the budget of " + format_bytes(config_.budget_bytes)
              : "step " + std::to_string(index) + ": another rank peaked above the budget of " +
                    format_bytes(config_.budget_bytes);
      break;
    }
    if (!std::isfinite(metrics.loss) && !metrics.skipped) {
      summary.status = RunStatus::kDiverged;
      summary.message = "loss is not finite at step " + std::to_string(index);
      break;
    }
  }
  summary.summarize();
  if (callbacks.report_utilisation) record_flops(summary);
  return summary;
}

void Trainer::record_flops(RunSummary& summary) const {
  if (summary.steps.empty()) return;
  const estimate::Architecture arch = estimate::from_model_config(config_.model);
  // Hardware FLOPs follow each step's plan (a schedule changes it), averaged over timed steps.
  double hardware = 0.0;
  int64_t counted = 0;
  for (const StepMetrics& step : summary.steps) {
    if (step.warmup && summary.steps.size() > 1) continue;
    const CheckpointPlan plan = policy_.plan_for(
        config_.model.layers, static_cast<double>(step.step) / config_.steps, config_.pp_split);
    // Each tensor rank does its part of its data rank's work, and what the split repeats.
    hardware += estimate::rank_step_flops(arch, config_.tokens_per_step(), plan, config_.tp,
                                          config_.sequence_parallel)
                    .hardware;
    ++counted;
  }
  estimate::StepFlops flops = estimate::rank_step_flops(arch, config_.tokens_per_step(), {},
                                                        config_.tp, config_.sequence_parallel);
  if (counted > 0) flops.hardware = hardware / static_cast<double>(counted);
  if (config_.pp > 1) {
    // The stages share the work unevenly (the head is on the last): per rank, the run's mean,
    // so that MFU is the whole pipeline's.
    flops.model /= static_cast<double>(config_.pp);
    flops.hardware /= static_cast<double>(config_.pp);
  }
  summary.model_flops = flops.model;
  summary.hardware_flops = flops.hardware;
  summary.peak_flops = config_.peak_flops;
  summary.peak_flops_source = config_.peak_flops_source;
  const estimate::Utilisation use =
      estimate::utilisation(flops, summary.step_ms / 1e3, summary.peak_flops);
  summary.achieved_flops = use.achieved_flops;
  summary.mfu = use.mfu;
  summary.hfu = use.hfu;
}

void Trainer::use_peak_flops(double flops, const std::string& source) {
  config_.peak_flops = flops;
  config_.peak_flops_source = source;
}

std::optional<double> Trainer::accumulate_gradients(const CheckpointPlan& plan,
                                                    const std::atomic<bool>* cancel) {
  StepMetrics unused;
  std::optional<double> loss_sum = micro_batches(plan, unused, cancel);
  // The experts' balance losses and loads belong to no step: a step after this one starts anew.
  if (BalanceLedger* balance = model_->balance()) balance->forget();
  if (!loss_sum) return std::nullopt;
  if (exchange_) loss_sum = exchange_->mean(*loss_sum);
  return *loss_sum / static_cast<double>(config_.accum);
}

std::unique_ptr<Trainer> build_trainer(const RunConfig& config,
                                       const std::function<void(bool)>& on_setup,
                                       const std::atomic<bool>* cancel) {
  struct Told {
    const std::function<void(bool)>& on_setup;
    ~Told() {
      if (on_setup) on_setup(false);
    }
  };
  if (on_setup) on_setup(true);
  const Told told{on_setup};
  return std::make_unique<Trainer>(config, nullptr, cancel);
}

}  // namespace rematlab
