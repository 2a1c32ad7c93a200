#include "ops/linear.h"

#include "core/autograd.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/detail/checks.h"
#include "ops/detail/matrix_gemm.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace tg {
namespace {

struct LinearBackward final : Node {
  enum { kX, kWeight };
  Shape x_shape;
  const char* name() const override { return "linear"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    Tensor dy = matrix::rows(g[0]);  // [N, out]
    const int64_t n = dy.shape()[0], out = dy.shape()[1], in = x_shape.back();
    Tensor dx, dw, db;
    if (mask[0]) {  // dX = dY @ W
      KernelTrace::record("linear.dx_gemm");
      Tensor w = unpack(kWeight);
      dx = Tensor::empty({n, in}, dy.options());
      matrix::gemm(dx, dy, w, 1.0, 0.0);
      dx = reshape(dx, x_shape);
    }
    if (mask[1]) {  // dW = dY^T @ X
      KernelTrace::record("linear.dweight_gemm");
      Tensor x = matrix::rows(unpack(kX));
      dw = Tensor::empty({out, in}, dy.options());
      matrix::gemm(dw, transpose(dy, 0, 1), x, 1.0, 0.0);
    }
    if (mask[2]) {  // db = sum over rows of dY
      KernelTrace::record("linear.dbias_reduce");
      db = sum(dy, {0});
    }
    return {dx, dw, db};
  }
};

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_floating("linear", "x", x);
  check_floating("linear", "weight", weight);
  check_same("linear", {{"x", x}, {"weight", weight}, {"bias", bias}});
  TG_CHECK(weight.dim() == 2, "linear", "weight must be 2-D [out, in], got ", weight.shape());
  TG_CHECK(x.dim() >= 1 && x.shape().back() == weight.shape()[1], "linear", "x has ",
           x.dim() ? x.shape().back() : 0, " features (shape ", x.shape(), "), weight ",
           weight.shape(), " wants ", weight.shape()[1]);
  const int64_t out_features = weight.shape()[0];
  if (bias.defined())
    TG_CHECK(bias.dim() == 1 && bias.shape()[0] == out_features, "linear", "bias must be [",
             out_features, "], got ", bias.shape());
  Tensor x2;
  {
    NoGradGuard g;  // the reshape is internal: linear's node covers it
    x2 = matrix::rows(x);
  }
  Shape y_shape = x.shape();
  y_shape.back() = out_features;
  Tensor y = Tensor::empty(y_shape, x.options());
  Tensor y2 = y.as_strided({x2.shape()[0], out_features}, {out_features, 1}, 0);
  Tensor wt = transpose(weight.detach(), 0, 1);
  if (bias.defined()) {
    NoGradGuard g;
    copy_(y2, expand(bias.detach(), y2.shape()));
  }
  matrix::gemm(y2, x2, wt, 1.0, bias.defined() ? 1.0 : 0.0);
  if (auto node = record<LinearBackward>({{"x", x}, {"weight", weight}, {"bias", bias}}, {y})) {
    node->x_shape = x.shape();
    // x is needed only for dW, the weight only for dX.
    node->saved = {SavedTensor(weight.requires_grad() ? x : Tensor(), "x"),
                   SavedTensor(x.requires_grad() ? weight : Tensor(), "weight")};
  }
  return y;
}

}  // namespace tg
