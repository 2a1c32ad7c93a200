#include "ops/silu_mul.h"

#include "core/autograd.h"
#include "core/trace.h"
#include "ops/binary.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/detail/matrix_gemm.h"
#include "ops/shape.h"
#include "ops/silu_mul_kernels.h"
#include "ops/unary.h"

namespace tg {
namespace {

constexpr const char* kOp = "silu_mul";

// Saves gate and up as [rows, cols] views (the composition kept silu(gate) as well); each gradient
// is computed only when its mask asks, gate's from up and up's from gate.
struct SiluMulBackward final : Node {
  const char* name() const override { return kOp; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    Tensor gate = unpack(0), up = unpack(1), gc = contiguous(g[0]);
    const Shape shape = g[0].shape();
    KernelTrace::record(gc.device().is_cuda() ? "silu_mul.fused_cuda_backward" : "silu_mul.fused_cpu_backward");
    Tensor dgate = mask[0] ? Tensor::empty(gate.shape(), gate.options()) : Tensor();
    Tensor dup = mask[1] ? Tensor::empty(gate.shape(), gate.options()) : Tensor();
    if (gc.numel() > 0) TG_DISPATCH(gc.device(), silu_mul_backward, dgate, dup, gc, gate, up);
    return {dgate.defined() ? reshape(dgate, shape) : dgate, dup.defined() ? reshape(dup, shape) : dup};
  }
};

}  // namespace

Tensor silu_mul(const Tensor& gate, const Tensor& up) {
  check_floating(kOp, "gate", gate);
  check_floating(kOp, "up", up);
  check_same(kOp, {{"gate", gate}, {"up", up}});
  TG_CHECK(gate.shape() == up.shape(), kOp, "gate and up must have one shape, got gate ", gate.shape(), ", up ",
           up.shape());
  const bool fused = gate.device().is_cpu() ? gate.dtype() == kFloat32 || gate.dtype() == kFloat64
                                           : gate.dtype() == kFloat32 || gate.dtype() == kBFloat16;
  if (!fused) {
    KernelTrace::record("silu_mul.composite");
    return mul(silu(gate), up);
  }
  KernelTrace::record(gate.device().is_cuda() ? "silu_mul.fused_cuda" : "silu_mul.fused_cpu");
  Tensor a, b;
  {
    NoGradGuard no_grad;  // internal views (copies only when rows do not have one stride)
    auto rows = [](const Tensor& t) {  // [rows, cols] (a 0-d tensor as [1, 1]; empty ones as they are)
      return t.numel() == 0 ? t : t.dim() == 0 ? reshape(t, {1, 1}) : matrix::rows(t);
    };
    a = rows(gate), b = rows(up);
  }
  Tensor out = Tensor::empty(a.shape(), gate.options());
  if (out.numel() > 0) TG_DISPATCH(gate.device(), silu_mul, out, a, b);
  out = reshape(out, gate.shape());
  if (auto node = record<SiluMulBackward>({{"gate", gate}, {"up", up}}, {out}))
    node->saved = {SavedTensor(a, "gate"), SavedTensor(b, "up")};
  return out;
}

}  // namespace tg
