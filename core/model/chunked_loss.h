// The output head and cross-entropy over slices of the tokens. With a large vocabulary the logits
// outweigh everything else (128k entries × 8 × 2,048 tokens in fp32 are 8 GiB); here each slice's
// logits exist only while that slice is computed, in forward and again in backward (one autograd
// node keeps only the hidden states; its backward recomputes slice by slice and sums the head's
// gradient into one tensor, handed to the graph once).
#pragma once

#include <torch/torch.h>

namespace rematlab {

// Mean cross-entropy of predicting `targets` (tokens) from `hidden` (tokens, d) through the head
// `weight` (vocab, d), in `chunks` slices (1: the plain computation). Equal to the unchunked mean
// up to fp32 summation order.
torch::Tensor chunked_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& targets, int64_t chunks);

}  // namespace rematlab
