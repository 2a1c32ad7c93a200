// Backend contract for reductions. `out` is contiguous with x's shape, reduced dims set to 1.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tg {
namespace cpu {
void sum(const Tensor& out, const Tensor& x, const std::vector<int64_t>& dims);
// values and indices (int64) of the max along `dim`.
void max(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim);
// dx = 0 except dx[.., indices, ..] = g along `dim` (dx contiguous; g, indices keepdim-shaped).
void max_backward(const Tensor& dx, const Tensor& g, const Tensor& indices, int64_t dim);
}  // namespace cpu
namespace cuda {
void sum(const Tensor& out, const Tensor& x, const std::vector<int64_t>& dims);
void max(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim);
void max_backward(const Tensor& dx, const Tensor& g, const Tensor& indices, int64_t dim);
}  // namespace cuda
}  // namespace tg
