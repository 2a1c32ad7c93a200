// CUDA softmax / log_softmax, float32 accumulation. Three shapes of work:
//   rows (softmax over the last dim), n <= 1024: one warp per row, 8 rows per block;
//   rows, n > 1024: one block per row;
//   columns (an earlier dim, stride `inner`): one thread per (outer, column), so the 32 threads
//   of a warp read 32 neighbouring columns of the same j: coalesced without any transpose.
// Rows move 16-byte packs (after a scalar head up to the first 16-byte boundary).
// Memory traffic: forward reads x twice (the online pass for max + sum, then the write pass,
// which mostly hits L2) and writes out once; backward reads g and y twice and writes dx once.
#include "core/cuda/cuda_utils.cuh"
#include "ops/cuda/softmax_rows.cuh"
#include "ops/softmax_kernels.h"

namespace tg::cuda {
namespace {

using softmax_rows::kWarp;

constexpr int kWarpRowsThreads = 256;  // 8 rows per block in the warp-per-row kernels
constexpr int64_t kWarpRowMax = 1024;  // longer rows get a whole block

int block_threads(int64_t n) { return n >= 16384 ? 1024 : n >= 4096 ? 512 : 256; }

// One row, walked by thread t of nt; `merge` combines the threads' partial results (over a warp
// or a block).
template <class T, class Merge>
__device__ __forceinline__ void forward_row(T* out, const T* x, int64_t n, int t, int nt, bool log, Merge&& merge) {
  const OnlineSoftmax<float> st = merge(softmax_rows::row_stats(x, n, t, nt));
  if (log) {
    const float lse = st.logsumexp();
    softmax_rows::map_row(out, x, x, n, t, nt, [=](int64_t, float v, float) { return v - lse; });
  } else {
    const float ml = st.m * softmax_rows::kLog2e, inv = 1.f / st.s;
    softmax_rows::map_row(out, x, x, n, t, nt,
                          [=](int64_t, float v, float) { return softmax_rows::exp_sub(v, ml) * inv; });
  }
}

// acc = sum(g * y) for softmax, sum(g) for log_softmax; then dx from it.
template <class T, class Sum>
__device__ __forceinline__ void backward_row(T* dx, const T* g, const T* y, int64_t n, int t, int nt, bool log,
                                             Sum&& reduce) {
  float acc = 0.f;
  if (log) softmax_rows::for_row(g, n, t, nt, [&](int64_t, float v) { acc += v; });
  else softmax_rows::for_row2(g, y, n, t, nt, [&](int64_t, float gv, float yv) { acc += gv * yv; });
  acc = reduce(acc);
  if (log) {
    softmax_rows::map_row(dx, g, y, n, t, nt,
                          [=](int64_t, float gv, float yv) { return gv - softmax_rows::exp_sub(yv, 0.f) * acc; });
  } else {
    softmax_rows::map_row(dx, g, y, n, t, nt, [=](int64_t, float gv, float yv) { return yv * (gv - acc); });
  }
}

template <class T>
__global__ void softmax_rows_warp(T* out, const T* x, int64_t rows, int64_t n, bool log) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= rows) return;  // whole warps leave together, so the shuffles stay full-warp
  forward_row(out + row * n, x + row * n, n, threadIdx.x % kWarp, kWarp, log,
              [](OnlineSoftmax<float> s) { return softmax_rows::warp_merge(s); });
}

template <class T>
__global__ void softmax_rows_block(T* out, const T* x, int64_t n, bool log) {
  forward_row(out + blockIdx.x * n, x + blockIdx.x * n, n, threadIdx.x, blockDim.x, log,
              [](OnlineSoftmax<float> s) { return softmax_rows::block_merge(s); });
}

template <class T>
__global__ void softmax_backward_rows_warp(T* dx, const T* g, const T* y, int64_t rows, int64_t n, bool log) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= rows) return;
  backward_row(dx + row * n, g + row * n, y + row * n, n, threadIdx.x % kWarp, kWarp, log,
               [](float v) { return softmax_rows::warp_sum(v); });
}

template <class T>
__global__ void softmax_backward_rows_block(T* dx, const T* g, const T* y, int64_t n, bool log) {
  const int64_t off = blockIdx.x * n;
  backward_row(dx + off, g + off, y + off, n, threadIdx.x, blockDim.x, log,
               [](float v) { return softmax_rows::block_sum(v); });
}

