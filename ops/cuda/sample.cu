// CUDA sample_categorical: a block per row; each thread takes Philox blocks q = tid, tid + 256, ...
// (four scores each), keeps its best (key, index), and the block reduces them, the lower index
// winning a tie, so the answer is the CPU's whatever the thread order.
// Memory traffic: each score read once; one int64 written per row.
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/sample_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void keep_better(float& key, int64_t& arg, float k2, int64_t a2) {
  if (k2 > key || (k2 == key && a2 >= 0 && (arg < 0 || a2 < arg))) key = k2, arg = a2;
}

template <class T>
__global__ void sample_categorical_kernel(int64_t* out, const T* logits, int64_t V, float temperature, uint64_t seed,
                                          uint64_t first_row) {
  const int64_t b = blockIdx.x;
  const T* row = logits + b * V;
  float best = -INFINITY;
  int64_t arg = kSampleNotFinite;
  int nan = 0;
  for (int64_t q = threadIdx.x; 4 * q < V; q += kThreads) {
    float g[4];
    gumbel4(seed, first_row + static_cast<uint64_t>(b), static_cast<uint64_t>(q), g);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t j = 4 * q + k;
      if (j >= V) break;
      const float s = cvt<float>(row[j]);
      nan |= isnan(s);
      const float key = s / temperature + g[k];
      if (key > best) best = key, arg = j;
    }
  }
  nan = __syncthreads_or(nan);
  for (int off = 16; off > 0; off /= 2)
    keep_better(best, arg, __shfl_down_sync(0xffffffffu, best, off), __shfl_down_sync(0xffffffffu, arg, off));
  __shared__ float keys[kThreads / 32];
  __shared__ int64_t args[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) keys[warp] = best, args[warp] = arg;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) keep_better(best, arg, keys[w], args[w]);
    out[b] = nan ? kSampleNan : isfinite(best) ? arg : kSampleNotFinite;
  }
}

}  // namespace

void sample_categorical(const Tensor& out, const Tensor& logits, float temperature, uint64_t seed,
                        uint64_t first_row) {
  dispatch_gpu_float(logits.dtype(), "sample_categorical", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t B = logits.shape()[0], V = logits.shape()[1];
    sample_categorical_kernel<T><<<unsigned(B), kThreads, 0, stream_for(logits)>>>(
        out.data_ptr<int64_t>(), logits.data_ptr<T>(), V, temperature, seed, first_row);
    TG_CUDA_CHECK_LAUNCH("sample_categorical");
  });
}

}  // namespace tg::cuda
