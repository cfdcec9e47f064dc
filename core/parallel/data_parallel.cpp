#include "parallel/data_parallel.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <stdexcept>
#include <unordered_set>

#include "common/errors.h"
#include "parallel/autograd_hooks.h"

namespace rematlab::parallel {
namespace {

using torch::autograd::variable_list;

// Gradients mode: buckets on the wire at once before the oldest is waited for (the layout
// planner counts one bucket whole at the activations' peak: early in backward, none is on the
// wire yet).
constexpr std::size_t kBucketsInFlight = 2;

}  // namespace

struct DataParallel::Engine {
  struct Bucket {
    torch::Tensor grads;        // flat gradients; the parameters' .grad are views into it
    torch::Tensor late;         // gradients that arrived after the bucket was sent
    torch::Tensor params_flat;  // sharded: the parameters (the model's are views into it)
    torch::Tensor shard_param;  // sharded: this rank's slice of params_flat
    torch::Tensor shard_grad;   // gradients mode: this rank's reduced slice, its own storage
    torch::Tensor scattered;    // NCCL gradients mode after a step's first round: the sum
    std::size_t ready = 0;      // parameters accumulated in this round
    bool complete = false;
    bool sent = false;
    bool summed = false;  // gradients mode: shard_grad holds an earlier round's sum this step
    c10::intrusive_ptr<c10d::Work> work;
  };

  std::shared_ptr<DistContext> context;
  ShardMode shard = ShardMode::kNone;
  std::vector<torch::Tensor> params;
  std::vector<BucketLayout> layout;
  std::vector<Bucket> buckets;
  std::vector<std::size_t> bucket_of;  // per parameter
  std::vector<int64_t> offset_of;      // per parameter, in its bucket
  std::vector<bool> accumulated;       // per parameter, in this backward
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // kept alive: hooks live there
  bool armed = false;            // this backward's gradients are sent (see every_backward())
  bool skip_untouched = false;   // see DataParallelOptions::rounds_skip_untouched
  std::size_t next_to_send = 0;  // in index order
  std::vector<std::size_t> on_the_wire;  // this round's buckets in the order they went out
  std::size_t harvested = 0;             // of on_the_wire
  int64_t late_gradients = 0;
  BufferBytes buffers;  // gradients mode's whole buckets, late gradients
  CommTimer timer;

  bool device_timed() const { return context->device().is_cuda(); }
  // Gradients mode reduces every backward's gradients into the shards (a round each), so no
  // whole gradients outlive a backward; otherwise the step's last micro-batch is the one round.
  bool every_backward() const { return shard == ShardMode::kGradients; }
  torch::TensorOptions flat_options() const { return params.front().options(); }
  int64_t bucket_bytes(std::size_t index) const {
    return layout[index].padded_numel * static_cast<int64_t>(params.front().element_size());
  }

  torch::Tensor view_of(std::size_t param, const torch::Tensor& flat) const {
    return flat.narrow(0, offset_of[param], params[param].numel()).view(params[param].sizes());
  }

  // Gradients mode keeps no full gradients between steps: a bucket's buffer is made when its
  // first gradient arrives and released once the bucket is reduced.
  void ensure_gradients(std::size_t index) {
    Bucket& bucket = buckets[index];
    if (bucket.grads.defined()) return;
    torch::NoGradGuard no_grad;
    bucket.grads = torch::zeros({layout[index].padded_numel}, flat_options());
    buffers.add(bucket_bytes(index));
    for (const BucketSlot& slot : layout[index].slots) {
      params[slot.param].mutable_grad() = view_of(slot.param, bucket.grads);
    }
  }

  void release_gradients(std::size_t index) {
    for (const BucketSlot& slot : layout[index].slots) params[slot.param].mutable_grad().reset();
    buckets[index].grads.reset();
    buffers.remove(bucket_bytes(index));
  }

