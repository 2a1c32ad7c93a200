// Allocation in a given memory layout, for ops whose outputs or gradients should keep their
// input's layout (a [B, H, T, hd] view of [B, T, H, hd] memory stays that way, so transposing
// back and merging heads is a free reshape instead of a copy).
#pragma once

#include <cstdint>
#include <algorithm>
#include <vector>

#include "core/shape.h"
#include "core/tensor.h"

namespace tg {

// The strides of a dense tensor of this shape with its dims in the order of `strides` (a column
// block of a wider buffer gets its dims' order, not the holes) when the last dim is the innermost;
// else contiguous ones.
inline Shape dense_strides_like(const Shape& shape, const Shape& strides) {
  const int64_t n = static_cast<int64_t>(shape.size());
  std::vector<int64_t> order(static_cast<size_t>(n));  // dims from outermost to innermost
  for (int64_t d = 0; d < n; ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  if (n == 0 || order.back() != n - 1) return contiguous_strides(shape);
  Shape st(static_cast<size_t>(n));
  int64_t s = 1;
  for (int64_t i = n - 1; i >= 0; --i) {
    st[order[i]] = s;
    s *= shape[order[i]];
  }
  return st;
}

// An uninitialised tensor of this shape in that layout (dense_strides_like).
inline Tensor empty_with_layout(const Shape& shape, const Shape& strides, TensorOptions opts) {
  const Shape dense = dense_strides_like(shape, strides);
  if (dense == contiguous_strides(shape)) return Tensor::empty(shape, opts);
  return Tensor::empty({numel_of(shape)}, opts).as_strided(shape, dense, 0);
}

inline Tensor empty_like_layout(const Tensor& t) { return empty_with_layout(t.shape(), t.strides(), t.options()); }

}  // namespace tg
