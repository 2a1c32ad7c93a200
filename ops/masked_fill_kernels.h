// Backend contract for masked_fill. out is contiguous; x and mask are views in out's shape with
// any strides (a broadcast mask has stride 0 along the dims it repeats). mask is bool, int32 or
// int64 (non-zero = true).
#pragma once

#include "core/tensor.h"

namespace tg {
namespace cpu {
// out = mask ? value : x. Backward is the same call on the gradient with value 0.
void masked_fill(const Tensor& out, const Tensor& x, const Tensor& mask, double value);
}  // namespace cpu
namespace cuda {
void masked_fill(const Tensor& out, const Tensor& x, const Tensor& mask, double value);
}  // namespace cuda
}  // namespace tg
