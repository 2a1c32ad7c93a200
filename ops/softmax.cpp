#include "ops/softmax.h"

#include "core/autograd.h"
#include "core/trace.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/shape.h"
#include "ops/softmax_kernels.h"

namespace tg {
namespace {

// The softmax dim as [outer, n, inner] of a contiguous tensor (a 0-d tensor is one row of one).
SoftmaxGeometry geometry_of(const Shape& shape, int64_t d) {
  SoftmaxGeometry g;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i < d) g.outer *= shape[i];
    else if (i == d) g.n = shape[i];
    else g.inner *= shape[i];
  }
  return g;
}

// Both gradients are functions of the output alone, so the output is the one saved tensor.
struct SoftmaxBackward final : Node {
  bool log = false;
  SoftmaxGeometry geo;
  const char* name() const override { return log ? "log_softmax" : "softmax"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    Tensor y = unpack(0);
    Tensor gc = contiguous(g[0]);
    Tensor dx = Tensor::empty(y.shape(), y.options());
    if (dx.numel() > 0) TG_DISPATCH(dx.device(), softmax_backward, dx, gc, y, geo, log);
    return {dx};
  }
};

Tensor softmax_impl(const char* op, const Tensor& x, int64_t dim, bool log) {
  check_floating(op, "x", x);
  // PyTorch accepts dim 0 or -1 for a 0-d tensor; treat it as one row of one element.
  const int64_t d = wrap_dim(op, dim, x.dim() == 0 ? 1 : x.dim());
  SoftmaxGeometry geo = geometry_of(x.shape(), d);
  Tensor xc;
  {
    NoGradGuard no_grad;  // an internal copy: the softmax node covers it
    xc = contiguous(x);
  }
  KernelTrace::record(geo.inner == 1 ? "softmax.rows" : "softmax.columns");
  Tensor out = Tensor::empty(x.shape(), x.options());
  if (out.numel() > 0) TG_DISPATCH(x.device(), softmax, out, xc, geo, log);
  if (auto n = record<SoftmaxBackward>({{"x", x}}, {out})) {
    n->log = log;
    n->geo = geo;
    n->saved = {SavedTensor(out, "result")};
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl("log_softmax", x, dim, true); }

}  // namespace tg
