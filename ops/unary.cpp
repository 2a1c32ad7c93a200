#include "ops/unary.h"

#include "core/autograd.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/unary_kernels.h"

namespace tg {
namespace {

const char* op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::GeluTanh: return "gelu_tanh";
    case UnaryOp::Silu: return "silu";
    case UnaryOp::Pow: return "pow";
    case UnaryOp::AddScalar: return "add_scalar";
    case UnaryOp::MulScalar: return "mul_scalar";
  }
  return "unary";
}

struct UnaryBackward final : Node {
  UnaryOp op = UnaryOp::Neg;
  double p = 0;
  const char* name() const override { return op_name(op); }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    Tensor dx = Tensor::empty(g[0].shape(), g[0].options());
    TG_DISPATCH(dx.device(), unary_backward, op, p, dx, g[0], saved.empty() ? Tensor() : unpack(0));
    return {dx};
  }
};

Tensor unary(UnaryOp op, const Tensor& x, double p = 0) {
  const char* name = op_name(op);
  check_floating(name, "x", x);
  Tensor out = Tensor::empty(x.shape(), x.options());
  TG_DISPATCH(x.device(), unary, op, p, out, x);
  if (auto node = record<UnaryBackward>({{"x", x}}, {out})) {
    node->op = op;
    node->p = p;
    if (!backward_is_constant(op))
      node->saved = {backward_uses_output(op) ? SavedTensor(out, "result") : SavedTensor(x, "x")};
  }
  return out;
}

}  // namespace

Tensor neg(const Tensor& x) { return unary(UnaryOp::Neg, x); }
Tensor exp(const Tensor& x) { return unary(UnaryOp::Exp, x); }
Tensor log(const Tensor& x) { return unary(UnaryOp::Log, x); }
Tensor sqrt(const Tensor& x) { return unary(UnaryOp::Sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary(UnaryOp::Rsqrt, x); }
Tensor tanh(const Tensor& x) { return unary(UnaryOp::Tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::Sigmoid, x); }
Tensor relu(const Tensor& x) { return unary(UnaryOp::Relu, x); }
Tensor gelu(const Tensor& x, std::string_view approximate) {
  TG_CHECK(approximate == "none" || approximate == "tanh", "gelu", "approximate must be \"none\" or "
           "\"tanh\", got \"", approximate, "\"");
  return unary(approximate == "tanh" ? UnaryOp::GeluTanh : UnaryOp::Gelu, x);
}
Tensor silu(const Tensor& x) { return unary(UnaryOp::Silu, x); }
Tensor pow(const Tensor& x, double exponent) { return unary(UnaryOp::Pow, x, exponent); }
Tensor add(const Tensor& x, double s) { return unary(UnaryOp::AddScalar, x, s); }
Tensor sub(const Tensor& x, double s) { return unary(UnaryOp::AddScalar, x, -s); }
Tensor mul(const Tensor& x, double s) { return unary(UnaryOp::MulScalar, x, s); }
Tensor div(const Tensor& x, double s) {
  TG_CHECK(s != 0, "div", "division by the scalar zero");
  return unary(UnaryOp::MulScalar, x, 1.0 / s);
}

}  // namespace tg
