// grouped_mm: a mixture-of-experts layer's experts as one op (torch._grouped_mm with a bias and
// peft's LoRA per expert): x [M, K] rows grouped by expert, group_sizes[e] of expert e (a host
// vector), w [E, N, K]; y[rows of e] = x_e w_e^T + bias_e + scaling (x_e A_e^T) B_e^T. Layouts,
// backward and traces: docs/api.md.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tg {

Tensor grouped_mm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& group_sizes,
                  const Tensor& bias = Tensor(), const Tensor& lora_A = Tensor(), const Tensor& lora_B = Tensor(),
                  double scaling = 1.0);

}  // namespace tg
