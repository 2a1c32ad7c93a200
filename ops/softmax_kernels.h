// Backend contract for softmax and log_softmax. Every tensor is contiguous and seen as
// [outer, n, inner] with the softmax dim (size n) in the middle: inner == 1 is a softmax over
// the last dim (rows), inner > 1 one over an earlier dim (columns of stride `inner`).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tg {

struct SoftmaxGeometry {
  int64_t outer = 1, n = 1, inner = 1;
};

namespace cpu {
// out = softmax(x) (or log_softmax when `log`) along the middle dim.
void softmax(const Tensor& out, const Tensor& x, SoftmaxGeometry geo, bool log);
// From the forward output y and its gradient g:
//   softmax:     dx = y * (g - sum(g * y))
//   log_softmax: dx = g - exp(y) * sum(g)
void softmax_backward(const Tensor& dx, const Tensor& g, const Tensor& y, SoftmaxGeometry geo, bool log);
}  // namespace cpu
namespace cuda {
void softmax(const Tensor& out, const Tensor& x, SoftmaxGeometry geo, bool log);
void softmax_backward(const Tensor& dx, const Tensor& g, const Tensor& y, SoftmaxGeometry geo, bool log);
}  // namespace cuda
}  // namespace tg
