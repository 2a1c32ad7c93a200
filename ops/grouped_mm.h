// grouped_mm: a mixture-of-experts layer's experts as one op (torch._grouped_mm with a bias and
// peft's LoRA per expert): x [M, K] rows grouped by expert, group_sizes[e] of expert e (a host
// vector), w [E, N, K]; y[rows of e] = x_e w_e^T + bias_e + scaling (x_e A_e^T) B_e^T. Layouts,
// backward and traces: docs/api.md.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/nf4.h"

namespace tg {

Tensor grouped_mm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& group_sizes,
                  const Tensor& bias = Tensor(), const Tensor& lora_A = Tensor(), const Tensor& lora_B = Tensor(),
                  double scaling = 1.0);

// grouped_mm over 4-bit experts (QLoRA's frozen base): w[e] is expert e's [N, K] weight as
// quantize_4bit stores it, dequantised to x's dtype into one expert-sized buffer right before its
// GEMM, and again for dx at backward: no dense weight of the layer's size ever exists.
// Differentiable in x, bias and the LoRA factors.
Tensor grouped_mm_4bit(const Tensor& x, const std::vector<QuantState4bit>& w, const std::vector<int64_t>& group_sizes,
                       const Tensor& bias = Tensor(), const Tensor& lora_A = Tensor(), const Tensor& lora_B = Tensor(),
                       double scaling = 1.0);

}  // namespace tg
