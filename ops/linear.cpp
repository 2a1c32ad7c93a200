// linear(x, W, b) = x W^T + b; backward dx = dy W, dW = dy^T x, db = the sum of dy's rows, each
// only when the mask asks for it, so forward keeps x only for dW and W only for dx.
#include "ops/linear.h"

#include "core/autograd.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/detail/linear_parts.h"
#include "ops/detail/matrix_gemm.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace tg {
namespace {

struct LinearBackward final : Node {
  enum { kX, kWeight };  // saved
  Shape x_shape;
  TensorOptions y_options;  // of the output (x's)
  const char* name() const override { return "linear"; }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const GradMask& mask) override {
    const Tensor dy = matrix::rows(grads[0]);
    std::vector<Tensor> out(3);  // dx, dW, db
    if (mask[0]) {
      KernelTrace::record("linear.dx");
      Tensor dx = Tensor::empty({dy.shape()[0], x_shape.back()}, y_options);
      matrix::gemm(dx, dy, unpack(kWeight), 1.0, 0.0);
      out[0] = reshape(dx, x_shape);
    }
    if (mask[1]) {
      KernelTrace::record("linear.dweight_gemm");
      const Tensor x = matrix::rows(unpack(kX));
      Tensor dW = Tensor::empty({dy.shape()[1], x.shape()[1]}, y_options);
      matrix::gemm(dW, transpose(dy, 0, 1), x, 1.0, 0.0);
      out[1] = dW;
    }
    if (mask[2]) {
      KernelTrace::record("linear.dbias_reduce");
      out[2] = sum(dy, {0});
    }
    return out;
  }
};

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  linear_parts::check_linear_args("linear", x, weight, bias);
  KernelTrace::record("linear");
  Shape y_shape(x.shape().begin(), x.shape().end() - 1);
  y_shape.push_back(weight.shape()[0]);
  Tensor y;
  {
    NoGradGuard no_grad;  // the internal views and copies: the op's node covers them
    const Tensor x_rows = matrix::rows(x);
    Tensor y_rows = Tensor::empty({x_rows.shape()[0], weight.shape()[0]}, x.options());
    if (bias.defined()) copy_(y_rows, expand(bias.detach(), y_rows.shape()));  // the GEMM accumulates onto it
    matrix::gemm(y_rows, x_rows, transpose(weight.detach(), 0, 1), 1.0, bias.defined() ? 1.0 : 0.0);
    y = reshape(y_rows, y_shape);
  }
  if (auto node = record<LinearBackward>({{"x", x}, {"weight", weight}, {"bias", bias}}, {y})) {
    node->x_shape = x.shape();
    node->y_options = x.options();
    node->saved = {SavedTensor(weight.requires_grad() ? x : Tensor(), "x"),
                   SavedTensor(x.requires_grad() ? weight : Tensor(), "weight")};
  }
  return y;
}

}  // namespace tg
