// Backend contract for embedding. indices are flattened to [M] (contiguous int32/int64), out and
// grad are [M, D] contiguous, weight [V, D] may have any strides (a tied or transposed table).
#pragma once

#include "core/tensor.h"

namespace tg {
namespace cpu {
// out[m] = weight[indices[m]]. The CPU op has checked every index; a row whose index is outside
// [0, V) is written as zeros (the CUDA kernels also report it, see ops/cuda/index_check.cuh).
void embedding(const Tensor& out, const Tensor& weight, const Tensor& indices);
// dweight[indices[m]] += grad[m] for every m. dweight is a zeroed [V, D] contiguous accumulator
// in float32 (float64 for float64 grads); out-of-range indices add nothing.
void embedding_backward(const Tensor& dweight, const Tensor& grad, const Tensor& indices);
}  // namespace cpu
namespace cuda {
void embedding(const Tensor& out, const Tensor& weight, const Tensor& indices);
void embedding_backward(const Tensor& dweight, const Tensor& grad, const Tensor& indices);
}  // namespace cuda
}  // namespace tg
