// Host-side helpers for .cu files: return-code checks that raise tg::Error naming the call, the
// current stream, device properties, launch sizing and strided indexing. What kernels share on
// the device (packs, conversions, alignment, dtype dispatch) is core/cuda/device_utils.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

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
// Lets kernel `fn` use `smem` bytes of dynamic shared memory on `device` (above 48 KB it must opt
// in). Sets the attribute once per kernel, device and size: cudaFuncSetAttribute synchronises the
// runtime, so calling it at every launch stalls the stream behind the host.
void allow_smem(const void* fn, size_t smem, int device);
// Whether kernel `fn` as loaded on `device` was compiled from sm_90 (Hopper) code or newer, so
// its Hopper-only instructions are there: a build for an older GPU compiles them out, and that
// code also runs on a Hopper or, from its PTX, on a newer GPU. Cached per kernel and device.
bool compiled_for_sm90(const void* fn, int device);

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

}  // namespace tg::cuda
