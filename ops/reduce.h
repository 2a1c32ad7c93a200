// Reductions over dims (keepdim as in PyTorch). An empty dims list reduces every dim.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tg {

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Largest value along one dim; the gradient goes to the first position holding it.
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
// Largest value of all elements.
Tensor max(const Tensor& x);
// Index (int64) of the first largest value along dim. Not differentiable.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
// Sums a broadcast gradient back to `shape` (the reverse of broadcasting).
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace tg
