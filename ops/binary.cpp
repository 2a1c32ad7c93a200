#include "ops/binary.h"

#include "core/autograd.h"
#include "ops/binary_kernels.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/reduce.h"

namespace tg {
namespace {

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
  }
  return "binary";
}

// A stride-0 view of t broadcast to `shape` (no autograd).
Tensor broadcast_view(const Tensor& t, const Shape& shape) {
  Shape strides(shape.size(), 0);
  size_t lead = shape.size() - t.shape().size();
  for (size_t i = lead; i < shape.size(); ++i)
    strides[i] = t.shape()[i - lead] == shape[i] ? t.strides()[i - lead] : 0;
  return t.as_strided(shape, strides, t.storage_offset());
}

Tensor binary_raw(BinaryOp op, const Tensor& a, const Tensor& b) {
  Shape shape = broadcast_shapes(op_name(op), a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, a.options());
  TG_DISPATCH(out.device(), binary, op, out, broadcast_view(a, shape), broadcast_view(b, shape));
  return out;
}

// a + b, a - b: the gradients are g (negated for b of sub), summed back over broadcast dims.
struct AddSubBackward final : Node {
  bool subtract = false;
  Shape a_shape, b_shape;
  const char* name() const override { return subtract ? "sub" : "add"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    Tensor da, db;
    if (mask[0]) da = sum_to(g[0], a_shape);
    if (mask[1]) db = subtract ? neg(sum_to(g[0], b_shape)) : sum_to(g[0], b_shape);
    return {da, db};
  }
};

// a * b: da = g * b, db = g * a. Each factor is saved only if the other side needs it.
struct MulBackward final : Node {
  Shape a_shape, b_shape;
  enum { kA, kB };
  const char* name() const override { return "mul"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    Tensor da, db;
    if (mask[0]) da = sum_to(binary_raw(BinaryOp::Mul, g[0], unpack(kB)), a_shape);
    if (mask[1]) db = sum_to(binary_raw(BinaryOp::Mul, g[0], unpack(kA)), b_shape);
    return {da, db};
  }
};

// y = a / b: da = g / b, db = -g * y / b.
struct DivBackward final : Node {
  Shape a_shape, b_shape;
  enum { kB, kY };
  const char* name() const override { return "div"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    Tensor b = unpack(kB);
    Tensor g_over_b = binary_raw(BinaryOp::Div, g[0], b);
    Tensor da, db;
    if (mask[0]) da = sum_to(g_over_b, a_shape);
    if (mask[1]) db = neg(sum_to(binary_raw(BinaryOp::Mul, g_over_b, unpack(kY)), b_shape));
    return {da, db};
  }
};

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op);
  check_floating(name, "a", a);
  check_floating(name, "b", b);
  check_same(name, {{"a", a}, {"b", b}});
  Tensor out = binary_raw(op, a, b);
  switch (op) {
    case BinaryOp::Add:
    case BinaryOp::Sub:
      if (auto n = record<AddSubBackward>({{"a", a}, {"b", b}}, {out})) {
        n->subtract = op == BinaryOp::Sub;
        n->a_shape = a.shape(), n->b_shape = b.shape();
      }
      break;
    case BinaryOp::Mul:
      if (auto n = record<MulBackward>({{"a", a}, {"b", b}}, {out})) {
        n->a_shape = a.shape(), n->b_shape = b.shape();
        n->saved = {SavedTensor(b.requires_grad() ? a : Tensor(), "a"),
                    SavedTensor(a.requires_grad() ? b : Tensor(), "b")};
      }
      break;
    case BinaryOp::Div:
      if (auto n = record<DivBackward>({{"a", a}, {"b", b}}, {out})) {
        n->a_shape = a.shape(), n->b_shape = b.shape();
        n->saved = {SavedTensor(b, "b"), SavedTensor(b.requires_grad() ? out : Tensor(), "result")};
      }
      break;
  }
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Div, a, b); }

}  // namespace tg
