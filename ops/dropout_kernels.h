// Backend contract for dropout, and the mask both backends draw: element i (row-major) of a
// dropout call is kept when uniform01(philox(seed, first_counter + i / 4).v[i % 4]) >= p. The
// mask is a pure function of (seed, first_counter, i), so the CPU and the GPU draw the same one
// and backward regenerates it instead of storing it.
#pragma once

#include <cstdint>

#include "core/detail/philox.h"
#include "core/tensor.h"

namespace tg {

// The keep decisions of elements 4c .. 4c+3 (one Philox block), as bits 0..3.
TG_HOST_DEVICE inline unsigned dropout_keep4(uint64_t seed, uint64_t first_counter, uint64_t c, float p) {
  const Philox4 r = philox(seed, first_counter + c);
  unsigned bits = 0;
  for (int k = 0; k < 4; ++k) bits |= static_cast<unsigned>(uniform01(r.v[k]) >= p) << k;
  return bits;
}

namespace cpu {
// out = x * scale where kept, 0 elsewhere. out is contiguous, x any strides. The same call with
// the same (seed, first_counter) on the output gradient is dropout's backward.
void dropout(const Tensor& out, const Tensor& x, uint64_t seed, uint64_t first_counter, float p, double scale);
}  // namespace cpu
namespace cuda {
void dropout(const Tensor& out, const Tensor& x, uint64_t seed, uint64_t first_counter, float p, double scale);
}  // namespace cuda
}  // namespace tg
