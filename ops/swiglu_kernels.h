// Backend contract for the fused silu_mul (ops/swiglu.h). Every tensor is contiguous, of one
// shape and dtype: float32 or float64 on the CPU, float32 or bfloat16 (computed in float32) on CUDA.
#pragma once

#include "core/tensor.h"

namespace tg {
namespace cpu {

// out = gate * sigmoid(gate) * up. Reads gate and up once, writes out once.
void silu_mul(const Tensor& out, const Tensor& gate, const Tensor& up);

// With s = sigmoid(gate): dup = g * gate * s and dgate = g * up * s * (1 + gate * (1 - s)); either
// output may be undefined (not wanted). Reads g, gate, up once, writes each wanted gradient once.
void silu_mul_backward(const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate, const Tensor& up);

}  // namespace cpu
namespace cuda {
void silu_mul(const Tensor& out, const Tensor& gate, const Tensor& up);
void silu_mul_backward(const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate, const Tensor& up);
}  // namespace cuda
}  // namespace tg
