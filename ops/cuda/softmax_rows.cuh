// The row walks and row reductions of the CUDA softmax and cross_entropy kernels (the CPU's are
// ops/cpu/softmax_rows.h): rows read in 16-byte packs (core/cuda/device_utils.cuh), warp and block
// reductions of sums and of online-softmax states. Everything accumulates in float32.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/device_utils.cuh"
#include "ops/softmax_math.h"

namespace tg::cuda::softmax_rows {

// exp(v - m) as exp2(v * log2(e) - m * log2(e)), given m_log2e = m * log2(e): one FMA and one
// MUFU.EX2 instead of expf's range reduction. The extra relative error, about |m| * 2^-24, is far
// below float32 and bfloat16 tolerances (fused softmax kernels commonly do this).
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float exp_sub(float v, float m_log2e) { return exp2f(fmaf(v, kLog2e, -m_log2e)); }

// The online-softmax update of ops/softmax_math.h with exp_sub, for one value ...
__device__ __forceinline__ void online_add(OnlineSoftmax<float>& st, float v) {
  if (v > st.m) {
    st.s = st.s * exp2f((st.m - v) * kLog2e) + 1.f;
    st.m = v;
  } else if (v != -INFINITY) {
    st.s += exp_sub(v, st.m * kLog2e);
  }
}

// ... and for P values at once: the pack's max first, so at most one rescale per pack and one
// exp per value. While m is -inf every value seen is -inf or nan, so the shift 0 is as good as m
// (-inf adds exp(-inf) = 0, nan adds nan) and avoids -inf - -inf.
template <int P>
__device__ __forceinline__ void online_add(OnlineSoftmax<float>& st, const float (&v)[P]) {
  float pm = v[0];
#pragma unroll
  for (int q = 1; q < P; ++q) pm = fmaxf(pm, v[q]);
  if (pm > st.m) {
    st.s *= exp2f((st.m - pm) * kLog2e);
    st.m = pm;
  }
  const float ml = st.m == -INFINITY ? 0.f : st.m * kLog2e;
#pragma unroll
  for (int q = 0; q < P; ++q) st.s += exp_sub(v[q], ml);
}

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Butterfly merge: every lane ends with the same state (each merge is symmetric).
__device__ __forceinline__ OnlineSoftmax<float> warp_merge(OnlineSoftmax<float> st) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(kFullMask, st.m, o), os = __shfl_xor_sync(kFullMask, st.s, o);
    st.merge(om, os);
  }
  return st;
}