  // Gradients that arrived after their bucket was sent wait here (see before_accumulate).
  torch::Tensor& late_buffer(std::size_t index) {
    Bucket& bucket = buckets[index];
    if (!bucket.late.defined()) {
      bucket.late = torch::zeros({layout[index].padded_numel}, flat_options());
      buffers.add(bucket_bytes(index));
    }
    return bucket.late;
  }

  void release_late(std::size_t index) {
    buckets[index].late.reset();
    buffers.remove(bucket_bytes(index));
  }

  variable_list before_accumulate(std::size_t param, const variable_list& grads) {
    // Nothing to add (an accumulator reached by no gradient): no buffer to make for it; a
    // bucket already sent and let go would otherwise get a whole one again.
    if (grads.empty() || !grads[0].defined()) return grads;
    const std::size_t index = bucket_of[param];
    Bucket& bucket = buckets[index];
    // Sent means sent in this round until finish(), armed or not (a pipeline disarms between its
    // chunks' last backwards), whether on the wire still or already summed and let go.
    if (bucket.sent) {
      // The bucket's buffer is on the wire, or gone: keep this part aside for the step's last
      // finish(), and hand the accumulator nothing (it skips an undefined gradient).
      torch::NoGradGuard no_grad;
      late_buffer(index)
          .narrow(0, offset_of[param], params[param].numel())
          .add_(grads[0].reshape(-1));
      ++late_gradients;
      return {torch::Tensor()};
    }
    ensure_gradients(index);
    return grads;
  }

  void after_accumulate(std::size_t param) {
    if (!armed || accumulated[param]) return;
    accumulated[param] = true;
    const std::size_t index = bucket_of[param];
    Bucket& bucket = buckets[index];
    if (++bucket.ready == layout[index].slots.size()) bucket.complete = true;
    if (skip_untouched) {
      // A pipeline stage's data ranks run one schedule over one graph: its buckets complete in
      // the same order on each, and go out so. In index order an interleaved stage's backward
      // of one chunk would send nothing: the last bucket (index 0) is the last chunk's.
      if (bucket.complete) go_out(index);
      return;
    }
    // Elsewhere in index order on every rank, whatever order they complete in.
    while (next_to_send < buckets.size() && buckets[next_to_send].complete) {
      go_out(next_to_send++);
    }
  }

  void go_out(std::size_t index) {
    send(index);
    on_the_wire.push_back(index);
    // Gradients mode holds at most two buckets on the wire: the oldest is summed into its shard
    // and its whole gradients let go while backward goes on. Waiting here, inside backward,
    // relies on every rank reaching its buckets at the same point of the same backward (its
    // tensor ranks' collectives included), as every rank runs the same graph.
    while (shard == ShardMode::kGradients && on_the_wire.size() - harvested > kBucketsInFlight) {
      harvest(on_the_wire[harvested++]);
    }
  }

  // Gloo's reduce-scatter frees, on its own thread, a buffer it allocated on the caller's, so
  // the memory tracker (which sees frees on the training thread only) would count it live
  // forever. On Gloo the gradients mode therefore all-reduces a bucket and keeps its shard: twice
  // the traffic of a reduce-scatter, the same memory. NCCL reduce-scatters.
  bool scatter_by_all_reduce() const {
    return shard == ShardMode::kGradients && !context->device().is_cuda();
  }

  // The collective that sums `input` (a bucket-sized buffer) over ranks: an all-reduce in place,
  // or in gradients mode a reduce-scatter into this rank's shard `output` (see take_shard()).
  c10::intrusive_ptr<c10d::Work> reduce(torch::Tensor& input, torch::Tensor& output) {
    if (shard == ShardMode::kGradients && !scatter_by_all_reduce()) {
      return context->backend()._reduce_scatter_base(output, input);
    }
    std::vector<at::Tensor> tensors{input};
    return context->backend().allreduce(tensors);
  }

