// The CPU's strided iteration: visits every element of `shape` in row-major order for N
// operands with their own strides (0 for a broadcast dim), calling
//   inner(n, offsets, steps)
// once per contiguous run of the innermost dim: `offsets` are the element offsets of the run's
// first element in each operand, `steps` the per-element strides. Dims that are contiguous for
// all operands are merged first, so a contiguous elementwise op is a single call per thread.
// Large iterations are split across the thread pool (core/parallel.h) unless `parallel` is false (a caller that
// accumulates into one variable inside `inner` must pass false).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "core/shape.h"

namespace tg {

template <size_t N, class Inner>
void strided_loop(const Shape& shape, const std::array<Shape, N>& strides, Inner&& inner,
                  bool parallel = true) {
  // Coalesce: merge dim d into d+1 when, for every operand, stride[d] == stride[d+1] * size[d+1].
  std::vector<int64_t> sz;
  std::array<std::vector<int64_t>, N> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !sz.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = st[k].back() == strides[k][d] * shape[d];
    if (merge) {
      sz.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) st[k].back() = strides[k][d];
    } else {
      sz.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
    }
  }
  if (numel_of(shape) == 0) return;
  if (sz.empty()) {  // a single element
    std::array<int64_t, N> offs{}, steps{};
    inner(int64_t{1}, offs, steps);
    return;
  }
  const size_t nd = sz.size();
  const int64_t inner_n = sz[nd - 1];
  std::array<int64_t, N> steps;
  for (size_t k = 0; k < N; ++k) steps[k] = st[k][nd - 1];
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < nd; ++d) outer *= sz[d];

  auto run_rows = [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      std::array<int64_t, N> offs{};
      int64_t r = row;
      for (size_t d = nd - 1; d-- > 0;) {
        int64_t i = r % sz[d];
        r /= sz[d];
        for (size_t k = 0; k < N; ++k) offs[k] += i * st[k][d];
      }
      inner(inner_n, offs, steps);
    }
  };
  if (!parallel) {
    run_rows(0, outer);
  } else if (outer == 1 && inner_n >= 2 * kParallelGrain) {
    // One long contiguous run: split the run itself.
    parallel_for(0, inner_n, kParallelGrain, [&](int64_t b, int64_t e) {
      std::array<int64_t, N> offs;
      for (size_t k = 0; k < N; ++k) offs[k] = b * steps[k];
      inner(e - b, offs, steps);
    });
  } else {
    parallel_for(0, outer, std::max<int64_t>(1, kParallelGrain / inner_n), run_rows);
  }
}

}  // namespace tg
