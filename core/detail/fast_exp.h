// A branch-free float exp for CPU kernels. GCC does not vectorise std::exp(float) without
// -ffast-math (it calls libm's scalar expf per element); this one is straight-line arithmetic,
// so a loop over it vectorises to the machine's widest registers.
//
//   exp(x) = 2^n * exp(r),  n = round(x / ln2),  r = x - n ln2 in [-ln2/2, ln2/2]
//
// r is formed with a two-part ln2 (Cody-Waite: n * ln2_hi is exact), so it carries no
// cancellation error; exp(r) is 1 + r + r^2 q(r) with q a degree-4 polynomial fitted (weighted
// least squares on Chebyshev nodes) to the relative error of exp on that interval (fit error
// ~4e-9, far below float rounding). 2^n is built from exponent bits as two factors 2^(n/2) * 2^(n - n/2), so
// results that overflow become +inf and results below FLT_MIN become correctly scaled
// subnormals or 0 with no special case. Max error, checked exhaustively over all 2^32 inputs
// against std::exp in double: 1.01 ulp with FMA, 0.98 without (tests/test_fast_exp.cpp
// sweeps a sample of them).
//
// Edge cases as std::exp: exp(-inf) = 0, exp(+inf) = +inf, exp(nan) = nan, x > ~88.72 gives
// +inf, x < ~-103.97 gives 0. CPU only (float64 keeps std::exp: it is the gradcheck reference).
#pragma once

#include <bit>
#include <cstdint>

// Forced inline: a call per element would stop the caller's loop from vectorising, and large
// kernel files (one instantiation per op and dtype) hit GCC's inline growth limits.
#if defined(__GNUC__)
#define TG_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define TG_ALWAYS_INLINE inline
#endif

namespace tg {
namespace detail {
// a * b + c, fused where the target has FMA (without it, __builtin_fmaf is a libm call per
// element; the unfused form costs at most a few tenths of an ulp here).
TG_ALWAYS_INLINE float mul_add(float a, float b, float c) {
#ifdef __FMA__
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}
}  // namespace detail

TG_ALWAYS_INLINE float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;       // ln2 to 16 bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;  // ln2 - kLn2Hi
  constexpr float kRound = 12582912.0f;              // 1.5 * 2^23: t + kRound rounds t to an integer
  // Clamp first (a nan passes through both comparisons unchanged): every n below then lies in
  // [-150, 128], which the two exponent factors can represent.
  x = x < -104.0f ? -104.0f : x;
  x = x > 89.0f ? 89.0f : x;
  const float j = x * kLog2e + kRound;  // low mantissa bits of j hold n
  const float fn = j - kRound;
  const int32_t n = std::bit_cast<int32_t>(j) - std::bit_cast<int32_t>(kRound);
  float r = detail::mul_add(-fn, kLn2Hi, x);
  r = detail::mul_add(-fn, kLn2Lo, r);
  float q = 1.375127933e-03f;
  q = detail::mul_add(q, r, 8.368952200e-03f);
  q = detail::mul_add(q, r, 4.166954011e-02f);
  q = detail::mul_add(q, r, 1.666651815e-01f);
  q = detail::mul_add(q, r, 4.999998808e-01f);
  const float p = detail::mul_add(q, r * r, r) + 1.0f;
  const int32_t n1 = n >> 1, n2 = n - n1;  // each in [-75, 64]: normal powers of two
  const float s1 = std::bit_cast<float>((n1 + 127) << 23), s2 = std::bit_cast<float>((n2 + 127) << 23);
  return p * s1 * s2;
}

}  // namespace tg
