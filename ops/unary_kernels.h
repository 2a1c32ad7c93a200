// Backend contract for unary ops. out/dx are contiguous; x, y, g may have any strides.
#pragma once

#include "core/tensor.h"
#include "ops/elementwise_math.h"

namespace tg {
namespace cpu {
void unary(UnaryOp op, double p, const Tensor& out, const Tensor& x);
// dx = g * f'(v), v the saved input or output (see backward_uses_output); v undefined when
// backward_is_constant(op).
void unary_backward(UnaryOp op, double p, const Tensor& dx, const Tensor& g, const Tensor& v);
}  // namespace cpu
namespace cuda {
void unary(UnaryOp op, double p, const Tensor& out, const Tensor& x);
void unary_backward(UnaryOp op, double p, const Tensor& dx, const Tensor& g, const Tensor& v);
}  // namespace cuda
}  // namespace tg
