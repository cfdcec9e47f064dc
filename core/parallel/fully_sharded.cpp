#include "parallel/fully_sharded.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <deque>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "compat/torch_compat.h"
#include "parallel/autograd_hooks.h"
#include "parallel/comm_timer.h"

namespace rematlab::parallel {
namespace {

using torch::autograd::variable_list;

enum class GatherFor { kForward, kBackward, kRecompute, kUncounted };

}  // namespace

struct FullyShardedParameters::Engine {
  enum class State { kFree, kGathering, kWhole };
  struct Unit {
    torch::Tensor flat;        // the model's parameters are views into it; no memory while kFree
    torch::Tensor shard;       // this rank's part, with its own memory: what the optimizer steps
    torch::Tensor grads;       // whole gradients while backward forms them (.grad are views)
    torch::Tensor shard_grad;  // this rank's part of the summed gradients, over the step
    bool shard_grad_empty = true;  // no micro-batch of this step reduced into it yet
    // NCCL, --accum > 1: where later micro-batches' sums land before they are added. Kept, not
    // made per micro-batch: the timer holds each NCCL collective, and with it its output, until
    // the step is reported.
    torch::Tensor reduced;
    State state = State::kFree;
    int holds = 0;  // hold() handles alive
    c10::intrusive_ptr<c10d::Work> gathering;
    c10::intrusive_ptr<c10d::Work> reducing;
    std::size_t ready = 0;  // parameters whose gradient arrived in this backward
    bool reduced_here = false;
  };

  std::shared_ptr<DistContext> context;
  std::vector<std::vector<torch::Tensor>> unit_tensors;  // as the model gave them
  std::vector<torch::Tensor> params;
  std::vector<BucketLayout> layout;  // per unit
  std::vector<Unit> units;
  std::vector<std::size_t> unit_of;  // per parameter
  std::vector<int64_t> offset_of;    // per parameter, in its unit's flat buffer
  std::vector<bool> accumulated;     // per parameter, in this backward
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // their hooks live there
  std::deque<std::size_t> reducing;  // units whose gradients are on the wire, oldest first
  bool in_backward = false;
  ParameterGathers gathers;
  BufferBytes buffers;  // whole units and their whole gradients
  CommTimer timer;

  bool device_timed() const { return context->device().is_cuda(); }
  torch::TensorOptions flat_options() const { return params.front().options(); }
  std::size_t flat_bytes(std::size_t unit) const {
    return static_cast<std::size_t>(layout[unit].padded_numel) * params.front().element_size();
  }
  // On Gloo the gradients are all-reduced and this rank keeps its part (DataParallel says why).
  bool scatter_by_all_reduce() const { return !context->device().is_cuda(); }

  torch::Tensor view_of(std::size_t param, const torch::Tensor& flat) const {
    return flat.narrow(0, offset_of[param], params[param].numel()).view(params[param].sizes());
  }

  // ---- parameters: gather, wait, free ----

  void launch_gather(std::size_t index, GatherFor reason) {
    Unit& unit = units[index];
    if (unit.state != State::kFree) return;
    compat::allocate_storage(unit.flat, flat_bytes(index));
    buffers.add(static_cast<int64_t>(flat_bytes(index)));
    unit.gathering = context->backend()._allgather_base(unit.flat, unit.shard);
    timer.launched(unit.gathering, device_timed());
    unit.state = State::kGathering;
    if (reason == GatherFor::kForward) ++gathers.forward;
    if (reason == GatherFor::kBackward) ++gathers.backward;
    if (reason == GatherFor::kRecompute) ++gathers.recompute;
  }

  void wait_gather(std::size_t index) {
    Unit& unit = units[index];
    if (unit.state != State::kGathering) return;
    timer.blocking([&] { context->wait(unit.gathering, "gathering sharded parameters"); });
    timer.waited(unit.gathering);
    unit.gathering.reset();
    unit.state = State::kWhole;
  }

