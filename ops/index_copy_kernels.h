// Backend contract for index_copy_ (ops/index_copy.h): self [outer, size, inner] and source
// [outer, count, inner] contiguous, index [count] (int32 / int64): self[o, index[i], r] = source[o, i, r].
#pragma once

#include "core/tensor.h"

namespace tg {
namespace cpu {
void index_copy(const Tensor& self, const Tensor& index, const Tensor& source, int64_t outer, int64_t size,
                int64_t inner);
}  // namespace cpu
namespace cuda {
void index_copy(const Tensor& self, const Tensor& index, const Tensor& source, int64_t outer, int64_t size,
                int64_t inner);
}  // namespace cuda
}  // namespace tg
