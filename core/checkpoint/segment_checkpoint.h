// Activation checkpointing for LibTorch C++: run a segment so that backward keeps only its
// input and recomputes the interior, with gradients equal bit for bit to plain autograd.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "checkpoint/sublayer_tail.h"

namespace rematlab {

using SegmentFn = std::function<torch::Tensor(const torch::Tensor&)>;
// The same segment run up to the tail of its last sublayer (the output projection, its dropout
// and the residual add); segment(x) must equal until_tail(x).complete().
using SegmentTailFn = std::function<SublayerTail(const torch::Tensor&)>;

// Returns segment(input). When grad mode is on, only `input` is saved; backward restores the
// RNG and autocast state that forward saw, recomputes segment(input), returns the gradient of
// `input` and adds those of `params` (every parameter the segment uses that requires grad) into
// their `.grad` as the inner backward makes them, as PyTorch's reentrant checkpoint does: a
// segment's weight gradients are never all held at once. So train with backward();
// torch::autograd::grad cannot reach a parameter through a checkpointed segment. Under no-grad
// it is a plain call. Nothing leaks when backward never runs: the saved state lives in the graph.
// With `until_tail` the recomputation stops early: it runs the segment up to its tail and forms
// the tail's gradients without its projection (sublayer_tail.h), which is never recomputed.
// With `keep`, the outputs of those projections are saved in forward and not recomputed either
// (kept_outputs.h); the last sublayer's tail keeps nothing, as nothing needs its output.
torch::Tensor checkpoint_segment(const SegmentFn& segment, const torch::Tensor& input,
                                 const std::vector<torch::Tensor>& params,
                                 const SegmentTailFn& until_tail = nullptr,
                                 const KeptOutputs& keep = {});

}  // namespace rematlab
