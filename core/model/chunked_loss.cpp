#include "model/chunked_loss.h"

#include "checkpoint/segment_checkpoint.h"
#include "offload/offload_store.h"

namespace rematlab {

torch::Tensor chunked_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& targets, int64_t chunks) {
  namespace F = torch::nn::functional;
  if (chunks <= 1) return F::cross_entropy(F::linear(hidden, weight), targets);
  const double tokens = static_cast<double>(hidden.size(0));
  // Offload is for the sublayers' saved inputs; these slices stay where they are.
  const ScopedOffload no_offload(nullptr);
  const auto hidden_slices = hidden.chunk(chunks, /*dim=*/0);
  const auto target_slices = targets.chunk(chunks, /*dim=*/0);
  torch::Tensor total;
  for (std::size_t i = 0; i < hidden_slices.size(); ++i) {
    auto slice_loss = [weight, target = target_slices[i]](const torch::Tensor& h) {
      return F::cross_entropy(F::linear(h, weight), target,
                              F::CrossEntropyFuncOptions().reduction(torch::kSum));
    };
    const torch::Tensor part = checkpoint_segment(slice_loss, hidden_slices[i], {weight});
    total = total.defined() ? total + part : part;
  }
  return total / tokens;
}

}  // namespace rematlab
