// linear_cross_entropy's row chunks (ops/linear_cross_entropy.h), for the tests and the bench's
// sweep of chunk sizes: the choice, and the op with a given one.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/cross_entropy.h"

namespace tg::detail {

// Rows of logits a chunk for x [N, H] and weight [V, H] of `element_size` bytes, with or without dW.
int64_t linear_cross_entropy_chunk_rows(int64_t N, int64_t V, int64_t element_size, bool want_dw);

// linear_cross_entropy with chunks of `chunk_rows` rows (0: the op's own choice).
Tensor linear_cross_entropy_chunked(const Tensor& x, const Tensor& weight, const Tensor& targets,
                                    int64_t ignore_index, Reduction reduction, int64_t chunk_rows);

}  // namespace tg::detail