  // After reduce() is done: this rank's shard of the sum.
  torch::Tensor take_shard(std::size_t index, const torch::Tensor& input,
                           const torch::Tensor& output) const {
    if (!scatter_by_all_reduce()) return output;
    const BucketLayout& bucket = layout[index];
    return input.narrow(0, bucket.shard_begin(context->rank()), bucket.shard_numel);
  }

  void send(std::size_t index) {
    ensure_gradients(index);
    Bucket& bucket = buckets[index];
    bucket.sent = true;
    torch::Tensor& output = shard_output(index);
    bucket.work = reduce(bucket.grads, output);
    timer.launched(bucket.work, device_timed());
  }

  // Where a reduce-scatter writes this rank's shard: straight into shard_grad in a step's first
  // round, beside it in the later ones (added in harvest()).
  torch::Tensor& shard_output(std::size_t index) {
    Bucket& bucket = buckets[index];
    if (shard != ShardMode::kGradients || scatter_by_all_reduce() || !bucket.summed) {
      return bucket.shard_grad;
    }
    bucket.scattered = torch::empty_like(bucket.shard_grad);
    buffers.add(static_cast<int64_t>(bucket.scattered.nbytes()));
    return bucket.scattered;
  }

  // A sent bucket's collective waited for; in gradients mode its sum added to this rank's shard
  // and its whole gradients let go.
  void harvest(std::size_t index) {
    Bucket& bucket = buckets[index];
    timer.blocking([&] { context->wait(bucket.work, "averaging gradients"); });
    timer.waited(bucket.work);
    bucket.work.reset();
    if (shard != ShardMode::kGradients) return;
    torch::NoGradGuard no_grad;
    if (bucket.scattered.defined()) {
      bucket.shard_grad.add_(bucket.scattered);
      buffers.remove(static_cast<int64_t>(bucket.scattered.nbytes()));
      bucket.scattered.reset();
    } else if (scatter_by_all_reduce()) {
      const torch::Tensor mine = take_shard(index, bucket.grads, bucket.shard_grad);
      if (bucket.summed) {
        bucket.shard_grad.add_(mine);
      } else {
        bucket.shard_grad.copy_(mine);
      }
    }
    bucket.summed = true;
    release_gradients(index);
  }

  // A bucket this round reached: sent already, or holding a gradient.
  bool touched(std::size_t index) const {
    return buckets[index].sent || buckets[index].grads.defined();
  }

  // The end of a round: every bucket sent and summed (or every one it reached), in the same order
  // on every rank. At the step's last micro-batch the gradients kept aside are added (over the
  // step's rounds: agreeing on them is a collective the other rounds need not wait for) and the
  // sums become averages.
  void finish(bool last) {
    armed = false;
    // Buckets with a parameter that got no gradient (unused in this graph, or in another chunk
    // of this stage) go now, in index order.
    for (std::size_t index = 0; index < buckets.size(); ++index) {
      if (!buckets[index].sent && (!skip_untouched || touched(index))) go_out(index);
    }
    while (harvested < on_the_wire.size()) harvest(on_the_wire[harvested++]);
    for (Bucket& bucket : buckets) {
      bucket.ready = 0;
      bucket.complete = bucket.sent = false;
    }
    std::fill(accumulated.begin(), accumulated.end(), false);
    next_to_send = harvested = 0;
    on_the_wire.clear();
    if (!last) return;
    torch::NoGradGuard no_grad;
    for (Bucket& bucket : buckets) {  // reached by no round of the step: nothing summed
      if (shard == ShardMode::kGradients && !bucket.summed) bucket.shard_grad.zero_();
    }
    send_late_gradients();
    const double world = static_cast<double>(context->world_size());
    for (Bucket& bucket : buckets) {
      if (shard == ShardMode::kGradients) {
        bucket.shard_grad.div_(world);
        bucket.summed = false;
      } else {
        bucket.grads.div_(world);
      }
    }
  }