  void free_unit(std::size_t index) {
    Unit& unit = units[index];
    if (unit.state == State::kFree) return;
    wait_gather(index);  // a gather in flight writes into the memory
    compat::free_storage(unit.flat);
    buffers.remove(static_cast<int64_t>(flat_bytes(index)));
    unit.state = State::kFree;
  }

  // The model is about to run `index` (its forward, or in backward its recomputation).
  void gather(std::size_t index) {
    // A recomputation runs beside the unit gathered for the backward that follows it: the
    // gradients still being summed go first, so no more than two sublayer units are whole.
    if (in_backward) drain_reductions();
    launch_gather(index, in_backward ? GatherFor::kRecompute : GatherFor::kForward);
    // Forward runs the units in order: the next one's gather overlaps this one's compute.
    if (!in_backward && index + 1 < units.size()) launch_gather(index + 1, GatherFor::kForward);
    wait_gather(index);
  }

  void release(std::size_t index) {
    if (units[index].holds == 0) free_unit(index);
  }

  // A hook on the unit's output: its gradient is here, so the unit's backward is next.
  void gather_for_backward(std::size_t index) {
    launch_gather(index, GatherFor::kBackward);
    wait_gather(index);
  }

  // ---- gradients: per parameter as they arrive, per unit once complete ----

  void ensure_gradients(std::size_t index) {
    Unit& unit = units[index];
    if (unit.grads.defined()) return;
    // The previous unit's sum overlapped this unit's backward up to its first gradient; it ends
    // before this unit's gradients take memory: besides unit 0, a unit's weights and gradients
    // are all a rank holds whole (sharded_units.h counts on it).
    drain_reductions();
    torch::NoGradGuard no_grad;
    unit.grads = torch::zeros({layout[index].padded_numel}, flat_options());
    buffers.add(static_cast<int64_t>(flat_bytes(index)));
    for (const BucketSlot& slot : layout[index].slots) {
      params[slot.param].mutable_grad() = view_of(slot.param, unit.grads);
    }
  }

  variable_list before_accumulate(std::size_t param, const variable_list& grads) {
    // A checkpoint's own edge brings nothing (its recomputation's backward accumulated already).
    if (grads.empty() || !grads[0].defined()) return grads;
    const std::size_t index = unit_of[param];
    if (units[index].reduced_here) {
      // Its parameters are freed too: a second use in one backward would have failed before.
      throw std::logic_error("a gradient arrived for a fully sharded unit already reduced");
    }
    ensure_gradients(index);
    return grads;
  }

  void after_accumulate(std::size_t param) {
    if (!in_backward || accumulated[param]) return;
    accumulated[param] = true;
    const std::size_t index = unit_of[param];
    if (++units[index].ready == layout[index].slots.size()) complete(index);
  }

  void complete(std::size_t index) {
    launch_reduce(index);
    free_unit(index);
    // Backward runs the sublayer units in reverse: the previous one's gather overlaps the rest.
    if (index >= 2) launch_gather(index - 1, GatherFor::kBackward);
  }

  void drain_reductions() {
    while (!reducing.empty()) finish_reduce();
  }

  void launch_reduce(std::size_t index) {
    ensure_gradients(index);
    Unit& unit = units[index];
    unit.reduced_here = true;
    if (scatter_by_all_reduce()) {
      std::vector<at::Tensor> tensors{unit.grads};
      unit.reducing = context->backend().allreduce(tensors);
    } else {
      // A step's first sum lands in the shard itself.
      if (!unit.shard_grad_empty && !unit.reduced.defined()) {
        unit.reduced = torch::empty({layout[index].shard_numel}, flat_options());
      }
      torch::Tensor output = unit.shard_grad_empty ? unit.shard_grad : unit.reduced;
      unit.reducing = context->backend()._reduce_scatter_base(output, unit.grads);
    }
    timer.launched(unit.reducing, device_timed());
    reducing.push_back(index);
  }

