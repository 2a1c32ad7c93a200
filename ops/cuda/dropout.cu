// CUDA dropout: one thread per Philox block, i.e. per four consecutive elements (row-major
// index i = 4c + k), so each 128-bit Philox output is drawn exactly once. The mask formula is
// dropout_keep4 (ops/dropout_kernels.h), shared with the CPU: both draw identical masks.
// A contiguous, aligned x moves its four elements with one load and one store per thread.
// Memory traffic: each element of x read once, each of out written once; no mask is stored.
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/dropout_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

enum Layout { kQuads, kContiguous, kStrided };

template <class T, Layout L>
__global__ void dropout_kernel(T* out, const T* x, StridedIndex xi, int64_t n, uint64_t seed, uint64_t first,
                               float p, float scale) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < blocks; c += int64_t(gridDim.x) * blockDim.x) {
    const unsigned keep = dropout_keep4(seed, first, static_cast<uint64_t>(c), p);
    if (L == kQuads && 4 * c + 3 < n) {
      const Pack<T, 4> in = reinterpret_cast<const Pack<T, 4>*>(x)[c];
      Pack<T, 4> o;
#pragma unroll
      for (int k = 0; k < 4; ++k) o.set(k, cvt<T>((keep >> k) & 1u ? cvt<float>(in.get(k)) * scale : 0.f));
      reinterpret_cast<Pack<T, 4>*>(out)[c] = o;
      continue;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * c + k;
      if (i >= n) break;
      const float v = cvt<float>(x[L == kStrided ? xi.offset(i) : i]);
      out[i] = cvt<T>((keep >> k) & 1u ? v * scale : 0.f);
    }
  }
}

}  // namespace

void dropout(const Tensor& out, const Tensor& x, uint64_t seed, uint64_t first_counter, float p, double scale) {
  dispatch_gpu_float(x.dtype(), "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = out.numel();
    const unsigned grid = blocks_for((n + 3) / 4, kThreads);
    cudaStream_t s = stream_for(out);
    T* po = out.data_ptr<T>();
    const T* px = x.data_ptr<T>();
    const float sc = static_cast<float>(scale);
    if (x.is_contiguous() && aligned(px, sizeof(Pack<T, 4>)) && aligned(po, sizeof(Pack<T, 4>)))
      dropout_kernel<T, kQuads><<<grid, kThreads, 0, s>>>(po, px, StridedIndex{}, n, seed, first_counter, p, sc);
    else if (x.is_contiguous())
      dropout_kernel<T, kContiguous><<<grid, kThreads, 0, s>>>(po, px, StridedIndex{}, n, seed, first_counter, p, sc);
    else
      dropout_kernel<T, kStrided><<<grid, kThreads, 0, s>>>(po, px, strided_index(x.shape(), x.strides()), n, seed,
                                                           first_counter, p, sc);
    TG_CUDA_CHECK_LAUNCH("dropout");
  });
}

}  // namespace tg::cuda
