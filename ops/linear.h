// The linear ops, one family with one backward (ops/linear.cpp), W [out, in] as in torch.nn.Linear:
//   linear(x, W, b)                     = x W^T + b
//   lora_linear(x, W, b, A, B, scaling) = x W^T + b + scaling (x A^T) B^T,  A [r, in], B [out, r]
//                                         (peft's LoRA layer as one op)
//   linear_group(x, parts)              = one of those per part, on one x, as one op
// Backward runs only what its gradient mask asks for: dx = dy W + scaling (dy B) A, dW = dy^T x,
// db, dA = scaling (dy B)^T x, dB = scaling dy^T (x A^T). It keeps x only for dW or dA, W only for
// dx, x A^T ([N, r]) only for dB: a frozen LoRA base weight costs one GEMM, not two, and holds no
// activation. Traces: "<op>.dx", "<op>.dweight_gemm", "<op>.dbias_reduce", "<op>.dA", "<op>.dB";
// linear_group's base GEMM: "linear_group.weights_concatenated", "linear_group.gemm_a_part".
//
// LoRA: A and B may be float32 masters of a bfloat16 layer (peft's autocast_adapter_dtype): the
// products run on x's dtype (A and B rounded to it once a step, as autocast does, so a bf16
// layer's LoRA GEMMs take tensor cores and x is never widened), and their gradients come back in
// float32 from bf16 products accumulated and stored in float32. Forward computes the thin LoRA-B
// product first and the base GEMM accumulates onto it (no separate add).
//
// linear_group: one GEMM for every base weight: the W_i read in place as one [sum out_i, in] matrix
// when they are consecutive row blocks of one allocation (nn::place_weights_adjacent, as the models
// build them), else concatenated, or above 8 MiB of weights one GEMM a part, each writing its
// columns in place, as the copy would cost more than the launches; and one for every LoRA-A product (A_i concatenated), the outputs column blocks of one
// [..., sum out_i] buffer (views, as split);
// dx accumulated by the GEMMs into one buffer (no adds), the LoRA-A gradients of every part from
// one GEMM. The models' q / k / v and gate / up projections use it (nn::forward_group).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tg {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

Tensor lora_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_A,
                   const Tensor& lora_B, double scaling);

// One layer of a group: lora_A / lora_B undefined for a plain linear.
struct LinearSpec {
  Tensor weight, bias, lora_A, lora_B;
  double scaling = 1.0;
};

// One output per part, in order. tg::Error when parts is empty or a part's arguments are not
// lora_linear's (or linear's), or when the parts' LoRA adapters differ in dtype.
std::vector<Tensor> linear_group(const Tensor& x, const std::vector<LinearSpec>& parts);

}  // namespace tg