  void finish_reduce() {
    const std::size_t index = reducing.front();
    reducing.pop_front();
    Unit& unit = units[index];
    timer.blocking([&] { context->wait(unit.reducing, "summing sharded gradients"); });
    timer.waited(unit.reducing);
    unit.reducing.reset();
    torch::NoGradGuard no_grad;
    const BucketLayout& part = layout[index];
    if (scatter_by_all_reduce()) {
      unit.shard_grad.add_(
          unit.grads.narrow(0, part.shard_begin(context->rank()), part.shard_numel));
    } else if (!unit.shard_grad_empty) {
      unit.shard_grad.add_(unit.reduced);
    }
    unit.shard_grad_empty = false;
    for (const BucketSlot& slot : part.slots) params[slot.param].mutable_grad().reset();
    unit.grads.reset();
    buffers.remove(static_cast<int64_t>(flat_bytes(index)));
  }

  // After each micro-batch's backward. Every rank runs the same graph, so a unit whose gradients
  // never completed (a parameter unused) is reduced here by every rank, in the same order.
  void finish_backward(bool last) {
    for (std::size_t index = 0; index < units.size(); ++index) {
      if (!units[index].reduced_here) launch_reduce(index);
    }
    drain_reductions();
    for (std::size_t index = 0; index < units.size(); ++index) {
      free_unit(index);
      units[index].ready = 0;
      units[index].reduced_here = false;
    }
    std::fill(accumulated.begin(), accumulated.end(), false);
    in_backward = false;
    if (last) {
      torch::NoGradGuard no_grad;
      const double world = static_cast<double>(context->world_size());
      for (Unit& unit : units) unit.shard_grad.div_(world);
    }
  }

  void attach(const std::vector<torch::Tensor>& all);
  void build_unit(std::size_t index, const std::vector<std::size_t>& members);
  void register_hooks(const std::shared_ptr<Engine>& self);
};

// What the model calls (model/parameter_units.h). A model that outlives the exchange finds it
// gone and says so, rather than running on freed parameters.
class FullyShardedParameters::Units final : public ParameterUnits {
 public:
  explicit Units(std::weak_ptr<Engine> engine) : engine_(std::move(engine)) {}

  void gather(std::size_t unit) override { locked()->gather(unit); }

  torch::Tensor release(std::size_t unit, const torch::Tensor& output) override {
    const std::shared_ptr<Engine> engine = locked();
    engine->release(unit);
    if (output.requires_grad()) {
      std::weak_ptr<Engine> weak = engine;
      output.register_hook([weak, unit](const torch::Tensor&) {
        if (auto alive = weak.lock()) alive->gather_for_backward(unit);
      });
    }
    return output;
  }

  std::shared_ptr<void> hold(std::size_t unit) override {
    const std::shared_ptr<Engine> engine = locked();
    ++engine->units.at(unit).holds;
    std::weak_ptr<Engine> weak = engine;
    return std::shared_ptr<void>(nullptr, [weak, unit](void*) {
      if (auto alive = weak.lock()) {
        if (--alive->units[unit].holds == 0) alive->release(unit);
      }
    });
  }

