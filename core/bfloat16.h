// bfloat16 storage type: the top 16 bits of an IEEE float32. Arithmetic is always done in
// float32 registers; conversion rounds to nearest even (NaN stays NaN), as CUDA's __float2bfloat16.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TG_HOST_DEVICE __host__ __device__
#else
#define TG_HOST_DEVICE
#endif

namespace tg {

struct bf16 {
  uint16_t bits = 0;

  bf16() = default;
  TG_HOST_DEVICE explicit bf16(float f) : bits(round(f)) {}
  TG_HOST_DEVICE explicit operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
  }

 private:
  TG_HOST_DEVICE static uint16_t round(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
};

}  // namespace tg
