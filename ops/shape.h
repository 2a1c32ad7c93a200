// Shape ops. Views (reshape when possible, view, transpose, permute, slice, expand, squeeze,
// unsqueeze, split) share the input's storage; cat, contiguous and clone copy.
// All are differentiable.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tg {

// One entry of `shape` may be -1 (inferred). View when the strides allow, else a copy.
Tensor reshape(const Tensor& x, Shape shape);
// Like reshape, but an error when a view is impossible.
Tensor view(const Tensor& x, Shape shape);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
// Elements start, start+step, ... < end along dim (negative start/end count from the end).
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
// Broadcasts size-1 dims (and new leading dims) to `shape` without copying; -1 keeps a size.
Tensor expand(const Tensor& x, const Shape& shape);
// x itself when already contiguous, else a contiguous copy.
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
// Consecutive pieces of `size` along dim (the last may be smaller), or of the given sizes.
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);

}  // namespace tg
