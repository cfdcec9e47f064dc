#include "collective/parallel_region.h"

#include <torch/csrc/autograd/custom_function.h>

namespace rematlab {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kSequenceDim = 1;
constexpr const char* kGroupKey = "rematlab.tensor_parallel";
constexpr const char* kDimKey = "rematlab.gathered_dim";

// The group as an autograd context can hold it (a capsule of a custom class).
struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(TensorParallel held) : group(std::move(held)) {}
  TensorParallel group;
};

void keep_group(AutogradContext* ctx, const TensorParallel& group) {
  ctx->saved_data[kGroupKey] = c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(group));
}

TensorParallelGroup& group_of(AutogradContext* ctx) {
  return *c10::static_intrusive_pointer_cast<GroupHolder>(ctx->saved_data.at(kGroupKey).toCapsule())
              ->group;
}

torch::Tensor my_slice(const torch::Tensor& whole, const TensorParallelGroup& group,
                       int64_t dim = kSequenceDim) {
  const int64_t width = whole.size(dim) / group.size();
  return whole.narrow(dim, group.rank() * width, width).contiguous();
}

class IntoRegion : public torch::autograd::Function<IntoRegion> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const TensorParallel& group) {
    keep_group(ctx, group);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {group_of(ctx).sum(grads.at(0), "summing an input's gradient over tensor ranks"),
            torch::Tensor()};
  }
};

class OutOfRegion : public torch::autograd::Function<OutOfRegion> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& partial,
                               const TensorParallel& group) {
    keep_group(ctx, group);
    return group->sum(partial, "summing a row-parallel layer over tensor ranks");
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads.at(0), torch::Tensor()};
  }
};

class GatherSequence : public torch::autograd::Function<GatherSequence> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& local,
                               const TensorParallel& group, int64_t dim) {
    keep_group(ctx, group);
    ctx->saved_data[kDimKey] = dim;
    return group->gather(local, dim, "gathering the sequence over tensor ranks");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {group_of(ctx).sum_and_scatter(grads.at(0), ctx->saved_data.at(kDimKey).toInt(),
                                          "scattering a gathered sequence's gradient"),
            torch::Tensor(), torch::Tensor()};
  }
};

class ScatterSequence : public torch::autograd::Function<ScatterSequence> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& partial,
                               const TensorParallel& group, int64_t dim) {
    keep_group(ctx, group);
    ctx->saved_data[kDimKey] = dim;
    return group->sum_and_scatter(partial, dim,
                                  "summing a row-parallel layer into sequence slices");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {group_of(ctx).gather(grads.at(0), ctx->saved_data.at(kDimKey).toInt(),
                                 "gathering a scattered sequence's gradient"),
            torch::Tensor(), torch::Tensor()};
  }
};

class SplitSequence : public torch::autograd::Function<SplitSequence> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& whole,
                               const TensorParallel& group) {
    keep_group(ctx, group);
    return my_slice(whole, *group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {
        group_of(ctx).gather(grads.at(0), kSequenceDim, "gathering a split sequence's gradient"),
        torch::Tensor()};
  }
};

class GatherWhole : public torch::autograd::Function<GatherWhole> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& local,
                               const TensorParallel& group, int64_t dim) {
    keep_group(ctx, group);
    ctx->saved_data[kDimKey] = dim;
    return group->gather(local, dim, "gathering a sequence for work every tensor rank repeats");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {my_slice(grads.at(0), group_of(ctx), ctx->saved_data.at(kDimKey).toInt()),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor into_region(const torch::Tensor& x, const TensorParallel& group) {
  return IntoRegion::apply(x, group);
}

torch::Tensor out_of_region(const torch::Tensor& partial, const TensorParallel& group) {
  return OutOfRegion::apply(partial, group);
}

int64_t gathered_dim(GatheredOrder order) {
  return order == GatheredOrder::kRankMajor ? 0 : kSequenceDim;
}

torch::Tensor gather_sequence(const torch::Tensor& local, const TensorParallel& group,
                              GatheredOrder order) {
  return GatherSequence::apply(local, group, gathered_dim(order));
}

torch::Tensor scatter_sequence(const torch::Tensor& partial, const TensorParallel& group,
                               GatheredOrder order) {
  return ScatterSequence::apply(partial, group, gathered_dim(order));
}

torch::Tensor split_sequence(const torch::Tensor& whole, const TensorParallel& group) {
  return SplitSequence::apply(whole, group);
}

torch::Tensor gather_whole(const torch::Tensor& local, const TensorParallel& group,
                           GatheredOrder order) {
  return GatherWhole::apply(local, group, gathered_dim(order));
}

}  // namespace rematlab
