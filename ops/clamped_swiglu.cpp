#include "ops/clamped_swiglu.h"

#include <cmath>

#include "core/autograd.h"
#include "ops/clamped_swiglu_kernels.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/detail/matrix_gemm.h"
#include "ops/shape.h"

namespace tg {
namespace {

constexpr const char* kOp = "clamped_swiglu";

struct ClampedSwigluBackward final : Node {
  double alpha = 0, limit = 0;
  const char* name() const override { return kOp; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    Tensor gate_up = unpack(0), gc = contiguous(g[0]);
    Shape shape = g[0].shape();
    shape.back() *= 2;
    Tensor d = Tensor::empty(gate_up.shape(), gate_up.options());
    if (d.numel() > 0)
      TG_DISPATCH(gc.device(), clamped_swiglu_backward, d, reshape(gc, {-1, gc.shape().back()}), gate_up, alpha,
                  limit);
    return {reshape(d, shape)};
  }
};

}  // namespace

Tensor clamped_swiglu(const Tensor& gate_up, double alpha, double limit) {
  check_floating(kOp, "gate_up", gate_up);
  TG_CHECK(gate_up.dim() >= 1 && gate_up.shape().back() % 2 == 0, kOp,
           "gate_up must end in an even dim (gate and up interleaved), got ", gate_up.shape());
  TG_CHECK(std::isfinite(alpha) && std::isfinite(limit) && limit > 0, kOp,
           "alpha must be finite and limit finite and positive, got ", alpha, " and ", limit);
  Tensor rows;
  {
    NoGradGuard no_grad;  // an internal [rows, 2I] view (a copy only when rows lack one stride)
    rows = gate_up.numel() == 0 ? gate_up : matrix::rows(gate_up.dim() == 1 ? reshape(gate_up, {1, -1}) : gate_up);
  }
  Shape shape = gate_up.shape();
  shape.back() /= 2;
  Tensor out = Tensor::empty(shape, gate_up.options());
  if (out.numel() > 0)
    TG_DISPATCH(gate_up.device(), clamped_swiglu, reshape(out, {-1, shape.back()}), rows, alpha, limit);
  if (auto node = record<ClampedSwigluBackward>({{"gate_up", gate_up}}, {out})) {
    node->saved = {SavedTensor(rows, "gate_up")};
    node->alpha = alpha, node->limit = limit;
  }
  return out;
}

}  // namespace tg
