#include "checkpoint/segment_checkpoint.h"

#include <torch/csrc/autograd/custom_function.h>

#include "checkpoint/kept_outputs.h"
#include "checkpoint/replay_state.h"
#include "checkpoint/sublayer_tail.h"
#include "memory/memory_phase.h"
#include "offload/offload_store.h"

namespace rematlab {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Everything backward needs besides the saved input; owned by the autograd node, so it is freed
// with the graph whether or not backward ever runs.
struct SegmentReplay : torch::CustomClassHolder {
  SegmentFn segment;
  SegmentTailFn until_tail;  // empty: the whole segment is recomputed
  KeptOutputs keep;
  KeptTensors kept;  // saved by forward, handed back one by one in the recomputation
  std::vector<torch::Tensor> params;
  RngSnapshot rng;
  AutocastSnapshot autocast;
  c10::Device device{c10::kCPU};
  bool input_requires_grad = false;
  std::shared_ptr<OffloadTicket> offloaded_input;  // set when the input went to an offload store
};

constexpr const char* kReplayKey = "rematlab.segment_replay";

// Runs in backward under the forward's RNG and autocast state, with grad mode on: the segment's
// output as the inner backward's root.
torch::Tensor recompute(SegmentReplay& replay, const torch::Tensor& input) {
  const ScopedKeeping keeping(replay.keep, &replay.kept, ScopedKeeping::Mode::kReplay);
  if (!replay.until_tail) return replay.segment(input);
  SublayerTail tail = replay.until_tail(input);
  tail.kept_as.reset();
  const torch::Tensor output = tail_without_projection(tail);
  return output.defined() ? output : tail.complete();
}

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // LibTorch runs forward with grad mode off, so the segment's interior is not kept.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const at::TensorList& /*params: inputs for their graph edges*/,
                               const c10::intrusive_ptr<SegmentReplay>& replay) {
    torch::Tensor output;
    if (replay->keep.any() && replay->until_tail) {
      // The last sublayer's tail is never recomputed: its output is not worth keeping.
      const ScopedKeeping keeping(replay->keep, &replay->kept, ScopedKeeping::Mode::kRecord);
      SublayerTail tail = replay->until_tail(input);
      tail.kept_as.reset();
      output = tail.complete();
    } else {
      output = replay->segment(input);
    }
    if (OffloadStore* store = OffloadStore::active()) {
      replay->offloaded_input = store->stash(input);
    } else {
      ctx->save_for_backward({input});
    }
    ctx->saved_data[kReplayKey] = c10::IValue::make_capsule(replay);
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto replay = c10::static_intrusive_pointer_cast<SegmentReplay>(
        ctx->saved_data.at(kReplayKey).toCapsule());
    ctx->saved_data.erase(kReplayKey);
    const torch::Tensor input = replay->offloaded_input ? replay->offloaded_input->fetch()
                                                        : ctx->get_saved_variables().at(0);
    replay->offloaded_input.reset();
    // Gradients for: input, each parameter, and the (non-tensor) replay argument.
    variable_list result(2 + replay->params.size());
    if (!grad_outputs.at(0).defined()) return result;

    // Recompute from a detached input so the inner graph ends at the segment boundary.
    torch::Tensor detached = input.detach().requires_grad_(replay->input_requires_grad);
    torch::Tensor output;
    {
      ScopedMemoryPhase phase(MemoryPhase::kRecompute);
      ScopedRngReplay rng(replay->rng, replay->device);
      ScopedAutocast autocast(replay->autocast);
      ScopedRecomputation recomputation;
      torch::AutoGradMode enable_grad(true);
      output = recompute(*replay, detached);
    }
    TORCH_CHECK(replay->kept.tensors.empty(),
                "keep: the recomputation left outputs its forward kept unused");

    // The parameters' gradients are accumulated into .grad as the inner backward makes them, as
    // they are outside a checkpoint, and not returned: autograd::grad would hold every one of the
    // segment's weight gradients until its backward ends (a whole segment's weights, live beside
    // its recomputed interior). Their accumulators' hooks (data parallelism) fire here.
    std::vector<torch::Tensor> leaves;
    if (replay->input_requires_grad) leaves.push_back(detached);
    for (const auto& param : replay->params) {
      if (param.requires_grad()) leaves.push_back(param);
    }
    if (leaves.empty()) return result;
    torch::autograd::backward({output}, {grad_outputs[0]}, /*keep_graph=*/false,
                              /*create_graph=*/false, leaves);
    if (replay->input_requires_grad) result[0] = detached.grad();
    return result;
  }
};

}  // namespace

torch::Tensor checkpoint_segment(const SegmentFn& segment, const torch::Tensor& input,
                                 const std::vector<torch::Tensor>& params,
                                 const SegmentTailFn& until_tail, const KeptOutputs& keep) {
  const bool any_param_requires_grad =
      std::any_of(params.begin(), params.end(), [](const auto& p) { return p.requires_grad(); });
  if (!torch::GradMode::is_enabled() || (!input.requires_grad() && !any_param_requires_grad)) {
    return segment(input);
  }
  auto replay = c10::make_intrusive<SegmentReplay>();
  replay->segment = segment;
  replay->until_tail = until_tail;
  replay->keep = until_tail ? keep : KeptOutputs{};
  replay->params = params;
  replay->device = input.device();
  replay->rng = RngSnapshot::capture(input.device());
  replay->autocast = AutocastSnapshot::capture(input.device().type());
  replay->input_requires_grad = input.requires_grad();
  // TensorList (not std::vector) so LibTorch registers each parameter as an input.
  return CheckpointFunction::apply(input, at::TensorList(params), replay);
}

}  // namespace rematlab
