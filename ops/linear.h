// linear(x, W, b) = x W^T + b, W [out, in] as in torch.nn.Linear. Backward computes only the
// gradients its mask asks for: a frozen W costs one GEMM (dx) and keeps no activation. LoRA and
// groups of layers on one x: ops/lora_linear.h.
#pragma once

#include "core/tensor.h"

namespace tg {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

}  // namespace tg
