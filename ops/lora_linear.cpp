#include "ops/lora_linear.h"

#include "core/autograd.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/cast.h"
#include "ops/checks.h"
#include "ops/matrix_gemm.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace tg {
namespace {

constexpr const char* kOp = "lora_linear";

// An adapter weight in the dtype the products run in (a copy only when it differs; the forward's
// copies are what backward keeps, so each adapter is rounded once a step).
Tensor compute_dtype(const Tensor& w, DType dt) {
  NoGradGuard g;
  return tg::to(w.detach(), dt);
}

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
  check_floating(kOp, "x", x);
  check_floating(kOp, "weight", weight);
  check_floating(kOp, "lora_A", lora_A);
  check_floating(kOp, "lora_B", lora_B);
  check_same(kOp, {{"x", x}, {"weight", weight}, {"bias", bias}});
  TG_CHECK(lora_A.device() == x.device() && lora_B.device() == x.device(), kOp, "lora_A and lora_B must be on ",
           x.device(), " with x, got ", lora_A.device(), " and ", lora_B.device());
  TG_CHECK(weight.dim() == 2, kOp, "weight must be 2-D [out, in], got ", weight.shape());
  const int64_t out = weight.shape()[0], in = weight.shape()[1];
  TG_CHECK(x.dim() >= 1 && x.shape().back() == in, kOp, "x has ", x.dim() ? x.shape().back() : 0,
           " features (shape ", x.shape(), "), weight ", weight.shape(), " wants ", in);
  TG_CHECK(lora_A.dim() == 2 && lora_A.shape()[1] == in, kOp, "lora_A must be [r, ", in, "], got ", lora_A.shape());
  const int64_t r = lora_A.shape()[0];
  TG_CHECK(lora_B.dim() == 2 && lora_B.shape() == Shape({out, r}), kOp, "lora_B must be [", out, ", ", r, "], got ",
           lora_B.shape());
  TG_CHECK(lora_A.dtype() == lora_B.dtype(), kOp, "lora_A and lora_B differ in dtype: ", lora_A.dtype(), " and ",
           lora_B.dtype());
  TG_CHECK(lora_A.dtype() == x.dtype() || (lora_A.dtype() == kFloat32 && x.dtype() == kBFloat16), kOp,
           "adapters of dtype ", lora_A.dtype(), " on a ", x.dtype(), " layer (want the layer's dtype, or float32 "
           "for bfloat16)");
  if (bias.defined())
    TG_CHECK(bias.dim() == 1 && bias.shape()[0] == out, kOp, "bias must be [", out, "], got ", bias.shape());
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
  const Tensor a = compute_dtype(lora_A, x.dtype()), b = compute_dtype(lora_B, x.dtype());
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