// Block-wide versions: every thread gets the result. blockDim.x is a multiple of 32, at most
// 1024; every thread of the block must call them.
__device__ inline float block_sum(float v) {
  __shared__ float partial[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = warp_sum(lane < warps ? partial[lane] : 0.f);
  __syncthreads();  // partial may be reused by the next call
  return v;
}

__device__ inline OnlineSoftmax<float> block_merge(OnlineSoftmax<float> st) {
  __shared__ float pm[kWarp], ps[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  st = warp_merge(st);
  if (lane == 0) pm[warp] = st.m, ps[warp] = st.s;
  __syncthreads();
  OnlineSoftmax<float> r;
  if (lane < warps) r.m = pm[lane], r.s = ps[lane];
  r = warp_merge(r);
  __syncthreads();
  return r;
}

// A row of n contiguous elements at p, split for 16-byte loads: `head` scalar elements until the
// first 16-byte boundary, `packs` whole packs, then a scalar tail. Works for any row start (a
// [N, 50257] tensor's rows all start differently aligned). Operands whose addresses differ by a
// multiple of 16 bytes share the split; `vec` false makes the whole row scalar.
struct RowSplit {
  int64_t head, packs;
};
template <class T>
__device__ __forceinline__ RowSplit split_row(const T* p, int64_t n, bool vec = true) {
  constexpr int P = kPack16<T>;
  const uintptr_t mis = reinterpret_cast<uintptr_t>(p) % 16;
  if (!vec || mis % sizeof(T) != 0) return {n, 0};
  const int64_t head = mis == 0 ? 0 : min(n, static_cast<int64_t>((16 - mis) / sizeof(T)));
  return {head, (n - head) / P};
}
// Whether a and b can share one split (their addresses are congruent modulo 16 bytes).
__device__ __forceinline__ bool same_phase(const void* a, const void* b) {
  return (reinterpret_cast<uintptr_t>(a) - reinterpret_cast<uintptr_t>(b)) % 16 == 0;
}

// Calls f(j, value) for this thread's share (thread t of nt) of a row of n contiguous elements:
// scalar head, 16-byte packs t, t + nt, ..., scalar tail. Consecutive threads touch
// consecutive addresses throughout (coalesced).
template <class T, class F>
__device__ __forceinline__ void for_row(const T* row, int64_t n, int t, int nt, F&& f) {
  constexpr int P = kPack16<T>;
  const RowSplit sp = split_row(row, n);
  for (int64_t j = t; j < sp.head; j += nt) f(j, cvt<float>(row[j]));
  const Pack<T, P>* packs = reinterpret_cast<const Pack<T, P>*>(row + sp.head);
  for (int64_t k = t; k < sp.packs; k += nt) {
    const Pack<T, P> pk = packs[k];
#pragma unroll
    for (int q = 0; q < P; ++q) f(sp.head + k * P + q, cvt<float>(pk.get(q)));
  }
  for (int64_t j = sp.head + sp.packs * P + t; j < n; j += nt) f(j, cvt<float>(row[j]));
}

// This thread's online-softmax state over its share of a row (see for_row).
template <class T>
__device__ __forceinline__ OnlineSoftmax<float> row_stats(const T* row, int64_t n, int t, int nt) {
  constexpr int P = kPack16<T>;
  OnlineSoftmax<float> st;
  const RowSplit sp = split_row(row, n);
  for (int64_t j = t; j < sp.head; j += nt) online_add(st, cvt<float>(row[j]));
  const Pack<T, P>* packs = reinterpret_cast<const Pack<T, P>*>(row + sp.head);
  for (int64_t k = t; k < sp.packs; k += nt) {
    const Pack<T, P> pk = packs[k];
    float v[P];
#pragma unroll
    for (int q = 0; q < P; ++q) v[q] = cvt<float>(pk.get(q));
    online_add(st, v);
  }
  for (int64_t j = sp.head + sp.packs * P + t; j < n; j += nt) online_add(st, cvt<float>(row[j]));
  return st;
}

// f(j, a[j], b[j]) over this thread's share of two rows read together.
template <class T, class F>
__device__ __forceinline__ void for_row2(const T* a, const T* b, int64_t n, int t, int nt, F&& f) {
  constexpr int P = kPack16<T>;
  const RowSplit sp = split_row(a, n, same_phase(a, b));
  for (int64_t j = t; j < sp.head; j += nt) f(j, cvt<float>(a[j]), cvt<float>(b[j]));
  const Pack<T, P>* pa = reinterpret_cast<const Pack<T, P>*>(a + sp.head);
  const Pack<T, P>* pb = reinterpret_cast<const Pack<T, P>*>(b + sp.head);
  for (int64_t k = t; k < sp.packs; k += nt) {
    const Pack<T, P> va = pa[k], vb = pb[k];
#pragma unroll
    for (int q = 0; q < P; ++q) f(sp.head + k * P + q, cvt<float>(va.get(q)), cvt<float>(vb.get(q)));
  }
  for (int64_t j = sp.head + sp.packs * P + t; j < n; j += nt) f(j, cvt<float>(a[j]), cvt<float>(b[j]));
}

// out[j] = f(j, a[j], b[j]) over this thread's share of a row (b may equal a: then f ignores
// its third argument). Packs when out, a and b share a split, else element by element.
template <class T, class F>
__device__ __forceinline__ void map_row(T* out, const T* a, const T* b, int64_t n, int t, int nt, F&& f) {
  constexpr int P = kPack16<T>;
  const RowSplit sp = split_row(a, n, same_phase(out, a) && same_phase(b, a));
  for (int64_t j = t; j < sp.head; j += nt) out[j] = cvt<T>(f(j, cvt<float>(a[j]), cvt<float>(b[j])));
  const Pack<T, P>* pa = reinterpret_cast<const Pack<T, P>*>(a + sp.head);
  const Pack<T, P>* pb = reinterpret_cast<const Pack<T, P>*>(b + sp.head);
  Pack<T, P>* po = reinterpret_cast<Pack<T, P>*>(out + sp.head);
  for (int64_t k = t; k < sp.packs; k += nt) {
    const Pack<T, P> va = pa[k], vb = pb[k];
    float vo[P];
#pragma unroll
    for (int q = 0; q < P; ++q) vo[q] = f(sp.head + k * P + q, cvt<float>(va.get(q)), cvt<float>(vb.get(q)));
    po[k] = pack_of<T, P>(vo);
  }
  for (int64_t j = sp.head + sp.packs * P + t; j < n; j += nt)
    out[j] = cvt<T>(f(j, cvt<float>(a[j]), cvt<float>(b[j])));
}

}  // namespace tg::cuda::softmax_rows
