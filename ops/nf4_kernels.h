// Backend contract for ops/nf4.h.
// quantize_4bit: x contiguous float32 / bfloat16 of n values on the kernel's device; packed uint8
// [(n + 1) / 2], absmax float32 [ceil(n / blocksize)], first_bad int64 [1] holding n: lowered to
// the index of the first NaN or inf of x when there is one (packed and absmax are then meaningless).
// quantize_8bit_blockwise (CPU only: the double quantisation of absmax, 1/64 of a weight's values):
// x float32 of finite values, code float32 [256], q uint8 [n], absmax float32 [ceil(n / blocksize)].
// dequantize_4bit: out contiguous floating [n]; packed, absmax, quant_map (and, when
// nested_absmax is defined, nested_absmax / nested_quant_map) on out's device as check_quant_state
// checks them; absmax is uint8 codes exactly when nested_absmax is defined.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tg {
namespace cpu {
void quantize_4bit(const Tensor& x, const Tensor& packed, const Tensor& absmax, const Tensor& first_bad,
                   int64_t blocksize, bool fp4);
void quantize_8bit_blockwise(const Tensor& x, const Tensor& code, const Tensor& q, const Tensor& absmax,
                             int64_t blocksize);
void dequantize_4bit(const Tensor& out, const Tensor& packed, const Tensor& absmax, const Tensor& quant_map,
                     const Tensor& nested_absmax, const Tensor& nested_quant_map, float offset, int64_t blocksize);
}  // namespace cpu
namespace cuda {
void quantize_4bit(const Tensor& x, const Tensor& packed, const Tensor& absmax, const Tensor& first_bad,
                   int64_t blocksize, bool fp4);
void dequantize_4bit(const Tensor& out, const Tensor& packed, const Tensor& absmax, const Tensor& quant_map,
                     const Tensor& nested_absmax, const Tensor& nested_quant_map, float offset, int64_t blocksize);
}  // namespace cuda
}  // namespace tg
