#include "ops/lora_linear.h"

#include "core/autograd.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/cast.h"
#include "ops/detail/checks.h"
#include "ops/detail/matrix_gemm.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace tg {
namespace {

constexpr const char* kOp = "lora_linear";


struct LoraLinearBackward final : Node {
  enum { kX, kWeight, kA, kB, kT };
  Shape x_shape;
  DType adapter_dtype = kFloat32;  // of lora_A / lora_B (their saved copies are in x's dtype)
  double scaling = 1.0;
  const char* name() const override { return kOp; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    Tensor dy = matrix::rows(g[0]);  // [N, out]
    Tensor dx, dw, db, da, dbb;
    Tensor a = mask[0] ? unpack(kA) : Tensor();
    Tensor bw = mask[0] || mask[3] ? unpack(kB) : Tensor();
    Tensor u;  // dy B [N, r]: the gradient of x A^T, without the scaling
    if (mask[0] || mask[3]) {
      u = Tensor::empty({dy.shape()[0], bw.shape()[1]}, dy.options());
      matrix::gemm(u, dy, bw, 1.0, 0.0);
    }
    if (mask[0]) {  // dx = dy W + scaling u A
      KernelTrace::record("lora_linear.dx");
      Tensor w = unpack(kWeight);
      dx = Tensor::empty({dy.shape()[0], x_shape.back()}, dy.options());
      matrix::gemm(dx, u, a, scaling, 0.0);  // thin product first, as in the forward
      matrix::gemm(dx, dy, w, 1.0, 1.0);
      dx = reshape(dx, x_shape);
    }
    if (mask[1] || mask[3]) {
      Tensor x = matrix::rows(unpack(kX));
      if (mask[1]) {  // dW = dy^T x
        KernelTrace::record("lora_linear.dweight_gemm");
        dw = Tensor::empty({dy.shape()[1], x.shape()[1]}, dy.options());
        matrix::gemm(dw, transpose(dy, 0, 1), x, 1.0, 0.0);
      }
      if (mask[3]) {  // dA = scaling u^T x, in A's dtype
        KernelTrace::record("lora_linear.dA");
        da = Tensor::empty({u.shape()[1], x.shape()[1]}, TensorOptions{adapter_dtype, x.device()});
        matrix::gemm(da, transpose(u, 0, 1), x, scaling, 0.0);
      }
    }
    if (mask[2]) {  // db = sum over rows of dy
      KernelTrace::record("lora_linear.dbias_reduce");
      db = sum(dy, {0});
    }
    if (mask[4]) {  // dB = scaling dy^T t, t = x A^T, in B's dtype
      KernelTrace::record("lora_linear.dB");
      const Tensor& t = unpack(kT);
      dbb = Tensor::empty({dy.shape()[1], t.shape()[1]}, TensorOptions{adapter_dtype, dy.device()});
      matrix::gemm(dbb, transpose(dy, 0, 1), t, scaling, 0.0);
    }
    return {dx, dw, db, da, dbb};
  }
};

}  // namespace

Tensor lora_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_A,
                   const Tensor& lora_B, double scaling) {
  TG_CHECK(lora_A.defined() && lora_B.defined(), kOp, "lora_A and lora_B must be defined");
  check_linear_args(kOp, x, weight, bias, lora_A, lora_B);
  const int64_t out = weight.shape()[0], r = lora_A.shape()[0];
  KernelTrace::record(kOp);
  Tensor x2;
  {
    NoGradGuard g;  // the reshape is internal: the op's node covers it
    x2 = matrix::rows(x);
  }
  const int64_t n = x2.shape()[0];
  Shape y_shape = x.shape();
  y_shape.back() = out;
  Tensor y = Tensor::empty(y_shape, x.options());
  Tensor y2 = y.as_strided({n, out}, {out, 1}, 0);
  if (bias.defined()) {
    NoGradGuard g;
    copy_(y2, expand(bias.detach(), y2.shape()));
  }
  // The thin LoRA-B product first, the base GEMM accumulating onto it: y is read back once, by
  // the GEMM that is compute-bound anyway.
  // The adapters in the products' dtype (a copy, both in one launch, only when it differs);
  // backward keeps these copies, so each adapter is rounded once a step.
  Tensor a = lora_A.detach(), b = lora_B.detach();
  if (a.dtype() != x.dtype() || b.dtype() != x.dtype()) {
    const std::vector<Tensor> rounded = to_packed({a, b}, x.dtype());
    a = rounded[0], b = rounded[1];
  }
  Tensor t = Tensor::empty({n, r}, x.options());  // x A^T
  matrix::gemm(t, x2, transpose(a, 0, 1), 1.0, 0.0);
  matrix::gemm(y2, t, transpose(b, 0, 1), scaling, bias.defined() ? 1.0 : 0.0);
  matrix::gemm(y2, x2, transpose(weight.detach(), 0, 1), 1.0, 1.0);
  if (auto node = record<LoraLinearBackward>(
          {{"x", x}, {"weight", weight}, {"bias", bias}, {"lora_A", lora_A}, {"lora_B", lora_B}}, {y})) {
    node->x_shape = x.shape();
    node->adapter_dtype = lora_A.dtype();
    node->scaling = scaling;
    const bool dx = x.requires_grad(), dw = weight.requires_grad(), da = lora_A.requires_grad(),
               dbb = lora_B.requires_grad();
    node->saved = {SavedTensor(dw || da ? x : Tensor(), "x"), SavedTensor(dx ? weight : Tensor(), "weight"),
                   SavedTensor(dx ? a : Tensor(), "lora_A"), SavedTensor(dx || da ? b : Tensor(), "lora_B"),
                   SavedTensor(dbb ? t : Tensor(), "t")};
  }
  return y;
}

}  // namespace tg
