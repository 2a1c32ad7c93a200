// Shared by the standalone dev/cuda experiments: error checks, bf16 on the host, random inputs,
// an L2 flush, a median-of-N timing loop and a tolerance check against a CPU reference.
// Nothing here is the library's; each experiment file compiles on its own with nvcc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CUDA_CHECK(call)                                                                       \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

// bf16 as its bits on the host: round to nearest even (NaN aside), as __float2bfloat16_rn.
inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Deterministic values in about [-scale, scale) + shift (a counter hash, the same on every run).
inline std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.f, float shift = 0.f) {
  std::vector<float> v(n);
  uint32_t h = seed * 0x9E3779B1u + 1;
  for (size_t i = 0; i < n; ++i) {
    h ^= h << 13;
    h ^= h >> 17;
    h ^= h << 5;
    v[i] = ((h >> 8) * (1.0f / 8388608.0f) - 1.f) * scale + shift;
  }
  return v;
}

// n zeroed elements on the device.
template <class T>
T* device_zeros(size_t n) {
  T* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, n * sizeof(T)));
  CUDA_CHECK(cudaMemset(d, 0, n * sizeof(T)));
  return d;
}

// A device copy of `v` as float32 or bf16 (T = float or __nv_bfloat16); `rounded` gets the values
// the device holds, for the CPU reference.
template <class T>
T* to_device(const std::vector<float>& v, std::vector<float>& rounded) {
  rounded.resize(v.size());
  std::vector<T> host(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (sizeof(T) == 2) {
      const uint16_t b = bf16_bits(v[i]);
      std::memcpy(&host[i], &b, 2);
      rounded[i] = bf16_value(b);
    } else {
      host[i] = v[i];
      rounded[i] = v[i];
    }
  }
  T* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, v.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(d, host.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <class T>
std::vector<float> to_host(const T* d, size_t n) {
  std::vector<T> host(n);
  CUDA_CHECK(cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (sizeof(T) == 2) {
      uint16_t b;
      std::memcpy(&b, &host[i], 2);
      out[i] = bf16_value(b);
    } else {
      out[i] = host[i];
    }
  }
  return out;
}

// Largest |got - want| / (atol + rtol |want|); <= 1 passes.
inline bool check(const char* what, const std::vector<float>& got, const std::vector<float>& want, float rtol,
                  float atol) {
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::fabs(double(got[i]) - want[i]) / (atol + rtol * std::fabs(want[i]));
    if (!(e <= worst)) worst = e, at = i;
  }
  const bool ok = worst <= 1.0;
  std::printf("%s: %s (worst at %zu: got %g, want %g)\n", what, ok ? "ok" : "MISMATCH", at, got[at], want[at]);
  return ok;
}

// Median microseconds of `reps` calls of f, each after a 256 MB memset, so every call starts with
// an L2 full of the flush's dirty lines (the library benchmark's harness, bench/norm_bench.cu).
template <class F>
double median_us(F&& f, int reps = 100) {
  static void* flush = nullptr;
  const size_t flush_bytes = size_t(256) << 20;
  if (!flush) CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes));
    CUDA_CHECK(cudaEventRecord(a));
    f();
    CUDA_CHECK(cudaEventRecord(b));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.f);
  }
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
