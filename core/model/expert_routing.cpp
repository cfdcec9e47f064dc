#include "model/expert_routing.h"

#include <algorithm>

namespace rematlab {

ExpertRouting route_tokens(const torch::Tensor& logits, const MoeOptions& moe) {
  ExpertRouting routing;
  const int64_t tokens = logits.size(0);
  const int64_t k = moe.experts_per_token;
  // The softmax in fp32 whatever the router's precision, as transformers takes it.
  routing.probabilities = torch::softmax(logits.to(torch::kFloat), /*dim=*/-1);
  auto [top_weights, top_experts] = routing.probabilities.topk(k, /*dim=*/-1);
  if (moe.normalise_weights) top_weights = top_weights / top_weights.sum(-1, /*keepdim=*/true);
  const torch::Tensor slot_experts = top_experts.reshape({-1});
  routing.chosen = torch::bincount(slot_experts, /*weights=*/{}, moe.experts);
  // A stable sort keeps each expert's tokens in order: under a capacity the first ones stay.
  torch::Tensor order = std::get<1>(
      slot_experts.sort(/*stable=*/std::optional<bool>(true), /*dim=*/0, /*descending=*/false));
  // The one wait for the device a block makes: each expert's rows must be counted here.
  const torch::Tensor chosen_here = routing.chosen.to(torch::kCPU).contiguous();
  const int64_t* chosen = chosen_here.data_ptr<int64_t>();
  const int64_t capacity = expert_capacity(tokens, moe);
  routing.taken.assign(chosen, chosen + moe.experts);
  for (int64_t& taken : routing.taken) taken = std::min(taken, capacity);
  if (capacity < tokens * k) {
    // A slot's place among its expert's: its place in the sorted order less where they start.
    const torch::Tensor starts = routing.chosen.cumsum(0) - routing.chosen;
    const torch::Tensor sorted_experts = slot_experts.index_select(0, order);
    const torch::Tensor place =
        torch::arange(tokens * k, order.options()) - starts.index_select(0, sorted_experts);
    order = order.masked_select(place < capacity);
  }
  routing.slots = order;
  routing.weights = top_weights.reshape({-1}).index_select(0, order);
  return routing;
}

torch::Tensor gather_expert_inputs(const torch::Tensor& tokens, const ExpertRouting& routing,
                                   int64_t experts_per_token) {
  // Each token copied k times first, so that the gather's backward adds into distinct rows and
  // the k copies' gradients are summed by expand's backward, in a fixed order.
  const int64_t count = tokens.size(0);
  const int64_t d = tokens.size(1);
  const torch::Tensor repeated =
      tokens.unsqueeze(1).expand({count, experts_per_token, d}).reshape({-1, d});
  return repeated.index_select(0, routing.slots);
}

torch::Tensor combine_expert_outputs(const torch::Tensor& outputs, const ExpertRouting& routing,
                                     int64_t tokens, int64_t experts_per_token) {
  const int64_t slots = tokens * experts_per_token;
  const int64_t taken = outputs.size(0);
  torch::Tensor weighted = outputs * routing.weights.to(outputs.scalar_type()).unsqueeze(1);
  // Each slot's row of `weighted` (the inverse of the grouping), a dropped slot's a zero row
  // after them. A gather keeps only its index for backward, where a scatter into zeros would
  // keep what it scattered (index_copy keeps its source).
  torch::Tensor where = torch::full({slots}, taken, routing.slots.options());
  where.index_put_({routing.slots}, torch::arange(taken, routing.slots.options()));
  if (taken < slots) weighted = torch::cat({weighted, weighted.new_zeros({1, outputs.size(1)})});
  torch::Tensor by_slot = weighted.index_select(0, where);
  weighted.reset();  // not beside the sum
  return by_slot.view({tokens, experts_per_token, -1}).sum(1);
}

}  // namespace rematlab
