// Row statistics of softmax for the CPU kernels of softmax, log_softmax and cross_entropy, in
// float (float32 and bfloat16 rows): two vectorised passes, max then sum(exp(x - max)) with
// fast_exp, instead of the online one-pass update of ops/softmax_math.h, whose data-dependent
// rescale keeps the compiler scalar. The extra read of the row hits L1 for any realistic row;
// float64 keeps OnlineSoftmax and std::exp (the gradcheck reference).
//
// Edge cases match the online form: a row of only -inf gives max -inf and sum nan (so softmax
// is nan, as PyTorch); a nan anywhere makes the sum nan; -inf entries contribute exactly 0.
#pragma once

#include <cstdint>
#include <limits>

#include "core/detail/fast_exp.h"
#include "core/detail/type_dispatch.h"

// An OpenMP simd reduction where the build has OpenMP (it lets the compiler reorder a float
// sum or max across vector lanes, which it may not do on its own without -ffast-math).
#ifdef _OPENMP
#define TG_SIMD_REDUCTION(...) _Pragma(TG_SIMD_STR(omp simd reduction(__VA_ARGS__)))
#define TG_SIMD_STR(x) #x
#else
#define TG_SIMD_REDUCTION(...)
#endif

namespace tg::cpu {

template <class T>
inline float row_max(const T* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  TG_SIMD_REDUCTION(max : m)
  for (int64_t j = 0; j < n; ++j) {
    const float v = convert<float>(x[j]);
    m = v > m ? v : m;
  }
  return m;
}

// sum_j exp(x[j] - m)
template <class T>
inline float row_sum_exp(const T* x, int64_t n, float m) {
  float s = 0.0f;
  TG_SIMD_REDUCTION(+ : s)
  for (int64_t j = 0; j < n; ++j) s += fast_exp(convert<float>(x[j]) - m);
  return s;
}

// sum_j a[j] * b[j]
template <class T>
inline float row_dot(const T* a, const T* b, int64_t n) {
  float s = 0.0f;
  TG_SIMD_REDUCTION(+ : s)
  for (int64_t j = 0; j < n; ++j) s += convert<float>(a[j]) * convert<float>(b[j]);
  return s;
}

template <class T>
inline float row_sum(const T* a, int64_t n) {
  float s = 0.0f;
  TG_SIMD_REDUCTION(+ : s)
  for (int64_t j = 0; j < n; ++j) s += convert<float>(a[j]);
  return s;
}

}  // namespace tg::cpu