template <class T>
__global__ void softmax_columns(T* out, const T* x, int64_t outer, int64_t n, int64_t inner, bool log) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < outer * inner; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (i / inner) * n * inner + i % inner;
    OnlineSoftmax<float> st;
    for (int64_t j = 0; j < n; ++j) softmax_rows::online_add(st, cvt<float>(x[base + j * inner]));
    const float lse = st.logsumexp(), ml = st.m * softmax_rows::kLog2e, inv = 1.f / st.s;
    for (int64_t j = 0; j < n; ++j) {
      const float v = cvt<float>(x[base + j * inner]);
      out[base + j * inner] = cvt<T>(log ? v - lse : softmax_rows::exp_sub(v, ml) * inv);
    }
  }
}

template <class T>
__global__ void softmax_backward_columns(T* dx, const T* g, const T* y, int64_t outer, int64_t n, int64_t inner, bool log) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < outer * inner; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (i / inner) * n * inner + i % inner;
    float acc = 0.f;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      acc += log ? cvt<float>(g[k]) : cvt<float>(g[k]) * cvt<float>(y[k]);
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      const float gv = cvt<float>(g[k]), yv = cvt<float>(y[k]);
      dx[k] = cvt<T>(log ? gv - softmax_rows::exp_sub(yv, 0.f) * acc : yv * (gv - acc));
    }
  }
}

unsigned warp_rows_grid(int64_t rows) {
  const int64_t per_block = kWarpRowsThreads / kWarp;
  return static_cast<unsigned>((rows + per_block - 1) / per_block);
}

}  // namespace

void softmax(const Tensor& out, const Tensor& x, SoftmaxGeometry geo, bool log) {
  dispatch_gpu_float(x.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cudaStream_t s = stream_for(x);
    const T* px = x.data_ptr<T>();
    T* po = out.data_ptr<T>();
    if (geo.inner > 1) {
      softmax_columns<T><<<blocks_for(geo.outer * geo.inner, 256), 256, 0, s>>>(po, px, geo.outer, geo.n, geo.inner, log);
      TG_CUDA_CHECK_LAUNCH("softmax_columns");
    } else if (geo.n <= kWarpRowMax) {
      softmax_rows_warp<T><<<warp_rows_grid(geo.outer), kWarpRowsThreads, 0, s>>>(po, px, geo.outer, geo.n, log);
      TG_CUDA_CHECK_LAUNCH("softmax_rows_warp");
    } else {
      softmax_rows_block<T><<<static_cast<unsigned>(geo.outer), block_threads(geo.n), 0, s>>>(po, px, geo.n, log);
      TG_CUDA_CHECK_LAUNCH("softmax_rows_block");
    }
  });
}

void softmax_backward(const Tensor& dx, const Tensor& g, const Tensor& y, SoftmaxGeometry geo, bool log) {
  dispatch_gpu_float(dx.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cudaStream_t s = stream_for(dx);
    const T* pg = g.data_ptr<T>();
    const T* py = y.data_ptr<T>();
    T* pd = dx.data_ptr<T>();
    if (geo.inner > 1) {
      softmax_backward_columns<T><<<blocks_for(geo.outer * geo.inner, 256), 256, 0, s>>>(pd, pg, py, geo.outer, geo.n,
                                                                                        geo.inner, log);
      TG_CUDA_CHECK_LAUNCH("softmax_backward_columns");
    } else if (geo.n <= kWarpRowMax) {
      softmax_backward_rows_warp<T><<<warp_rows_grid(geo.outer), kWarpRowsThreads, 0, s>>>(pd, pg, py, geo.outer,
                                                                                          geo.n, log);
      TG_CUDA_CHECK_LAUNCH("softmax_backward_rows_warp");
    } else {
      softmax_backward_rows_block<T><<<static_cast<unsigned>(geo.outer), block_threads(geo.n), 0, s>>>(pd, pg, py,
                                                                                                      geo.n, log);
      TG_CUDA_CHECK_LAUNCH("softmax_backward_rows_block");
    }
  });
}

}  // namespace tg::cuda
