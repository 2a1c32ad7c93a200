// The routing kernels on CUDA. topk: one thread a row (k passes over its C values), its backward
// one thread an element of dx. sort_by_expert: each choice keyed by its expert (counts by integer
// atomics: the same counts in any order), CUB's stable radix sort over the key's bits, then one
// thread a row writes token_of_row and row_of_choice: about 5 passes over the n choices, no host
// round trip, rows of one expert in choice order as the CPU's. An expert id out of range is keyed
// past the last expert (sorted last, row -1), left out of the counts and reported through the
// index-error flag (index_check.cuh).
#include <bit>
#include <cstdint>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/cuda/index_check.cuh"
#include "ops/cuda/radix_sort.cuh"
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

// keys[a] = the expert of choice a (E when out of range, reported), pos[a] = a; counts[e] += 1.
__global__ void expert_keys_kernel(uint32_t* keys, int32_t* pos, unsigned long long* counts, const int64_t* indices,
                                   int64_t n, int64_t E, long long* flag) {
  for (int64_t a = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; a < n; a += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = indices[a];
    const bool valid = e >= 0 && e < E;
    if (valid) atomicAdd(counts + e, 1ull);
    else index_check::report(flag, index_check::kMoeExpert, e, E);
    keys[a] = static_cast<uint32_t>(valid ? e : E);
    pos[a] = static_cast<int32_t>(a);
  }
}

// Row r of the expert-sorted order holds choice a = sorted_pos[r]: its token a / k; row -1 (and
// token 0) for a choice out of range.
__global__ void place_rows_kernel(int64_t* token_of_row, int64_t* row_of_choice, const uint32_t* sorted_keys,
                                  const int32_t* sorted_pos, int64_t n, int64_t k, int64_t E) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < n; r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t a = sorted_pos[r];
    const bool valid = sorted_keys[r] < E;
    token_of_row[r] = valid ? a / k : 0;
    row_of_choice[a] = valid ? r : -1;
  }
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
  const int64_t n = indices.numel(), k = indices.shape()[1], E = counts.numel();
  TG_CHECK(n < (int64_t(1) << 31) && E < (int64_t(1) << 31) - 1, "sort_by_expert",
           "the CUDA kernels take fewer than 2^31 choices and experts, got ", n, " choices of ", E, " experts");
  cudaStream_t s = stream_for(indices);
  // keys and positions, then their sorted copies (int32 tensors hold the uint32 keys)
  Tensor buf = Tensor::empty({4, std::max<int64_t>(n, 1)}, {kInt32, indices.device()});
  int32_t* b = buf.data_ptr<int32_t>();
  uint32_t *keys = reinterpret_cast<uint32_t*>(b), *sorted_keys = reinterpret_cast<uint32_t*>(b + 2 * n);
  int32_t *pos = b + n, *sorted_pos = b + 3 * n;
  TG_CUDA_CHECK(cudaMemsetAsync(counts.data_ptr(), 0, static_cast<size_t>(E) * sizeof(int64_t), s));
  if (n == 0) return;
  expert_keys_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(
      keys, pos, reinterpret_cast<unsigned long long*>(counts.data_ptr<int64_t>()), indices.data_ptr<int64_t>(), n, E,
      index_check::flag(device));
  TG_CUDA_CHECK_LAUNCH("sort_by_expert");
  const int end_bit = std::bit_width(static_cast<uint64_t>(E));  // the keys are at most E
  radix_sort_pairs(keys, sorted_keys, pos, sorted_pos, static_cast<int>(n), end_bit, indices.device(), s);
  place_rows_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(token_of_row.data_ptr<int64_t>(),
                                                                 row_of_choice.data_ptr<int64_t>(), sorted_keys,
                                                                 sorted_pos, n, k, E);
  TG_CUDA_CHECK_LAUNCH("sort_by_expert");
  index_check::watch(device, s);
}

}  // namespace tg::cuda
