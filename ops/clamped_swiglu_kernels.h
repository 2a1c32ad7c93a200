// Backend contract for clamped_swiglu (ops/clamped_swiglu.h). gate_up is [rows, 2I] with a unit
// inner stride and any row stride; out and g are contiguous [rows, I]; dgate_up contiguous
// [rows, 2I]. One dtype throughout: any floating one on the CPU, float32 / bfloat16 on CUDA.
#pragma once

#include "core/tensor.h"

namespace tg {
namespace cpu {

// out = (u + 1) g sigmoid(alpha g), g = min(gate, limit), u = clamp(up, -limit, limit). Reads
// gate_up once, writes out once.
void clamped_swiglu(const Tensor& out, const Tensor& gate_up, double alpha, double limit);

// With s = sigmoid(alpha g): dgate = gout (u + 1) s (1 + alpha g (1 - s)) where gate <= limit,
// dup = gout g s where |up| <= limit, 0 elsewhere. Reads g and gate_up once, writes dgate_up once.
void clamped_swiglu_backward(const Tensor& dgate_up, const Tensor& g, const Tensor& gate_up, double alpha,
                             double limit);

}  // namespace cpu
namespace cuda {
void clamped_swiglu(const Tensor& out, const Tensor& gate_up, double alpha, double limit);
void clamped_swiglu_backward(const Tensor& dgate_up, const Tensor& g, const Tensor& gate_up, double alpha,
                             double limit);
}  // namespace cuda
}  // namespace tg
