// linear_group(x, parts): several linear layers (each with or without a LoRA adapter) of one
// input as one op, y_i = x W_i^T + b_i + scaling_i (x A_i^T) B_i^T, as lora_linear each.
// Forward: one GEMM for every base weight (W_i concatenated) and one for every LoRA-A product
// (A_i concatenated), the outputs column blocks of one [..., sum out_i] buffer (views, as
// split). Backward: dx = sum_i dy_i W_i + scaling (dy_i B_i) A_i accumulated by the GEMMs into
// one buffer (no adds), the LoRA-A gradients of every part from one GEMM (row blocks of one
// buffer), dW_i / db_i / dB_i per part, each only when the mask asks. The model's q / k / v and
// gate / up projections use it (nn::Linear::spec()).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tg {

// One layer of a group: lora_A / lora_B undefined for a plain linear.
struct LinearSpec {
  Tensor weight, bias, lora_A, lora_B;
  double scaling = 1.0;
};

// One output per part, in order. tg::Error when parts is empty or a part's arguments are not
// lora_linear's (or linear's), or when the parts' LoRA adapters differ in dtype.
std::vector<Tensor> linear_group(const Tensor& x, const std::vector<LinearSpec>& parts);

}  // namespace tg
