// Conversions between dtypes and devices, differentiable: the gradient is converted back.
// Returns x itself when nothing changes.
#pragma once

#include "core/tensor.h"

namespace tg {

Tensor to(const Tensor& x, DType dtype);
Tensor to(const Tensor& x, Device device);
Tensor to(const Tensor& x, DType dtype, Device device);

}  // namespace tg
