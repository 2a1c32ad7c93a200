// lora_linear(x, weight, bias, lora_A, lora_B, scaling): peft's LoRA layer as one op,
//   y = x W^T + b + scaling * (x A^T) B^T,   W [out, in], A [r, in], B [out, r].
// A and B may be float32 masters of a bfloat16 layer (peft's autocast_adapter_dtype): the
// products run on x's dtype (A and B rounded to it, as autocast does, so a bf16 layer's LoRA
// GEMMs take tensor cores and x is never widened), and their gradients come back in float32 from
// bf16 products accumulated and stored in float32. Forward is three GEMMs, the base one
// accumulating onto the LoRA-B product (no separate add). Backward runs only what its mask asks for: dx = dy W +
// scaling (dy B) A, dA = scaling (dy B)^T x, dB = scaling dy^T (x A^T), and dW / db only when the
// base layer trains. It keeps x (for dA or dW), x A^T ([N, r], for dB), W (for dx) and the adapters
// as rounded for the forward (cast once a step).
#pragma once

#include "core/tensor.h"

namespace tg {

Tensor lora_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_A,
                   const Tensor& lora_B, double scaling);

}  // namespace tg
