// Backend contract for the fused silu_mul (ops/silu_mul.h). Every tensor is [rows, cols] of one dtype:
// float32 or float64 on the CPU, float32 or bfloat16 (computed in float32) on CUDA. gate and up
// have a unit inner stride and any row stride (the gate and up column blocks of one projection
// are read in place); out, g, dgate and dup are contiguous.
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
