// CUDA rotary embedding (ops/rope_kernels.h): a warp per row of hd elements, lane i taking the
// pair (i, i + hd / 2), so the two halves are each read and written once, coalesced. Rows of
// any [..., T, hd] layout with a unit last stride (a [B, H, T, hd] view of [B, T, H, hd]
// memory in place); float32 or bfloat16, computed in float32 with cos / sin in x's dtype.
// Traffic: x (or g) read once, out (or dx) written once; the [T, hd] tables stay in L2.
#include <algorithm>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/rope_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256, kRowsPerWarp = 8, kRowsPerBlock = kThreads / 32 * kRowsPerWarp;

// forward: dst[i] = a c[i] - b s[i], dst[i + h] = b c[i + h] + a s[i + h]  (a = src[i], b = src[i + h]);
// backward (the adjoint): dst[i] = a c[i] + b s[i + h], dst[i + h] = b c[i + h] - a s[i].
// Block (x, y): rows [64 x, 64 x + 64) of T of the leading matrices y, y + gridDim.y, ... (every
// dim but the last two, flattened), so a matrix's offset is divided out once per thread, not
// per row.
template <class T, bool kBackward>
__global__ void rope_kernel(T* dst, const T* src, const T* cos, const T* sin, StridedIndex dlead, StridedIndex slead,
                            int64_t lead, int64_t drs, int64_t srs, int T_, int h) {
  const int lane = threadIdx.x % 32, t0 = blockIdx.x * kRowsPerBlock + threadIdx.x / 32 * kRowsPerWarp;
  for (int64_t m = blockIdx.y; m < lead; m += gridDim.y) {
    const T* xm = src + slead.offset(m);
    T* om = dst + dlead.offset(m);
    for (int t = t0; t < min(t0 + kRowsPerWarp, T_); ++t) {
      const T *x = xm + t * srs, *c = cos + int64_t(t) * 2 * h, *s = sin + int64_t(t) * 2 * h;
      T* o = om + t * drs;
      for (int i = lane; i < h; i += 32) {
        const float a = cvt<float>(x[i]), b = cvt<float>(x[i + h]);
        const float c0 = cvt<float>(c[i]), c1 = cvt<float>(c[i + h]), s0 = cvt<float>(s[i]), s1 = cvt<float>(s[i + h]);
        o[i] = cvt<T>(kBackward ? a * c0 + b * s1 : a * c0 - b * s0);
        o[i + h] = cvt<T>(kBackward ? b * c1 - a * s0 : b * c1 + a * s1);
      }
    }
  }
}

// The leading matrices (every dim but the last two) of t, for StridedIndex.
StridedIndex lead_index(const Tensor& t) {
  Shape shape(t.shape().begin(), t.shape().end() - 2), strides(t.strides().begin(), t.strides().end() - 2);
  return strided_index(shape, strides);
}

template <bool kBackward>
void rope(const Tensor& dst, const Tensor& src, const Tensor& cos, const Tensor& sin) {
  dispatch_gpu_float(src.dtype(), "apply_rotary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = src.dim(), T_ = src.shape()[n - 2], hd = src.shape()[n - 1];
    const int64_t lead = src.numel() / (T_ * hd);
    TG_CHECK(T_ <= INT32_MAX, "apply_rotary", "more than 2^31 positions: ", T_);
    const dim3 grid(static_cast<unsigned>((T_ + kRowsPerBlock - 1) / kRowsPerBlock),
                    static_cast<unsigned>(std::min<int64_t>(lead, 65535)));
    rope_kernel<T, kBackward><<<grid, kThreads, 0, stream_for(src)>>>(
        dst.data_ptr<T>(), src.data_ptr<T>(), cos.data_ptr<T>(), sin.data_ptr<T>(), lead_index(dst), lead_index(src),
        lead, dst.strides()[n - 2], src.strides()[n - 2], static_cast<int>(T_), static_cast<int>(hd / 2));
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
