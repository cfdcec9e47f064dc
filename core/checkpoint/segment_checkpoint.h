// Activation checkpointing for LibTorch C++: run a segment so that backward keeps only its
// input and recomputes the interior, with gradients equal bit for bit to plain autograd.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace rematlab {

using SegmentFn = std::function<torch::Tensor(const torch::Tensor&)>;

// Returns segment(input). When grad mode is on, only `input` is saved; backward restores the
// RNG and autocast state that forward saw, recomputes segment(input) and returns the gradients
// of `input` and of `params` (every parameter the segment uses that requires grad: they are
// passed in so they get gradients even when `input` does not require grad). Under no-grad it is
// a plain call. Nothing leaks when backward never runs: the saved state lives in the graph.
torch::Tensor checkpoint_segment(const SegmentFn& segment, const torch::Tensor& input,
                                 const std::vector<torch::Tensor>& params);

}  // namespace rematlab
