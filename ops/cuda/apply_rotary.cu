// CUDA rotary embedding (ops/apply_rotary_kernels.h): a thread per N consecutive pairs (i, i + hd / 2) of a
// row, N as wide as the row length, strides and pointers allow (16-byte accesses for bf16 rows of
// hd 16 and more), so each half is read and written once, coalesced. Rows of any [..., T, hd]
// layout with a unit last stride (a [B, H, T, hd] view of [B, T, H, hd] memory in place); float32
// or bfloat16, computed in float32 with cos / sin in x's dtype.
// Traffic: x (or g) read once, out (or dx) written once; the [T, hd] tables stay in L2.
#include <algorithm>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/apply_rotary_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256, kRowsPerBlock = 64;

// forward: dst[i] = a c[i] - b s[i], dst[i + h] = b c[i + h] + a s[i + h]  (a = src[i], b = src[i + h]);
// backward (the adjoint): dst[i] = a c[i] + b s[i + h], dst[i + h] = b c[i + h] - a s[i].
// Block (x, y): rows [64 x, 64 x + 64) of T of the leading matrices y, y + gridDim.y, ... (every
// dim but the last two, flattened), so a matrix's offset is divided out once per matrix, not per
// row; its threads take (row, pack) pairs of those rows, `packs` = h / N packs a half-row.
// The tables are contiguous, one for every `group` consecutive matrices (all of them for [T, hd]).
template <class T, int N, bool kBackward>
__global__ void apply_rotary_kernel(T* dst, const T* src, const T* cos, const T* sin, StridedIndex dlead,
                                    StridedIndex slead, int64_t lead, int64_t group, int64_t drs, int64_t srs,
                                    int T_, int h) {
  const int packs = h / N, t0 = blockIdx.x * kRowsPerBlock, rows = min(kRowsPerBlock, T_ - t0);
  for (int64_t m = blockIdx.y; m < lead; m += gridDim.y) {
    const T* xm = src + slead.offset(m);
    T* om = dst + dlead.offset(m);
    const int64_t table = m / group * T_;  // its first row
    for (int idx = threadIdx.x; idx < rows * packs; idx += kThreads) {
      const int t = t0 + idx / packs, i = idx % packs * N;
      const T *x = xm + t * srs + i, *c = cos + (table + t) * 2 * h + i, *s = sin + (table + t) * 2 * h + i;
      Pack<T, N> a, b, c0, c1, s0, s1;
      load_pack<Access::plain>(a, x);
      load_pack<Access::plain>(b, x + h);
      load_pack<Access::cached>(c0, c);
      load_pack<Access::cached>(c1, c + h);
      load_pack<Access::cached>(s0, s);
      load_pack<Access::cached>(s1, s + h);
      float lo[N], hi[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float ae = elem(a, e), be = elem(b, e);
        lo[e] = kBackward ? ae * elem(c0, e) + be * elem(s1, e) : ae * elem(c0, e) - be * elem(s0, e);
        hi[e] = kBackward ? be * elem(c1, e) - ae * elem(s0, e) : be * elem(c1, e) + ae * elem(s1, e);
      }
      T* o = om + t * drs + i;
      store_pack<Access::plain>(o, pack_of<T, N>(lo));
      store_pack<Access::plain>(o + h, pack_of<T, N>(hi));
    }
  }
}

// The leading matrices (every dim but the last two) of t, for StridedIndex.
StridedIndex lead_index(const Tensor& t) {
  Shape shape(t.shape().begin(), t.shape().end() - 2), strides(t.strides().begin(), t.strides().end() - 2);
  return strided_index(shape, strides);
}

// Whether N elements of t's rows can move as one pack: every stride but the last, the half-row
// length and the pointer are multiples of N elements.
bool packs_fit(const Tensor& t, int64_t h, int N) {
  if (h % N != 0 || !aligned(t.data_ptr(), size_t(N) * t.element_size())) return false;
  for (int64_t d = 0; d + 1 < t.dim(); ++d)
    if (t.strides()[d] % N != 0) return false;
  return true;
}

template <bool kBackward>
void apply_rotary_launch(const Tensor& dst, const Tensor& src, const Tensor& cos, const Tensor& sin) {
  dispatch_gpu_float(src.dtype(), "apply_rotary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = src.dim(), T_ = src.shape()[n - 2], hd = src.shape()[n - 1], h = hd / 2;
    const int64_t lead = src.numel() / (T_ * hd), group = lead / (cos.numel() / (T_ * hd));
    TG_CHECK(T_ <= INT32_MAX, "apply_rotary", "more than 2^31 positions: ", T_);
    const dim3 grid(static_cast<unsigned>((T_ + kRowsPerBlock - 1) / kRowsPerBlock),
                    static_cast<unsigned>(std::min<int64_t>(lead, 65535)));
    auto launch = [&](auto width) {
      constexpr int N = decltype(width)::value;
      apply_rotary_kernel<T, N, kBackward><<<grid, kThreads, 0, stream_for(src)>>>(
          dst.data_ptr<T>(), src.data_ptr<T>(), cos.data_ptr<T>(), sin.data_ptr<T>(), lead_index(dst),
          lead_index(src), lead, group, dst.strides()[n - 2], src.strides()[n - 2], static_cast<int>(T_),
          static_cast<int>(h));
    };
    auto fits = [&](int N) {
      return packs_fit(dst, h, N) && packs_fit(src, h, N) && packs_fit(cos, h, N) && packs_fit(sin, h, N);
    };
    constexpr int kWidest = kPack16<T>;  // 16 bytes
    if (fits(kWidest)) launch(std::integral_constant<int, kWidest>{});
    else if (fits(kWidest / 2)) launch(std::integral_constant<int, kWidest / 2>{});
    else if (fits(2)) launch(std::integral_constant<int, 2>{});
    else launch(std::integral_constant<int, 1>{});
    TG_CUDA_CHECK_LAUNCH("apply_rotary");
  });
}

}  // namespace

void apply_rotary_forward(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  apply_rotary_launch<false>(out, x, cos, sin);
}

void apply_rotary_backward(const Tensor& dx, const Tensor& g, const Tensor& cos, const Tensor& sin) {
  apply_rotary_launch<true>(dx, g, cos, sin);
}

}  // namespace tg::cuda
