// CUDA masked_fill: one grid-stride pass, out[i] = mask[i] ? value : x[i], with x and the
// (broadcast, stride-0) mask at their own strides. The host first merges dims that are
// contiguous for both (a [T, T] causal mask over [B, H, T, T] becomes 2 dims), and the kernel
// divides in 32 bits when the element count allows, so index math stays cheap.
// Memory traffic: x read once, out written once, the mask read once per use (mostly from cache
// when broadcast).
#include <array>
#include <vector>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/masked_fill_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

// Offsets of x and mask for a flat index, dims stored innermost first.
struct PairIndex {
  static constexpr int kMaxDims = 8;
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims][2];

  template <class I>
  __device__ __forceinline__ void get(I i, int64_t& ox, int64_t& om) const {
    ox = 0, om = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      I r = i;
      if (d + 1 < ndim) {
        const I size = static_cast<I>(sizes[d]);
        r = i % size;
        i /= size;
      }
      ox += static_cast<int64_t>(r) * strides[d][0];
      om += static_cast<int64_t>(r) * strides[d][1];
    }
  }
};

PairIndex pair_index(const Tensor& x, const Tensor& mask) {
  const Shape& shape = x.shape();
  std::vector<int64_t> sz;
  std::vector<std::array<int64_t, 2>> st;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    const int64_t sx = x.strides()[d], sm = mask.strides()[d];
    if (!sz.empty() && sx == st.back()[0] * sz.back() && sm == st.back()[1] * sz.back()) {
      sz.back() *= shape[d];
    } else {
      sz.push_back(shape[d]);
      st.push_back({sx, sm});
    }
  }
  TG_CHECK(sz.size() <= static_cast<size_t>(PairIndex::kMaxDims), "masked_fill", "tensors of more than ",
           PairIndex::kMaxDims, " non-mergeable dims are not supported on the GPU, got shape ", shape);
  PairIndex pi;
  pi.ndim = static_cast<int>(sz.size());
  for (size_t d = 0; d < sz.size(); ++d) pi.sizes[d] = sz[d], pi.strides[d][0] = st[d][0], pi.strides[d][1] = st[d][1];
  return pi;
}

template <class T, class M, class I>
__global__ void masked_fill_kernel(T* out, const T* x, const M* mask, PairIndex idx, I n, T value) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    int64_t ox, om;
    idx.get(i, ox, om);
    out[i] = mask[om] != M(0) ? value : x[ox];
  }
}

template <class F>
void dispatch_mask(DType t, F&& f) {
  switch (t) {
    case kBool: f(type_tag<bool>{}); return;
    case kInt32: f(type_tag<int32_t>{}); return;
    case kInt64: f(type_tag<int64_t>{}); return;
    default: fail("masked_fill", "'mask' must be bool or an integer type, got ", t);
  }
}

}  // namespace

void masked_fill(const Tensor& out, const Tensor& x, const Tensor& mask, double value) {
  dispatch_gpu_float(x.dtype(), "masked_fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_mask(mask.dtype(), [&](auto mtag) {
      using M = typename decltype(mtag)::type;
      const int64_t n = out.numel();
      const PairIndex idx = pair_index(x, mask);
      const T v = convert<T>(value);
      const unsigned grid = blocks_for(n, kThreads);
      cudaStream_t s = stream_for(out);
      // 32-bit index math while the grid-stride index cannot overflow it.
      if (n + int64_t(grid) * kThreads < (int64_t(1) << 32))
        masked_fill_kernel<T, M, uint32_t><<<grid, kThreads, 0, s>>>(out.data_ptr<T>(), x.data_ptr<T>(),
                                                                     mask.data_ptr<M>(), idx, uint32_t(n), v);
      else
        masked_fill_kernel<T, M, int64_t><<<grid, kThreads, 0, s>>>(out.data_ptr<T>(), x.data_ptr<T>(),
                                                                    mask.data_ptr<M>(), idx, n, v);
      TG_CUDA_CHECK_LAUNCH("masked_fill");
    });
  });
}

}  // namespace tg::cuda
