// The routing kernels on CUDA, a first version that the MoE step's GEMMs dwarf at the models'
// sizes: topk by one thread a row (k passes over its C values), its backward one thread an
// element of dx; sort_by_expert as one counting sort on a single thread (T * k choices read
// twice), so its three outputs need no host round trip. An expert id out of range is left out of
// the counts and reported through the index-error flag (index_check.cuh).
#include <cstdint>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/cuda/index_check.cuh"
#include "ops/moe_routing_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void topk_kernel(T* values, int64_t* indices, const T* x, int64_t R, int64_t C, int64_t k) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < R; r += int64_t(gridDim.x) * blockDim.x) {
    const T* row = x + r * C;
    int64_t prev = -1;  // the last pick: the next is the largest below it (or equal, at a higher index)
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      float bv = 0.f;
      for (int64_t c = 0; c < C; ++c) {
        const float v = cvt<float>(row[c]);
        if (prev >= 0) {
          const float p = cvt<float>(row[prev]);
          if (v > p || (v == p && c <= prev)) continue;
        }
        if (best < 0 || v > bv) best = c, bv = v;
      }
      values[r * k + j] = row[best];
      indices[r * k + j] = best;
      prev = best;
    }
  }
}

template <class T>
__global__ void topk_backward_kernel(T* dx, const T* g, const int64_t* indices, int64_t R, int64_t C, int64_t k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < R * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / C, c = i - r * C;
    T v = cvt<T>(0.f);
    for (int64_t j = 0; j < k; ++j)
      if (indices[r * k + j] == c) v = g[r * k + j];
    dx[i] = v;
  }
}

__global__ void sort_by_expert_kernel(int64_t* counts, int64_t* token_of_row, int64_t* row_of_choice,
                                      const int64_t* indices, int64_t n, int64_t k, int64_t E, long long* flag) {
  for (int64_t e = 0; e < E; ++e) counts[e] = 0;
  for (int64_t a = 0; a < n; ++a) {
    const int64_t e = indices[a];
    if (e < 0 || e >= E) {
      index_check::report(flag, index_check::kMoeExpert, e, E);
      continue;
    }
    ++counts[e];
  }
  // counts become each expert's next free row for the placement, then go back to counts
  int64_t start = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t c = counts[e];
    counts[e] = start;
    start += c;
  }
  for (int64_t a = 0; a < n; ++a) {
    const int64_t e = indices[a];
    if (e < 0 || e >= E) {
      row_of_choice[a] = -1;
      continue;
    }
    const int64_t row = counts[e]++;
    token_of_row[row] = a / k;
    row_of_choice[a] = row;
  }
  for (int64_t e = E - 1; e > 0; --e) counts[e] -= counts[e - 1];
}

}  // namespace

void topk(const Tensor& values, const Tensor& indices, const Tensor& x) {
  const int64_t R = x.shape()[0], C = x.shape()[1], k = values.shape().back();
  dispatch_gpu_float(x.dtype(), "topk", [&](auto tag) {
    using T = typename decltype(tag)::type;
    topk_kernel<T><<<blocks_for(R, kThreads), kThreads, 0, stream_for(x)>>>(
        static_cast<T*>(values.data_ptr()), indices.data_ptr<int64_t>(), static_cast<const T*>(x.data_ptr()), R, C, k);
    TG_CUDA_CHECK_LAUNCH("topk");
  });
}

void topk_backward(const Tensor& dx, const Tensor& g, const Tensor& indices) {
  const int64_t R = dx.shape()[0], C = dx.shape()[1], k = g.shape()[1];
  dispatch_gpu_float(dx.dtype(), "topk", [&](auto tag) {
    using T = typename decltype(tag)::type;
    topk_backward_kernel<T><<<blocks_for(R * C, kThreads), kThreads, 0, stream_for(dx)>>>(
        static_cast<T*>(dx.data_ptr()), static_cast<const T*>(g.data_ptr()), indices.data_ptr<int64_t>(), R, C, k);
    TG_CUDA_CHECK_LAUNCH("topk_backward");
  });
}

void sort_by_expert(const Tensor& counts, const Tensor& token_of_row, const Tensor& row_of_choice,
                    const Tensor& indices) {
  const int device = indices.device().index;
  index_check::raise_pending(device);
  cudaStream_t s = stream_for(indices);
  sort_by_expert_kernel<<<1, 1, 0, s>>>(counts.data_ptr<int64_t>(), token_of_row.data_ptr<int64_t>(),
                                        row_of_choice.data_ptr<int64_t>(), indices.data_ptr<int64_t>(), indices.numel(),
                                        indices.shape()[1], counts.numel(), index_check::flag(device));
  TG_CUDA_CHECK_LAUNCH("sort_by_expert");
  index_check::watch(device, s);
}

}  // namespace tg::cuda
