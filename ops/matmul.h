// Matrix products with PyTorch's matmul rules: 1-D operands are promoted (and the added dim
// removed), 2-D is a plain product, and leading (batch) dims broadcast.
#pragma once

#include "core/tensor.h"

namespace tg {

Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace tg
