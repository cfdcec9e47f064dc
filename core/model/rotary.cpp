#include "model/rotary.h"

namespace rematlab {

RotaryTables make_rotary_tables(int64_t seq_len, int64_t head_dim, double theta) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(torch::kFloat);
  const torch::Tensor exponents =
      torch::arange(0, head_dim, 2, options) / static_cast<double>(head_dim);
  const torch::Tensor frequencies = torch::pow(theta, -exponents);  // (head_dim/2)
  const torch::Tensor angles = torch::outer(torch::arange(seq_len, options), frequencies);
  const torch::Tensor doubled = torch::cat({angles, angles}, /*dim=*/-1);  // (seq, head_dim)
  return {doubled.cos(), doubled.sin()};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& tables) {
  const int64_t seq = x.size(2);
  const int64_t half = x.size(3) / 2;
  const torch::Tensor cos = tables.cos.narrow(0, 0, seq).to(x.scalar_type());
  const torch::Tensor sin = tables.sin.narrow(0, 0, seq).to(x.scalar_type());
  const torch::Tensor rotated = torch::cat({-x.narrow(3, half, half), x.narrow(3, 0, half)}, 3);
  return x * cos + rotated * sin;
}

}  // namespace rematlab
