// IEEE half precision <-> float32 on the host (safetensors' F16, GGUF's F16 and Q8_0 scales).
// Internal to io/.
#pragma once

#include <bit>
#include <cstdint>

namespace tg::io::detail {

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {  // inf / nan
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {  // normal
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {  // zero
    bits = sign;
  } else {  // subnormal: renormalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3FF) << 13);
  }
  return std::bit_cast<float>(bits);
}

// Rounds to nearest even, as numpy's astype(float16) and ggml's fp32 -> fp16 do: overflow gives
// infinity, values below half the smallest subnormal give zero, NaN stays NaN.
inline uint16_t float_to_half(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00 | ((abs >> 13) & 0x3FF));  // NaN
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00);  // rounds past 65504: infinity
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
    if (abs < 0x33000000u) return sign;  // at most 2^-25: rounds to zero
    const uint32_t exp = abs >> 23, mant = (abs & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - exp;  // 14 + (113 - exp) - 1: the bits below the half's last one
    const uint32_t half = mant >> shift, rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    return static_cast<uint16_t>(sign | (half + (rest > mid || (rest == mid && (half & 1)))));
  }
  const uint32_t rounded = abs + 0xFFF + ((abs >> 13) & 1);  // to nearest even at bit 13
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

}  // namespace tg::io::detail
