// Helpers for .cu files: return-code checks that raise tg::Error naming the call, the current
// stream, launch sizing, strided indexing and float32 loads/stores of any element type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/bfloat16.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tg::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

// Every CUDA runtime call goes through this.
#define TG_CUDA_CHECK(call)                                                       \
  do {                                                                            \
    cudaError_t tg_err_ = (call);                                                 \
    if (tg_err_ != cudaSuccess) ::tg::cuda::throw_cuda_error(tg_err_, #call, __FILE__, __LINE__); \
  } while (0)
// After every kernel launch: catches bad launch configurations at once (no synchronisation).
#define TG_CUDA_CHECK_LAUNCH(kernel_name) TG_CUDA_CHECK(cudaPeekAtLastError())

// The compute stream of the device that owns `t` (and makes that device current).
cudaStream_t stream_for(const Tensor& t);
cudaStream_t stream(int device);
// Number of streaming multiprocessors of `device` (cached): sizes grids that fill the chip.
int sm_count(int device);
// Bytes of L2 cache of `device` (cached).
int64_t l2_bytes(int device);

inline unsigned blocks_for(int64_t n, int threads, int64_t max_blocks = 65535LL * 32) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > max_blocks ? max_blocks : b));
}

// Up to 8 dims of sizes and strides, passed by value to kernels: element `i` of the row-major
// iteration lives at offset(i).
struct StridedIndex {
  static constexpr int kMaxDims = 8;
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
  __host__ __device__ int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      off += (i % sizes[d]) * strides[d];
      i /= sizes[d];
    }
    return off;
  }
};
// Index of `t` iterated in the shape `shape` with `strides` (defaults: t's own).
StridedIndex strided_index(const Shape& shape, const Shape& strides);

template <class T>
__device__ __forceinline__ float to_float(T v) {
  return static_cast<float>(v);
}
template <class T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, bf16>) return bf16(v);
  else return static_cast<T>(v);
}

// Value conversion on the device with the CPU's semantics (tg::convert): bf16 goes through
// float, float -> bf16 rounds to nearest even in one instruction (NaN stays NaN).
template <class D, class S>
__device__ __forceinline__ D cvt(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<S, bf16>) {
    return static_cast<D>(__uint_as_float(static_cast<unsigned>(v.bits) << 16));
  } else if constexpr (std::is_same_v<D, bf16>) {
    bf16 r;
    r.bits = __bfloat16_as_ushort(__float2bfloat16_rn(static_cast<float>(v)));
    return r;
  } else {
    return static_cast<D>(v);
  }
}

// N elements of T with the alignment of their total size: one 16-byte load/store when
// N * sizeof(T) == 16 (LDG.128 / STG.128), several when larger.
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace tg::cuda
