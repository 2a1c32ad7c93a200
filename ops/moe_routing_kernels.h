// Backend contract for the routing ops (ops/moe_routing.h). Every tensor is contiguous.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tg {
namespace cpu {
// values [R, k], indices int64 [R, k] = the k largest of each row of x [R, C], largest first,
// equal values lower index first. Reads x once (k passes over a row held in cache).
void topk(const Tensor& values, const Tensor& indices, const Tensor& x);
// dx [R, C] = 0 except dx[r, indices[r, j]] = g[r, j]. Writes dx once.
void topk_backward(const Tensor& dx, const Tensor& g, const Tensor& indices);
// counts int64 [E], token_of_row and row_of_choice int64 [T * k] from indices int64 [T, k] (see
// ops/moe_routing.h): a counting sort, two passes over indices.
void sort_by_expert(const Tensor& counts, const Tensor& token_of_row, const Tensor& row_of_choice,
                    const Tensor& indices);
}  // namespace cpu
namespace cuda {
void topk(const Tensor& values, const Tensor& indices, const Tensor& x);
void topk_backward(const Tensor& dx, const Tensor& g, const Tensor& indices);
void sort_by_expert(const Tensor& counts, const Tensor& token_of_row, const Tensor& row_of_choice,
                    const Tensor& indices);
}  // namespace cuda
}  // namespace tg
