// LoRA as one op (peft's LoRA layer without dropout), W [out, in] as in torch.nn.Linear:
//   lora_linear(x, W, b, A, B, scaling) = x W^T + b + scaling (x A^T) B^T,  A [r, in], B [out, r]
//   linear_group(x, parts)              = a linear or lora_linear per part, on one x, as one op
// Backward computes only the gradients its mask asks for: a frozen W costs no dW GEMM. A and B may
// be float32 masters of a bfloat16 layer (peft's autocast_adapter_dtype). Traces: "<op>.dx",
// "<op>.dweight_gemm", "<op>.dbias_reduce", "<op>.dA", "<op>.dB"; the math: ops/lora_linear.cpp.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tg {

Tensor lora_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_A,
                   const Tensor& lora_B, double scaling);

// One layer of a group.
struct LinearSpec {
  Tensor weight, bias;
  Tensor lora_A = {}, lora_B = {};  // undefined: a plain linear
  double scaling = 1.0;
};

// One output per part, in order. tg::Error when parts is empty or a part's arguments are not
// lora_linear's (or linear's), or when the parts' LoRA adapters differ in dtype.
std::vector<Tensor> linear_group(const Tensor& x, const std::vector<LinearSpec>& parts);

}  // namespace tg
