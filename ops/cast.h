// Conversions between dtypes and devices, differentiable: the gradient is converted back.
// Returns x itself when nothing changes.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tg {

Tensor to(const Tensor& x, DType dtype);
Tensor to(const Tensor& x, Device device);
Tensor to(const Tensor& x, DType dtype, Device device);

// Each of xs (one floating dtype, one device) converted to `dtype`, as contiguous views of one
// new buffer, in order (so neighbours also form one view of their rows); one kernel on CUDA.
// Not differentiable: the copies an op reads without autograd, such as the rounded LoRA
// adapters of a step. At most 16 tensors.
std::vector<Tensor> to_packed(const std::vector<Tensor>& xs, DType dtype);

}  // namespace tg
