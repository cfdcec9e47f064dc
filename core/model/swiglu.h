// Llama's gated activation on the fused [gate; up] projection: silu(gate) · up. Written out so
// that backward keeps only the fused input (2f values a token) and forms silu(gate) again, where
// autograd through silu and the product would also keep silu(gate) (f more a token, in every
// block that trains under autograd); its gradients are those autograd forms, bit for bit (the
// same kernels: silu's backward and the product's), written into halves of one tensor rather
// than concatenated from two.
#pragma once

#include <torch/torch.h>

namespace rematlab {

// `fused` (…, 2f) → (…, f).
torch::Tensor swiglu(const torch::Tensor& fused);

}  // namespace rematlab
