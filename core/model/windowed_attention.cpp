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

// Whether a masked block's fused kernel needs k and v repeated to the query heads. CUDA's fused
// kernels that take a mask (memory-efficient; cuDNN in some dtypes and widths only) may refuse
// key/value heads shared by several query heads, and the dispatcher then falls back to the math
// kernel, which keeps each block's probabilities: window × 2·window values a head, 2 GiB a layer
// for Mistral 7B at batch 1. Repeating k and v once costs two q-sized tensors instead. CPU's
// fused kernel takes shared heads under a mask, so nothing is repeated there. The choice is
// probed on empty tensors of a masked block's shapes: nothing is computed or copied.
bool repeat_shared_heads(const torch::Tensor& q, const torch::Tensor& k, const WindowMasks& masks,
                         double dropout) {
  const int64_t window = masks.window();
  const int64_t rows = std::min(window, q.size(2) - window);  // the second block, the first masked
  const int64_t keys = rows + window;
  const torch::Tensor mask = masks.get(rows, keys, window, kernel_dtype(q), q.device());
  const torch::Tensor q_block = torch::empty({q.size(0), q.size(1), rows, q.size(3)}, q.options());
  const auto keys_of = [&](int64_t heads) {
    return torch::empty({k.size(0), heads, keys, k.size(3)}, k.options());
  };
  const int math = compat::kSdpaMathBackend;
  if (compat::sdpa_backend_with_grad(q_block, keys_of(k.size(1)), keys_of(k.size(1)), dropout,
                                     false, true, mask) != math)
    return false;
  const int repeated = compat::sdpa_backend_with_grad(q_block, keys_of(q.size(1)),
                                                      keys_of(q.size(1)), dropout, false, false,
                                                      mask);
  return repeated >= 0 && repeated != math;
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
  const bool repeated = kind == AttentionKind::kSdpa && groups != 1 &&
                        repeat_shared_heads(q, k, masks, p);
  const bool grouped = groups != 1 && !repeated;
  // The explicit core scales q and repeats k and v once, each laid out (batch, heads, seq,
  // head_dim), then takes views of them a block at a time: batched matmul folds such a view
  // without copying it, so what the blocks keep for backward is each of these once, as without
  // a window (strided blocks would be copied a block at a time, the keys of two blocks twice).
  torch::Tensor q_scaled, k_all = k, v_all = v;
  if (kind == AttentionKind::kMath) {
    q_scaled = (q * (1.0 / std::sqrt(static_cast<double>(q.size(3))))).contiguous();
    k_all = repeat_kv(k, groups).contiguous();
    v_all = repeat_kv(v, groups).contiguous();
  } else if (repeated) {
    k_all = repeat_kv(k, groups);
    v_all = repeat_kv(v, groups);
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
    const torch::Tensor k_block = k_all.narrow(2, first_key, keys);
    const torch::Tensor v_block = v_all.narrow(2, first_key, keys);
    torch::Tensor context;
    if (kind == AttentionKind::kSdpa) {
      // The first block has no keys before the window: plain causal attention.
      const bool causal = offset == 0;
      const torch::Tensor mask =
          causal ? torch::Tensor() : masks.get(rows, keys, offset, kernel_dtype(q), q.device());
      const int backend =
          compat::sdpa_backend_with_grad(q_block, k_block, v_block, p, causal, grouped, mask);
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
