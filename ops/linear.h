// linear(x, weight, bias) = x @ weight^T + bias, weight [out, in] as in torch.nn.Linear.
// Backward runs only what its gradient mask asks for: the dX GEMM when x needs a gradient, the
// dW GEMM when the weight does (and only then is x kept alive after forward), the bias
// reduction when the bias does. A frozen LoRA base weight therefore costs one GEMM, not two,
// and holds no activation.
#pragma once

#include "core/tensor.h"

namespace tg {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

}  // namespace tg
