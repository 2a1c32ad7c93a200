// Casts and device moves are core's copy_ plus a node that converts the gradient back.
#include "ops/cast.h"

#include "core/autograd.h"
#include "core/primitives.h"
#include "ops/cast_kernels.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/shape.h"

namespace tg {
namespace {

struct ToBackward final : Node {
  DType dtype = kFloat32;
  Device device;
  const char* name() const override { return "to"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    return {to(g[0], dtype, device)};
  }
};

}  // namespace

Tensor to(const Tensor& x, DType dtype, Device device) {
  check_defined("to", "x", x);
  if (x.dtype() == dtype && x.device() == device) return x;
  TG_CHECK(!x.requires_grad() || is_floating_point(dtype), "to", "a tensor that requires grad can "
           "only be cast to a floating-point dtype, got ", dtype);
  Tensor out = Tensor::empty(x.shape(), {dtype, device});
  {
    NoGradGuard g;
    copy_(out, x);
  }
  if (auto n = record<ToBackward>({{"x", x}}, {out})) {
    n->dtype = x.dtype();
    n->device = x.device();
  }
  return out;
}

Tensor to(const Tensor& x, DType dtype) { return to(x, dtype, x.device()); }

Tensor to(const Tensor& x, Device device) { return to(x, x.dtype(), device); }

std::vector<Tensor> to_packed(const std::vector<Tensor>& xs, DType dtype) {
  TG_CHECK(!xs.empty() && xs.size() <= kMaxPacked, "to_packed", "wants 1 to ", kMaxPacked, " tensors, got ",
           xs.size());
  TG_CHECK(is_floating_point(dtype), "to_packed", "converts to a floating-point dtype, got ", dtype);
  int64_t total = 0;
  std::vector<Tensor> srcs;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    TG_CHECK(x.defined(), "to_packed", "xs[", i, "] is undefined");
    TG_CHECK(is_floating_point(x.dtype()) && x.dtype() == xs[0].dtype() && x.device() == xs[0].device(),
             "to_packed", "xs[", i, "] is ", x.dtype(), " on ", x.device().str(), ", wanted xs[0]'s floating dtype ",
             xs[0].dtype(), " on ", xs[0].device().str());
    srcs.push_back(contiguous(x.detach()));
    total += x.numel();
  }
  Tensor out = Tensor::empty({total}, {dtype, xs[0].device()});
  if (total > 0) TG_DISPATCH(out.device(), convert_packed, out, srcs);
  std::vector<Tensor> views;
  int64_t offset = 0;
  for (const Tensor& x : srcs) {
    views.push_back(out.as_strided(x.shape(), contiguous_strides(x.shape()), offset));
    offset += x.numel();
  }
  return views;
}

}  // namespace tg
