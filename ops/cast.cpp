// Casts and device moves are core's copy_ plus a node that converts the gradient back.
#include "ops/cast.h"

#include "core/autograd.h"
#include "core/primitives.h"
#include "ops/checks.h"

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

}  // namespace tg