  // Gradients kept aside are averaged the same way and added. Every rank must issue the same
  // collectives, so the ranks first agree on which buckets have some.
  void send_late_gradients() {
    torch::Tensor flags = torch::zeros({static_cast<int64_t>(buckets.size())},
                                       torch::dtype(torch::kFloat64).device(context->device()));
    for (std::size_t index = 0; index < buckets.size(); ++index) {
      if (buckets[index].late.defined()) flags[static_cast<int64_t>(index)] = 1.0;
    }
    std::vector<at::Tensor> vote{flags};
    timer.blocking(
        [&] { context->wait(context->backend().allreduce(vote), "agreeing on late gradients"); });
    const torch::Tensor any_rank = flags.cpu();
    for (std::size_t index = 0; index < buckets.size(); ++index) {
      if (any_rank[static_cast<int64_t>(index)].item<double>() == 0.0) continue;
      Bucket& bucket = buckets[index];
      late_buffer(index);  // this rank's gradients may all have come in time
      torch::Tensor target = shard == ShardMode::kGradients ? bucket.shard_grad : bucket.grads;
      torch::Tensor reduced = shard == ShardMode::kGradients && !scatter_by_all_reduce()
                                  ? torch::empty_like(target)
                                  : bucket.late;
      const int64_t scattered = reduced.is_same(bucket.late) ? 0 : reduced.nbytes();
      buffers.add(scattered);
      timer.blocking(
          [&] { context->wait(reduce(bucket.late, reduced), "averaging late gradients"); });
      buffers.remove(scattered);
      torch::NoGradGuard no_grad;
      target.add_(shard == ShardMode::kGradients ? take_shard(index, bucket.late, reduced)
                                                 : reduced);
      release_late(index);
    }
  }
};

DataParallel::DataParallel(std::shared_ptr<DistContext> context, DataParallelOptions options)
    : context_(std::move(context)), options_(options), engine_(std::make_shared<Engine>()) {
  engine_->context = context_;
  engine_->shard = options_.shard;
  engine_->skip_untouched = options_.rounds_skip_untouched;
}

DataParallel::~DataParallel() = default;

int64_t DataParallel::world_size() const { return context_->world_size(); }
int64_t DataParallel::rank() const { return context_->rank(); }
const std::vector<BucketLayout>& DataParallel::buckets() const { return engine_->layout; }
int64_t DataParallel::late_gradients() const { return engine_->late_gradients; }

const std::vector<BucketLayout>& DataParallel::shard_layouts() const {
  static const std::vector<BucketLayout> kNone;
  return options_.shard == ShardMode::kNone ? kNone : engine_->layout;
}

std::vector<torch::Tensor> DataParallel::gradient_shards() {
  std::vector<torch::Tensor> shards;
  if (options_.shard == ShardMode::kNone) return shards;
  const int rank = context_->rank();
  for (std::size_t index = 0; index < engine_->buckets.size(); ++index) {
    const Engine::Bucket& bucket = engine_->buckets[index];
    const BucketLayout& layout = engine_->layout[index];
    shards.push_back(options_.shard == ShardMode::kGradients
                         ? bucket.shard_grad
                         : bucket.grads.narrow(0, layout.shard_begin(rank), layout.shard_numel));
  }
  return shards;
}

void DataParallel::count_squares_with(ShardSquares squares) {
  shard_update_.count_squares_with(std::move(squares));
}

int64_t DataParallel::buffer_peak_bytes() const { return engine_->buffers.peak(); }

void DataParallel::attach(const std::vector<torch::Tensor>& params) {
  Engine& engine = *engine_;
  if (!engine.params.empty()) throw std::logic_error("DataParallel::attach called twice");
  if (params.empty()) throw std::logic_error("DataParallel: no parameters");
  for (const torch::Tensor& param : params) {
    if (param.scalar_type() != params.front().scalar_type() ||
        param.device() != context_->device()) {
      throw std::logic_error("DataParallel: parameters must share one dtype and live on " +
                             context_->device().str());
    }
  }
  engine.params = params;
  std::vector<int64_t> numels;
  std::vector<int64_t> groups;
  for (const torch::Tensor& param : params) {
    numels.push_back(param.numel());
    groups.push_back(options_.bucket_group ? options_.bucket_group(param) : 0);
  }
  engine.layout = plan_buckets(numels, params.front().element_size(), options_.bucket_bytes,
                               context_->world_size(), groups);
  options_.bucket_group = nullptr;  // asked here only: whatever it reaches need not outlive attach
  engine.buckets.resize(engine.layout.size());
  engine.bucket_of.assign(params.size(), 0);
  engine.offset_of.assign(params.size(), 0);
  engine.accumulated.assign(params.size(), false);

  torch::NoGradGuard no_grad;
  const int rank = context_->rank();
  for (std::size_t index = 0; index < engine.layout.size(); ++index) {
    const BucketLayout& layout = engine.layout[index];
    Engine::Bucket& bucket = engine.buckets[index];
    // Rank 0's parameters, for everyone: one broadcast per bucket.
    torch::Tensor flat = torch::zeros({layout.padded_numel}, engine.flat_options());
    for (const BucketSlot& slot : layout.slots) {
      engine.bucket_of[slot.param] = index;
      engine.offset_of[slot.param] = slot.offset;
      flat.narrow(0, slot.offset, slot.numel).copy_(params[slot.param].reshape(-1));
    }
    std::vector<at::Tensor> tensors{flat};
    context_->wait(context_->backend().broadcast(tensors), "broadcasting parameters from rank 0");
    if (options_.shard == ShardMode::kNone) {
      for (const BucketSlot& slot : layout.slots) {
        params[slot.param].copy_(engine.view_of(slot.param, flat));
      }
    } else {
      // The model's parameters become views into the flat buffer, so that the all-gather after
      // each update writes them in place.
      bucket.params_flat = flat;
      for (const BucketSlot& slot : layout.slots) {
        torch::Tensor param = params[slot.param];
        param.set_data(engine.view_of(slot.param, flat));
      }
      bucket.shard_param = flat.narrow(0, layout.shard_begin(rank), layout.shard_numel);
    }
    if (options_.shard == ShardMode::kGradients) {
      bucket.shard_grad = torch::zeros({layout.shard_numel}, engine.flat_options());
      for (const BucketSlot& slot : layout.slots) {
        torch::Tensor param = params[slot.param];
        param.mutable_grad().reset();
      }
    } else {
      bucket.grads = torch::zeros({layout.padded_numel}, engine.flat_options());
      for (const BucketSlot& slot : layout.slots) {
        torch::Tensor param = params[slot.param];
        param.mutable_grad() = engine.view_of(slot.param, bucket.grads);
      }
    }
  }

  hook_accumulators(params);
}

// Each parameter's gradient accumulator tells the engine before and after it adds a gradient.
void DataParallel::hook_accumulators(const std::vector<torch::Tensor>& params) {
  Engine& engine = *engine_;
  std::weak_ptr<Engine> weak = engine_;
  for (std::size_t index = 0; index < params.size(); ++index) {
    std::shared_ptr<torch::autograd::Node> accumulator =
        torch::autograd::impl::grad_accumulator(params[index]);
    if (!accumulator) throw std::logic_error("DataParallel: a parameter does not require grad");
    accumulator->add_pre_hook(
        std::make_unique<AccumulatorPreHook>([weak, index](const variable_list& grads) {
          if (auto locked = weak.lock()) return locked->before_accumulate(index, grads);
          return grads;
        }));
    accumulator->add_post_hook(std::make_unique<AccumulatorPostHook>([weak, index] {
      if (auto locked = weak.lock()) locked->after_accumulate(index);
    }));
    engine.accumulators.push_back(std::move(accumulator));
  }
}

bool DataParallel::any_rank(bool local) {
  return engine_->timer.blocking([&] { return context_->any(local); });
}

double DataParallel::mean(double local) {
  return engine_->timer.blocking([&] { return context_->sum(local); }) /
         static_cast<double>(context_->world_size());
}

std::vector<double> DataParallel::max_over_ranks(const std::vector<double>& local) {
  return context_->max(local);
}

void DataParallel::before_backward(bool last) {
  engine_->armed = last || engine_->every_backward();
}

void DataParallel::after_backward(bool last) {
  if (last || engine_->every_backward()) engine_->finish(last);
}

std::optional<double> DataParallel::step(torch::optim::Optimizer& optimizer, double max_norm) {
  last_optimizer_ = &optimizer;
  if (options_.shard == ShardMode::kNone) return std::nullopt;
  Engine& engine = *engine_;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> shards;
  const std::vector<torch::Tensor> grads = gradient_shards();
  for (std::size_t index = 0; index < engine.buckets.size(); ++index) {
    auto& bucket = engine.buckets[index];
    bucket.shard_param.mutable_grad() = grads[index];
    shards.push_back(bucket.shard_param);
  }
  const double total = shard_update_.step(*context_, shards, optimizer, max_norm, engine.timer);
  gather_updated_parameters();
  return total;
}

void DataParallel::gather_updated_parameters() {
  Engine& engine = *engine_;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  if (!context_->device().is_cuda()) {
    // Gloo's all-gather stages its input and output in buffers of a whole bucket (under every:1
    // they were the rank's peak); a broadcast from each rank's shard, in place in the flat
    // parameters, moves the same shards and allocates nothing.
    for (std::size_t index = 0; index < engine.buckets.size(); ++index) {
      const BucketLayout& layout = engine.layout[index];
      for (int root = 0; root < context_->world_size(); ++root) {
        std::vector<at::Tensor> shard{engine.buckets[index].params_flat.narrow(
            0, layout.shard_begin(root), layout.shard_numel)};
        c10d::BroadcastOptions options;
        options.rootRank = root;
        works.push_back(context_->backend().broadcast(shard, options));
      }
    }
    engine.timer.blocking([&] {
      for (auto& work : works) context_->wait(work, "gathering updated parameters");
    });
    return;
  }
  // NCCL all-gathers each shard, sent from a copy (the collective must not read what the
  // optimizer owns).
  int64_t copies = 0;
  for (auto& bucket : engine.buckets) {
    torch::Tensor shard = bucket.shard_param.clone();
    copies += static_cast<int64_t>(shard.nbytes());
    works.push_back(context_->backend()._allgather_base(bucket.params_flat, shard));
  }
  engine.buffers.add(copies);
  engine.timer.blocking([&] {
    for (auto& work : works) context_->wait(work, "gathering updated parameters");
  });
  works.clear();  // the copies go with the collectives
  engine.buffers.remove(copies);
}

void DataParallel::report(StepMetrics& metrics) {
  Engine& engine = *engine_;
  engine.timer.report(metrics);

  ModelStateBytes bytes;
  std::unordered_set<const void*> seen;
  auto count = [&](const torch::Tensor& tensor, int64_t& total) {
    if (!tensor.defined()) return;
    if (seen.insert(tensor.storage().data()).second) {
      total += static_cast<int64_t>(tensor.storage().nbytes());
    }
  };
  for (const torch::Tensor& param : engine.params) count(param, bytes.params);
  for (const torch::Tensor& param : engine.params) count(param.grad(), bytes.grads);
  for (const auto& bucket : engine.buckets) count(bucket.shard_grad, bytes.grads);
  if (options_.shard != ShardMode::kNone) {
    bytes.optimizer = shard_update_.state_bytes();
  } else if (last_optimizer_) {
    bytes.optimizer = optimizer_state_bytes(*last_optimizer_);
  }
  state_bytes_ = bytes;
}

}  // namespace rematlab::parallel
