#include "ops/moe_routing.h"

#include "core/autograd.h"
#include "core/trace.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/moe_routing_kernels.h"
#include "ops/shape.h"

namespace tg {
namespace {

// Saves the indices only; puts each value's gradient back at its index.
struct TopkBackward final : Node {
  Shape x_shape;
  const char* name() const override { return "topk"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    if (!mask[0]) return {Tensor()};
    const Tensor indices = unpack(0);
    const int64_t C = x_shape.back(), k = indices.shape().back();
    Tensor dx = Tensor::empty({indices.numel() / std::max<int64_t>(k, 1), C}, g[0].options());
    if (dx.numel() > 0)
      TG_DISPATCH(dx.device(), topk_backward, dx, contiguous(reshape(g[0], {-1, k})), reshape(indices, {-1, k}));
    return {reshape(dx, x_shape)};
  }
};

}  // namespace

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k) {
  constexpr const char* op = "topk";
  check_floating(op, "x", x);
  TG_CHECK(x.dim() >= 1, op, "x must have at least one dim, got a scalar");
  const int64_t C = x.shape().back();
  TG_CHECK(k >= 1 && k <= C, op, "k is ", k, ", wants 1 to ", C, " (x's last dim, shape ", x.shape(), ")");
  KernelTrace::record(x.device().is_cuda() ? "topk.cuda" : "topk.cpu");
  Shape out_shape = x.shape();
  out_shape.back() = k;
  Tensor values = Tensor::empty(out_shape, x.options()), indices = Tensor::empty(out_shape, {kInt64, x.device()});
  if (values.numel() > 0) {
    NoGradGuard g;
    TG_DISPATCH(x.device(), topk, values, indices, contiguous(reshape(x, {-1, C})));
  }
  if (auto node = record<TopkBackward>({{"x", x}}, {values})) {
    node->x_shape = x.shape();
    node->saved = {SavedTensor(indices, "indices")};
  }
  return {values, indices};
}

ExpertOrder sort_by_expert(const Tensor& indices, int64_t num_experts) {
  constexpr const char* op = "sort_by_expert";
  check_dtype(op, "indices", indices, kInt64);
  TG_CHECK(indices.dim() == 2, op, "indices must be [T, k] (each token's experts), got ", indices.shape());
  TG_CHECK(num_experts >= 1, op, "num_experts must be positive, got ", num_experts);
  KernelTrace::record(indices.device().is_cuda() ? "sort_by_expert.cuda" : "sort_by_expert.cpu");
  const TensorOptions o{kInt64, indices.device()};
  ExpertOrder out{Tensor::empty({num_experts}, o), Tensor::empty({indices.numel()}, o),
                  Tensor::empty({indices.numel()}, o)};
  NoGradGuard g;
  TG_DISPATCH(indices.device(), sort_by_expert, out.counts, out.token_of_row, out.row_of_choice, contiguous(indices));
  return out;
}

}  // namespace tg
