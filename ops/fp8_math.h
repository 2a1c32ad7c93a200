// float8_e4m3fn (FP8 checkpoints' weights, Hopper's FP8 GEMM operands): 4 exponent bits (bias 7),
// 3 mantissa bits, no infinity, 0x7f / 0xff NaN, largest finite 448. Shared by the CPU and CUDA
// kernels so both give the same bytes.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/bfloat16.h"  // TG_HOST_DEVICE

namespace tg::fp8 {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr int64_t kBlock = 128;  // the checkpoints' weight_block_size and the activation tiles

// x rounded to the nearest e4m3 value (ties to even), saturated to +-448; NaN gives 0x7f.
TG_HOST_DEVICE inline uint8_t to_e4m3(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t mag = bits & 0x7fffffffu;
  if (mag > 0x7f800000u) return 0x7f;
  if (mag >= 0x43e00000u) return sign | 0x7e;  // |x| >= 448 (inf too): saturated
  if (mag < 0x3c800000u) {                     // |x| < 2^-6: subnormal, steps of 2^-9
    float a;
    memcpy(&a, &mag, sizeof a);
    const float steps = a * 512.0f;  // exact: a power-of-two scaling
    uint32_t q = static_cast<uint32_t>(steps);
    const float rest = steps - static_cast<float>(q);
    if (rest > 0.5f || (rest == 0.5f && (q & 1u))) ++q;
    return sign | static_cast<uint8_t>(q);  // q == 8 is 2^-6, the smallest normal: the same bits
  }
  int32_t e = static_cast<int32_t>(mag >> 23) - 127;
  uint32_t m = (mag >> 20) & 7u;
  const uint32_t rest = mag & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (m & 1u))) ++m;
  if (m == 8) m = 0, ++e;
  return sign | static_cast<uint8_t>(((e + 7) << 3) | static_cast<int32_t>(m));
}

// The value of an e4m3 byte.
TG_HOST_DEVICE inline float from_e4m3(uint8_t b) {
  const uint32_t e = (b >> 3) & 0xfu, m = b & 7u;
  float v;
  if ((b & 0x7fu) == 0x7fu) {
    const uint32_t nan = 0x7fc00000u;
    memcpy(&v, &nan, sizeof v);
    return v;
  }
  if (e == 0) {
    v = static_cast<float>(m) * (1.0f / 512.0f);
  } else {
    const uint32_t f = ((e + 120u) << 23) | (m << 20);  // rebias 7 -> 127
    memcpy(&v, &f, sizeof v);
  }
  return (b & 0x80u) ? -v : v;
}

// The dequantisation multiplier of a block whose largest magnitude is `amax`: amax / 448, so the
// block's largest value becomes +-448; 1 for an all-zero block (any scale keeps its zeros).
TG_HOST_DEVICE inline float scale_of(float amax) { return amax > 0.0f ? amax / kE4M3Max : 1.0f; }

}  // namespace tg::fp8
