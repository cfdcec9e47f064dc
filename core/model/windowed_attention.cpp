#include "model/windowed_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "compat/torch_compat.h"
#include "model/attention.h"

namespace rematlab {
namespace {

// Query row r of a block sees key column t when the key is not after it (t ≤ r + offset) and
// is one of its `window` latest (t > r + offset - window).
torch::Tensor hidden_scores(int64_t rows, int64_t keys, int64_t offset, int64_t window,
                            const torch::Device& device) {
  const auto positions = torch::TensorOptions().dtype(torch::kLong).device(device);
  const torch::Tensor row = torch::arange(rows, positions).unsqueeze(1) + offset;
  const torch::Tensor key = torch::arange(keys, positions).unsqueeze(0);
  return (key > row).logical_or(key <= row - window);
}

// The dtype the fused kernel will see q in: autocast's when autocast is on (it casts every
// floating argument, the mask too, and a mask already in that dtype is not copied).
torch::ScalarType kernel_dtype(const torch::Tensor& q) {
  const at::DeviceType type = q.device().type();
  return compat::autocast_enabled(type) ? compat::autocast_dtype(type) : q.scalar_type();
}

}  // namespace

torch::Tensor WindowMasks::get(int64_t rows, int64_t keys, int64_t offset, torch::ScalarType dtype,
                               const torch::Device& device) const {
  const Key key{rows, keys, offset, static_cast<int>(dtype), device.str()};
  const std::lock_guard<std::mutex> lock(mutex_);
  auto found = cache_.find(key);
  if (found != cache_.end()) return found->second;
  const torch::NoGradGuard no_grad;
  torch::Tensor hidden = hidden_scores(rows, keys, offset, window_, device);
  torch::Tensor mask =
      dtype == torch::kBool
          ? hidden
          : torch::zeros({rows, keys}, torch::TensorOptions().dtype(dtype).device(device))
                .masked_fill_(hidden, -std::numeric_limits<double>::infinity());
  cache_.emplace(key, mask);
  return mask;
}

torch::Tensor windowed_attention(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const WindowMasks& masks, double dropout,
                                 bool training, AttentionKind kind) {
  const int64_t window = masks.window();
  const int64_t seq = q.size(2);
  const int64_t groups = q.size(1) / k.size(1);
  const double p = training ? dropout : 0.0;
  // Shared key/value heads go to the fused kernels as they are, unless a masked block's kernel
  // refuses them (see below): then they are repeated once for the blocks that follow.
  bool grouped = groups != 1;
  bool repeat_refused = false;  // repeated heads got the explicit kernel too: not asked again
  // The explicit core scales q and repeats k and v once, each laid out (batch, heads, seq,
  // head_dim), then takes views of them a block at a time: batched matmul folds such a view
  // without copying it, so what the blocks keep for backward is each of these once, as without
  // a window (strided blocks would be copied a block at a time, the keys of two blocks twice).
  torch::Tensor q_scaled, k_all = k, v_all = v;
  if (kind == AttentionKind::kMath) {
    q_scaled = (q * (1.0 / std::sqrt(static_cast<double>(q.size(3))))).contiguous();
    k_all = repeat_kv(k, groups).contiguous();
    v_all = repeat_kv(v, groups).contiguous();
  }
  // The queries are split (one backward joins their gradients); the keys of neighbouring blocks
  // overlap, so those are narrowed views.
  const std::vector<torch::Tensor> queries =
      (kind == AttentionKind::kMath ? q_scaled : q).split(window, 2);
  std::vector<torch::Tensor> blocks;
  for (int64_t first = 0, index = 0; first < seq; first += window, ++index) {
    const int64_t rows = std::min(window, seq - first);
    const torch::Tensor& q_block = queries[static_cast<std::size_t>(index)];
    const int64_t first_key = std::max<int64_t>(0, first - window);
    const int64_t keys = first + rows - first_key;
    const int64_t offset = first - first_key;
    torch::Tensor k_block = k_all.narrow(2, first_key, keys);
    torch::Tensor v_block = v_all.narrow(2, first_key, keys);
    torch::Tensor context;
    if (kind == AttentionKind::kSdpa) {
      // The first block has no keys before the window: plain causal attention.
      const bool causal = offset == 0;
      const torch::Tensor mask =
          causal ? torch::Tensor() : masks.get(rows, keys, offset, kernel_dtype(q), q.device());
      int backend =
          compat::sdpa_backend_with_grad(q_block, k_block, v_block, p, causal, grouped, mask);
      if (grouped && !repeat_refused && backend == compat::kSdpaMathBackend) {
        // CUDA's kernels that take a mask (memory-efficient; cuDNN in some dtypes and widths),
        // and in fp32 the causal first block's too (seen on an H200), may refuse shared heads;
        // the explicit fallback would keep each block's probabilities: window × 2·window values
        // a head, 2 GiB a masked block for Mistral 7B at batch 1. Repeated, k and v cost two
        // q-sized tensors, kept for the remaining blocks (CPU's kernel takes shared heads). A
        // recomputation asks the same question of the same shapes, and repeats as well.
        const torch::Tensor k_repeated = repeat_kv(k, groups);
        const torch::Tensor v_repeated = repeat_kv(v, groups);
        const int repeated_backend = compat::sdpa_backend_with_grad(
            q_block, k_repeated.narrow(2, first_key, keys), v_repeated.narrow(2, first_key, keys),
            p, causal, false, mask);
        if (repeated_backend >= 0 && repeated_backend != compat::kSdpaMathBackend) {
          k_all = k_repeated;
          v_all = v_repeated;
          k_block = k_all.narrow(2, first_key, keys);
          v_block = v_all.narrow(2, first_key, keys);
          grouped = false;
          backend = repeated_backend;
        } else if (!causal) {
          repeat_refused = true;  // the masked blocks' answer; the causal block's says less
        }
      }
      AttentionKernelLog::record(torch::GradMode::is_enabled(), backend);
      const compat::ScopedSdpaBackend only(backend);
      context =
          compat::scaled_dot_product_attention(q_block, k_block, v_block, p, causal, grouped, mask);
    } else {
      torch::Tensor scores = torch::matmul(q_block, k_block.transpose(-2, -1));
      scores.masked_fill_(masks.get(rows, keys, offset, torch::kBool, q.device()),
                          -std::numeric_limits<double>::infinity());
      torch::Tensor probs = torch::dropout(torch::softmax(scores, -1), p, training);
      context = torch::matmul(probs, v_block);
    }
    blocks.push_back(context.transpose(1, 2));  // (batch, rows, heads, head_dim)
  }
  return torch::cat(blocks, 1);
}

}  // namespace rematlab
