// CUDA rotary embedding (ops/apply_rotary_kernels.h): a thread per N consecutive pairs (i, i + hd / 2) of a
// row, N as wide as the row length, strides and pointers allow (16-byte accesses for bf16 rows of
// hd 16 and more), so each half is read and written once, coalesced. Rows of any [..., T, hd]
// layout with a unit last stride (a [B, H, T, hd] view of [B, T, H, hd] memory in place); float32
// or bfloat16, computed in float32 with cos / sin in x's dtype.
// Traffic: x (or g) read once, out (or dx) written once; the [T, hd] tables stay in L2.
// apply_rotary (one tensor) and apply_rotary_pos_emb (q and k, one launch for both) share one kernel.
#include <algorithm>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/apply_rotary_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256, kRowsPerBlock = 64;

// forward: dst[i] = a c[i] - b s[i], dst[i + h] = b c[i + h] + a s[i + h]  (a = src[i], b = src[i + h]);
// backward (the adjoint): dst[i] = a c[i] + b s[i + h], dst[i + h] = b c[i + h] - a s[i].
// Rows [t0, t0 + rows) of one [T, hd] matrix (src rows xm, dst rows om, its table's first row
// `table`): the block's threads take (row, pack) pairs, `packs` = h / N packs a half-row.
template <class T, int N, bool kBackward>
__device__ __forceinline__ void rotate_rows(T* om, const T* xm, const T* cos, const T* sin, int64_t table,
                                            int64_t drs, int64_t srs, int t0, int rows, int h) {
  const int packs = h / N;
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

// One tensor of the pair: its output and input, their leading matrices' offsets, how many (0:
// absent), how many share a table, and their row strides.
template <class T>
struct RotarySide {
  T* dst;
  const T* src;
  StridedIndex dlead, slead;
  int64_t lead, group, drs, srs;
};

// Block (x, y): rows [64 x, 64 x + 64) of T of the leading matrices y, y + gridDim.y, ... (every
// dim but the last two, flattened) of q, then of k (dev/cuda/07_rotary.cu's version 2), so q and k
// (GQA: k with fewer heads) share one launch's ramp-up and tail; a matrix's offset is divided out
// once per matrix, not per row. The tables are contiguous, one for every `group` consecutive
// matrices of a side (all of them for [T, hd]). apply_rotary's one tensor is q with k absent.
template <class T, int N, bool kBackward>
__global__ void apply_rotary_kernel(RotarySide<T> q, RotarySide<T> k, const T* cos, const T* sin, int T_,
                                         int h) {
  const int t0 = blockIdx.x * kRowsPerBlock, rows = min(kRowsPerBlock, T_ - t0);
  // Two calls, not one through a selected side: that took 62 registers (bf16, 16-byte packs), these 48.
  for (int64_t m = blockIdx.y; m < q.lead + k.lead; m += gridDim.y) {
    if (m < q.lead)  // the same for the whole block
      rotate_rows<T, N, kBackward>(q.dst + q.dlead.offset(m), q.src + q.slead.offset(m), cos, sin, m / q.group * T_,
                                   q.drs, q.srs, t0, rows, h);
    else
      rotate_rows<T, N, kBackward>(k.dst + k.dlead.offset(m - q.lead), k.src + k.slead.offset(m - q.lead), cos, sin,
                                   (m - q.lead) / k.group * T_, k.drs, k.srs, t0, rows, h);
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

// dst_q / src_q and dst_k / src_k: the pair's tensors, either pair undefined (not computed); `op`
// names the launch in errors.
template <bool kBackward>
void apply_rotary_launch(const char* op, const Tensor& dst_q, const Tensor& dst_k, const Tensor& src_q,
                         const Tensor& src_k, const Tensor& cos, const Tensor& sin) {
  const Tensor& any = src_q.defined() ? src_q : src_k;
  if (!any.defined()) return;
  dispatch_gpu_float(any.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = any.dim(), T_ = any.shape()[n - 2], hd = any.shape()[n - 1], h = hd / 2;
    const int64_t tables = cos.numel() / (T_ * hd);
    TG_CHECK(T_ <= INT32_MAX, op, "more than 2^31 positions: ", T_);
    auto side = [&](const Tensor& dst, const Tensor& src) {
      RotarySide<T> r{};
      if (!src.defined()) return r;  // lead 0
      const int64_t m = src.dim(), lead = src.numel() / (T_ * hd);
      r = {dst.data_ptr<T>(), src.data_ptr<T>(), lead_index(dst), lead_index(src), lead, lead / tables,
           dst.strides()[m - 2], src.strides()[m - 2]};
      return r;
    };
    const RotarySide<T> q = side(dst_q, src_q), k = side(dst_k, src_k);
    const dim3 grid(static_cast<unsigned>((T_ + kRowsPerBlock - 1) / kRowsPerBlock),
                    static_cast<unsigned>(std::min<int64_t>(q.lead + k.lead, 65535)));
    auto launch = [&](auto width) {
      constexpr int N = decltype(width)::value;
      apply_rotary_kernel<T, N, kBackward><<<grid, kThreads, 0, stream_for(any)>>>(
          q, k, cos.data_ptr<T>(), sin.data_ptr<T>(), static_cast<int>(T_), static_cast<int>(h));
    };
    auto fits = [&](int N) {
      for (const Tensor* t : {&dst_q, &dst_k, &src_q, &src_k})
        if (t->defined() && !packs_fit(*t, h, N)) return false;
      return packs_fit(cos, h, N) && packs_fit(sin, h, N);
    };
    constexpr int kWidest = kPack16<T>;  // 16 bytes
    if (fits(kWidest)) launch(std::integral_constant<int, kWidest>{});
    else if (fits(kWidest / 2)) launch(std::integral_constant<int, kWidest / 2>{});
    else if (fits(2)) launch(std::integral_constant<int, 2>{});
    else launch(std::integral_constant<int, 1>{});
    TG_CUDA_CHECK_LAUNCH(op);
  });
}

}  // namespace

void apply_rotary_forward(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  apply_rotary_launch<false>("apply_rotary", out, Tensor(), x, Tensor(), cos, sin);
}

void apply_rotary_backward(const Tensor& dx, const Tensor& g, const Tensor& cos, const Tensor& sin) {
  apply_rotary_launch<true>("apply_rotary", dx, Tensor(), g, Tensor(), cos, sin);
}

void apply_rotary_pair_forward(const Tensor& out_q, const Tensor& out_k, const Tensor& q, const Tensor& k,
                               const Tensor& cos, const Tensor& sin) {
  apply_rotary_launch<false>("apply_rotary_pos_emb", out_q, out_k, q, k, cos, sin);
}

void apply_rotary_pair_backward(const Tensor& dq, const Tensor& dk, const Tensor& gq, const Tensor& gk,
                                const Tensor& cos, const Tensor& sin) {
  apply_rotary_launch<true>("apply_rotary_pos_emb", dq, dk, gq, gk, cos, sin);
}

}  // namespace tg::cuda
