// Backend contract for sample_categorical, and the noise both backends draw: element (b, j) gets
// gumbel() of lane j % 4 of Philox (seed, first_row + b, stream 1 + j / 4). The draw is a pure
// function of (seed, row, j).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/detail/philox.h"
#include "core/tensor.h"
#include "ops/sample.h"

namespace tg {

// Gumbel noise from 32 random bits: -log(-log u), u = (23 bits + 1/2) / 2^23, exactly in (0, 1).
// (24 bits and a half step would round the largest u to 1.0f, and the noise to +inf.)
TG_HOST_DEVICE inline float gumbel(uint32_t bits) {
  const float u = (static_cast<float>(bits >> 9) + 0.5f) * (1.0f / 8388608.0f);
  return -logf(-logf(u));
}

// Gumbel noise of elements 4q .. 4q+3 of a row.
TG_HOST_DEVICE inline void gumbel4(uint64_t seed, uint64_t row, uint64_t q, float g[4]) {
  const Philox4 r = philox(seed, row, 1 + q);
  for (int k = 0; k < 4; ++k) g[k] = gumbel(r.v[k]);
}

namespace cpu {
// out int64 [B] contiguous, logits [B, V] with contiguous rows.
void sample_categorical(const Tensor& out, const Tensor& logits, float temperature, uint64_t seed, uint64_t first_row);
}  // namespace cpu
namespace cuda {
void sample_categorical(const Tensor& out, const Tensor& logits, float temperature, uint64_t seed, uint64_t first_row);
}  // namespace cuda
}  // namespace tg
