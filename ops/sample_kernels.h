// Backend contract for sample_categorical, and the noise both backends draw: element (b, j) gets
// -log(-log u), u = the 24-bit uniform of Philox (seed, first_row + b, stream 1 + j / 4), lane j % 4,
// shifted half a step so that u is in (0, 1). The draw is a pure function of (seed, row, j).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/detail/philox.h"
#include "core/tensor.h"
#include "ops/sample.h"

namespace tg {

// Gumbel noise of elements 4q .. 4q+3 of a row.
TG_HOST_DEVICE inline void gumbel4(uint64_t seed, uint64_t row, uint64_t q, float g[4]) {
  const Philox4 r = philox(seed, row, 1 + q);
  for (int k = 0; k < 4; ++k) {
    const float u = (static_cast<float>(r.v[k] >> 8) + 0.5f) * (1.0f / 16777216.0f);
    g[k] = -logf(-logf(u));
  }
}

namespace cpu {
// out int64 [B] contiguous, logits [B, V] with contiguous rows.
void sample_categorical(const Tensor& out, const Tensor& logits, float temperature, uint64_t seed, uint64_t first_row);
}  // namespace cpu
namespace cuda {
void sample_categorical(const Tensor& out, const Tensor& logits, float temperature, uint64_t seed, uint64_t first_row);
}  // namespace cuda
}  // namespace tg
