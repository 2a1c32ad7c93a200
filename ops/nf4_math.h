// The 4-bit codes of ops/nf4.h, shared by the CPU and CUDA kernels. bitsandbytes' decision trees
// (csrc/kernels.cu dQuantizeNF4 / dQuantizeFP4) compare x (|x| for FP4, the sign a bit of its own)
// with the float32 midpoints of neighbouring codes, in ascending order, taking the "else" branch
// unless x > the midpoint: the code they reach depends only on how many midpoints lie below x,
// which is what quantize_code counts (no branch: the CPU loop vectorises, a warp does not
// diverge). NaN (an all-zero block scaled by 1 / 0) lies below none: code 0, as there. And
// bitsandbytes' binary search of the 8-bit dynamic map (dQuantize).
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

// A 4-bit code's midpoints (ascending; FP4's 7 of |x| padded with +inf, which nothing exceeds) and
// the code of each count of midpoints below x (nibble `count` of `codes`: no array indexed at run
// time, so the CUDA kernel that takes it by value keeps it in registers).
struct Codebook {
  float mid[15];
  uint64_t codes;
  bool fp4;
};
inline constexpr Codebook kNF4Codebook = {
    {-0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,
     -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
     0.1202552504837513f, 0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f, 0.5016634166240692f,
     0.6427869200706482f, 0.8614784181118011f},
    0xFEDCBA9876543210ull,
    false};
inline constexpr Codebook kFP4Codebook = {
    {0.00260417f, 0.0859375f, 0.20833333f, 0.29166667f, 0.4166667f, 0.583333f, 0.8333333f, __builtin_huge_valf(),
     __builtin_huge_valf(), __builtin_huge_valf(), __builtin_huge_valf(), __builtin_huge_valf(),
     __builtin_huge_valf(), __builtin_huge_valf(), __builtin_huge_valf()},
    0x32547610ull,  // counts 0..7: 0b0000, 0b0001, 0b0110, 0b0111, 0b0100, 0b0101, 0b0010, 0b0011
    true};

// The code of x (already scaled by 1 / absmax).
TG_HOST_DEVICE inline uint8_t quantize_code(float x, const Codebook& book) {
  const float a = book.fp4 && x < 0 ? -x : x;
  int below = 0;
  for (int k = 0; k < 15; ++k) below += a > book.mid[k];
  if (!book.fp4) return static_cast<uint8_t>(below);  // NF4's codes are the counts (and the CPU loop vectorises)
  return static_cast<uint8_t>((book.codes >> (4 * below) & 0xF) | (x < 0 ? 0b1000 : 0));
}

// The byte of two scaled values: the first value's code in the high nibble.
TG_HOST_DEVICE inline uint8_t pack_codes(float first, float second, const Codebook& book) {
  return static_cast<uint8_t>(quantize_code(first, book) << 4 | quantize_code(second, book));
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