 private:
  std::shared_ptr<Engine> locked() const {
    std::shared_ptr<Engine> engine = engine_.lock();
    if (!engine) throw std::logic_error("the model's sharded parameters outlived their exchange");
    return engine;
  }
  std::weak_ptr<Engine> engine_;
};

void FullyShardedParameters::Engine::build_unit(std::size_t index,
                                                const std::vector<std::size_t>& members) {
  const int world = context->world_size();
  BucketLayout& part = layout[index];
  for (std::size_t param : members) {
    part.slots.push_back({param, part.numel, params[param].numel()});
    unit_of[param] = index;
    offset_of[param] = part.numel;
    part.numel += params[param].numel();
  }
  part.padded_numel = (part.numel + world - 1) / world * world;
  part.shard_numel = part.padded_numel / world;

  torch::NoGradGuard no_grad;
  Unit& unit = units[index];
  // Rank 0's parameters, for everyone: one broadcast per unit.
  unit.flat = torch::zeros({part.padded_numel}, flat_options());
  for (const BucketSlot& slot : part.slots) {
    unit.flat.narrow(0, slot.offset, slot.numel).copy_(params[slot.param].reshape(-1));
  }
  std::vector<at::Tensor> tensors{unit.flat};
  context->wait(context->backend().broadcast(tensors), "broadcasting parameters from rank 0");
  unit.shard = unit.flat.narrow(0, part.shard_begin(context->rank()), part.shard_numel).clone();
  unit.shard_grad = torch::zeros({part.shard_numel}, flat_options());
  // The parameters become views into the flat buffer, whose memory then goes until gathered.
  for (const BucketSlot& slot : part.slots) {
    torch::Tensor param = params[slot.param];
    param.set_data(view_of(slot.param, unit.flat));
    param.mutable_grad().reset();
  }
  compat::free_storage(unit.flat);
  unit.state = State::kFree;
}

void FullyShardedParameters::Engine::attach(const std::vector<torch::Tensor>& all) {
  if (!params.empty()) throw std::logic_error("FullyShardedParameters::attach called twice");
  if (unit_tensors.empty()) throw std::logic_error("FullyShardedParameters: no units given");
  params = all;
  std::unordered_map<const void*, std::size_t> index_of;
  for (std::size_t index = 0; index < params.size(); ++index) {
    const torch::Tensor& param = params[index];
    if (param.scalar_type() != params.front().scalar_type() ||
        param.device() != context->device()) {
      throw std::logic_error(
          "FullyShardedParameters: parameters must share one dtype and live on " +
          context->device().str());
    }
    index_of[param.unsafeGetTensorImpl()] = index;
  }
  unit_of.assign(params.size(), 0);
  offset_of.assign(params.size(), 0);
  accumulated.assign(params.size(), false);
  layout.resize(unit_tensors.size());
  units.resize(unit_tensors.size());
  std::unordered_set<std::size_t> placed;
  for (std::size_t index = 0; index < unit_tensors.size(); ++index) {
    std::vector<std::size_t> members;
    for (const torch::Tensor& tensor : unit_tensors[index]) {
      const auto found = index_of.find(tensor.unsafeGetTensorImpl());
      if (found == index_of.end() || !placed.insert(found->second).second) {
        throw std::logic_error("FullyShardedParameters: units must hold each parameter once");
      }
      members.push_back(found->second);
    }
    build_unit(index, members);
  }
  if (placed.size() != params.size()) {
    throw std::logic_error("FullyShardedParameters: a parameter belongs to no unit");
  }
  unit_tensors.clear();
}

void FullyShardedParameters::Engine::register_hooks(const std::shared_ptr<Engine>& self) {
  std::weak_ptr<Engine> weak = self;
  for (std::size_t index = 0; index < params.size(); ++index) {
    std::shared_ptr<torch::autograd::Node> accumulator =
        torch::autograd::impl::grad_accumulator(params[index]);
    if (!accumulator) {
      throw std::logic_error("FullyShardedParameters: a parameter does not require grad");
    }
    accumulator->add_pre_hook(
        std::make_unique<AccumulatorPreHook>([weak, index](const variable_list& grads) {
          if (auto locked = weak.lock()) return locked->before_accumulate(index, grads);
          return grads;
        }));
    accumulator->add_post_hook(std::make_unique<AccumulatorPostHook>([weak, index] {
      if (auto locked = weak.lock()) locked->after_accumulate(index);
    }));
    accumulators.push_back(std::move(accumulator));
  }
}

FullyShardedParameters::FullyShardedParameters(std::shared_ptr<DistContext> context)
    : context_(std::move(context)), engine_(std::make_shared<Engine>()) {
  engine_->context = context_;
}

FullyShardedParameters::~FullyShardedParameters() = default;

std::shared_ptr<ParameterUnits> FullyShardedParameters::shard_parameters(
    const std::vector<std::vector<torch::Tensor>>& units) {
  engine_->unit_tensors = units;
  return std::make_shared<Units>(engine_);
}

void FullyShardedParameters::attach(const std::vector<torch::Tensor>& params) {
  engine_->attach(params);
  engine_->register_hooks(engine_);
}

int64_t FullyShardedParameters::world_size() const { return context_->world_size(); }
int64_t FullyShardedParameters::rank() const { return context_->rank(); }
const std::vector<BucketLayout>& FullyShardedParameters::units() const { return engine_->layout; }

bool FullyShardedParameters::any_rank(bool local) {
  return engine_->timer.blocking([&] { return context_->any(local); });
}

double FullyShardedParameters::mean(double local) {
  return engine_->timer.blocking([&] { return context_->sum(local); }) /
         static_cast<double>(context_->world_size());
}

std::vector<double> FullyShardedParameters::max_over_ranks(const std::vector<double>& local) {
  return context_->max(local);
}

void FullyShardedParameters::before_backward(bool /*last*/) {
  Engine& engine = *engine_;
  engine.in_backward = true;
  // Backward begins with the head (unit 0, whole since forward) and then the last sublayer.
  if (engine.units.size() > 1) engine.launch_gather(engine.units.size() - 1, GatherFor::kBackward);
}

// Every micro-batch's gradients are reduced as backward forms them (the class comment says why).
void FullyShardedParameters::after_backward(bool last) { engine_->finish_backward(last); }

std::vector<torch::Tensor> FullyShardedParameters::gradient_shards() {
  std::vector<torch::Tensor> shards;
  for (const Engine::Unit& unit : engine_->units) shards.push_back(unit.shard_grad);
  return shards;
}

void FullyShardedParameters::count_squares_with(ShardSquares squares) {
  update_.count_squares_with(std::move(squares));
}

int64_t FullyShardedParameters::buffer_peak_bytes() const { return engine_->buffers.peak(); }

std::optional<double> FullyShardedParameters::step(torch::optim::Optimizer& optimizer,
                                                   double max_norm) {
  Engine& engine = *engine_;
  std::vector<torch::Tensor> shards;
  for (Engine::Unit& unit : engine.units) {
    unit.shard.mutable_grad() = unit.shard_grad;
    shards.push_back(unit.shard);
  }
  const double total = update_.step(*context_, shards, optimizer, max_norm, engine.timer);
  torch::NoGradGuard no_grad;
  for (Engine::Unit& unit : engine.units) {
    unit.shard_grad.zero_();
    unit.shard_grad_empty = true;
  }
  return total;
}

void FullyShardedParameters::report(StepMetrics& metrics) {
  Engine& engine = *engine_;
  engine.timer.report(metrics);
  metrics.parameter_gathers = engine.gathers.total();
  metrics.recompute_gathers = engine.gathers.recompute;
  last_gathers_ = engine.gathers;
  engine.gathers = {};

  ModelStateBytes bytes;
  for (const Engine::Unit& unit : engine.units) {
    // A unit is whole between steps only if something kept it so: count what is there.
    bytes.params += static_cast<int64_t>(unit.shard.nbytes() + unit.flat.storage().nbytes());
    bytes.grads += static_cast<int64_t>(unit.shard_grad.nbytes());
    if (unit.reduced.defined()) bytes.grads += static_cast<int64_t>(unit.reduced.nbytes());
  }
  bytes.optimizer = update_.state_bytes();
  state_bytes_ = bytes;
}

std::vector<torch::Tensor> FullyShardedParameters::whole_parameters() {
  Engine& engine = *engine_;
  std::vector<torch::Tensor> whole(engine.params.size());
  for (std::size_t index = 0; index < engine.units.size(); ++index) {
    const bool was_free = engine.units[index].state == Engine::State::kFree;
    engine.launch_gather(index, GatherFor::kUncounted);
    engine.wait_gather(index);
    for (const BucketSlot& slot : engine.layout[index].slots) {
      whole[slot.param] = engine.params[slot.param].detach().clone();
    }
    if (was_free) engine.free_unit(index);
  }
  return whole;
}

}  // namespace rematlab::parallel
