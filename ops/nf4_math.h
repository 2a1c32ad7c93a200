// The 4-bit codes of ops/nf4.h, shared by the CPU and CUDA kernels: bitsandbytes' decision trees
// (csrc/kernels.cu dQuantizeNF4 / dQuantizeFP4), whose thresholds are the float32 midpoints of
// neighbouring codes, and its binary search of the 8-bit dynamic map (dQuantize). A NaN input
// (an all-zero block scaled by 1 / 0) takes every "else" branch, as there.
#pragma once

#include <cstdint>

#include "core/bfloat16.h"  // TG_HOST_DEVICE

namespace tg::nf4 {

inline constexpr int64_t kNestedBlocksize = 256;  // double quantisation's blocks of absmax

// get_4bit_type("nf4") and get_4bit_type("fp4") (FP4 in bit-pattern order, divided by 12).
inline constexpr float kNF4Map[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                                      -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                                      0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,
                                      0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
                                      0.7229568362236023f, 1.0f};
inline constexpr float kFP4Map[16] = {0.0f, 0.0625f / 12, 8.0f / 12, 12.0f / 12, 4.0f / 12, 6.0f / 12,
                                      2.0f / 12, 3.0f / 12, -0.0f, -0.0625f / 12, -8.0f / 12, -12.0f / 12,
                                      -4.0f / 12, -6.0f / 12, -2.0f / 12, -3.0f / 12};

TG_HOST_DEVICE inline uint8_t quantize_nf4(float x) {
  if (x > 0.03979014977812767f) {
    if (x > 0.3893125355243683f) {
      if (x > 0.6427869200706482f) return x > 0.8614784181118011f ? 0b1111 : 0b1110;
      return x > 0.5016634166240692f ? 0b1101 : 0b1100;
    }
    if (x > 0.2035212516784668f) return x > 0.2920137718319893f ? 0b1011 : 0b1010;
    return x > 0.1202552504837513f ? 0b1001 : 0b1000;
  }
  if (x > -0.33967943489551544f) {
    if (x > -0.13791173323988914f) return x > -0.045525018125772476f ? 0b0111 : 0b0110;
    return x > -0.23460740596055984f ? 0b0101 : 0b0100;
  }
  if (x > -0.6106329262256622f) return x > -0.4599952697753906f ? 0b0011 : 0b0010;
  return x > -0.8480964004993439f ? 0b0001 : 0b0000;
}

TG_HOST_DEVICE inline uint8_t quantize_fp4(float x) {
  const uint8_t sign = x < 0 ? 0b1000 : 0;
  const float a = x < 0 ? -x : x;  // NaN stays NaN
  if (a > 0.29166667f) {
    if (a > 0.583333f) return (a > 0.8333333f ? 0b0011 : 0b0010) + sign;
    return (a > 0.4166667f ? 0b0101 : 0b0100) + sign;
  }
  if (a > 0.0859375f) return (a > 0.20833333f ? 0b0111 : 0b0110) + sign;
  return (a > 0.00260417f ? 0b0001 : 0b0000) + sign;
}

// The byte of two values already scaled by 1 / absmax: the first value's code in the high nibble.
TG_HOST_DEVICE inline uint8_t pack_codes(float first, float second, bool fp4) {
  return fp4 ? static_cast<uint8_t>(quantize_fp4(first) << 4 | quantize_fp4(second))
             : static_cast<uint8_t>(quantize_nf4(first) << 4 | quantize_nf4(second));
}

// dQuantize<0>: the index of the code nearest x in the 256 sorted `code`, ties by the float32
// midpoint of the two neighbours as bitsandbytes rounds them.
TG_HOST_DEVICE inline uint8_t quantize_8bit(const float* code, float x) {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = -1.0f, upper = 1.0f, val = code[pivot];
  for (int i = 64; i > 0; i >>= 1) {
    if (x > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += i;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= i;
    }
    val = code[pivot];
  }
  if (upper_pivot == 255) upper = code[upper_pivot];
  if (lower_pivot == 0) lower = code[lower_pivot];
  if (x > val) return static_cast<uint8_t>(x > (upper + val) * 0.5f ? upper_pivot : pivot);
  return static_cast<uint8_t>(x < (lower + val) * 0.5f ? lower_pivot : pivot);
}

}  // namespace tg::nf4
