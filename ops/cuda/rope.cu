// CUDA rotary embedding (ops/rope_kernels.h): a warp per row of hd elements, lane i taking the
// pair (i, i + hd / 2), so the two halves are each read and written once, coalesced. Rows of
// any [..., T, hd] layout with a unit last stride (a [B, H, T, hd] view of [B, T, H, hd]
// memory in place); float32 or bfloat16, computed in float32 with cos / sin in x's dtype.
// Traffic: x (or g) read once, out (or dx) written once; the [T, hd] tables stay in L2.
#include "core/cuda/cuda_utils.cuh"
#include "ops/cuda/nn_common.cuh"
#include "ops/rope_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

// forward: dst[i] = a c[i] - b s[i], dst[i + h] = b c[i + h] + a s[i + h]  (a = src[i], b = src[i + h]);
// backward (the adjoint): dst[i] = a c[i] + b s[i + h], dst[i + h] = b c[i + h] - a s[i].
template <class T, bool kBackward>
__global__ void rope_kernel(T* dst, const T* src, const T* cos, const T* sin, StridedIndex di, StridedIndex si,
                            int64_t rows, int64_t T_, int h) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    const T* x = src + si.offset(r);
    T* o = dst + di.offset(r);
    const int64_t t = r % T_;
    const T *c = cos + t * 2 * h, *s = sin + t * 2 * h;
    for (int i = lane; i < h; i += 32) {
      const float a = to_float(x[i]), b = to_float(x[i + h]);
      const float c0 = to_float(c[i]), c1 = to_float(c[i + h]), s0 = to_float(s[i]), s1 = to_float(s[i + h]);
      o[i] = nn::store<T>(kBackward ? a * c0 + b * s1 : a * c0 - b * s0);
      o[i + h] = nn::store<T>(kBackward ? b * c1 - a * s0 : b * c1 + a * s1);
    }
  }
}

// The rows (every dim but the last) of t, for StridedIndex.
StridedIndex rows_index(const Tensor& t) {
  Shape shape(t.shape().begin(), t.shape().end() - 1), strides(t.strides().begin(), t.strides().end() - 1);
  return strided_index(shape, strides);
}

template <bool kBackward>
void rope(const Tensor& dst, const Tensor& src, const Tensor& cos, const Tensor& sin) {
  nn::dispatch_float(src.dtype(), "apply_rotary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = src.dim(), hd = src.shape()[n - 1], rows = src.numel() / hd;
    const unsigned grid = blocks_for(rows, kThreads / 32);
    rope_kernel<T, kBackward><<<grid, kThreads, 0, stream_for(src)>>>(
        dst.data_ptr<T>(), src.data_ptr<T>(), cos.data_ptr<T>(), sin.data_ptr<T>(), rows_index(dst), rows_index(src),
        rows, src.shape()[n - 2], static_cast<int>(hd / 2));
    TG_CUDA_CHECK_LAUNCH("apply_rotary");
  });
}

}  // namespace

void rope_forward(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  rope<false>(out, x, cos, sin);
}

void rope_backward(const Tensor& dx, const Tensor& g, const Tensor& cos, const Tensor& sin) {
  rope<true>(dx, g, cos, sin);
}

}  // namespace tg::cuda
