// The CUDA RMSNorm / LayerNorm kernels, shared by ops/cuda/rms_norm.cu and layer_norm.cu (LN
// selects LayerNorm; RMSNorm has mean 0 and no bias). This header: the work layout, the row
// reductions, the backward arithmetic and the final dW / dB sum; the kernels are in
// norm_forward.cuh and norm_backward.cuh, the launch plans in norm_launch.cuh. How the choices
// below were measured: dev/NOTES.md.
//
// Layout. A row of `dim` elements is `nv` vectors of VB bytes (16 when dim and every pointer
// allow it, else 8, else one element). A group of `tpr` threads owns a row; thread `lane` holds
// vectors lane, lane + tpr, ... (ITERS of them, a compile-time count, so the row stays in
// registers between its loads and its stores). A block holds `gpb` groups (several only for rows
// of <= 32 threads). Row sums are a warp butterfly and, for rows wider than a warp, one
// shared-memory step and a second butterfly: a fixed order, so results are deterministic.
//
// Backward. The kernels are compiled per <DX, DW, DB>. With dx, a thread's columns are the same
// for every row, so dW (sum of dy * xhat) and dB (sum of dy) accumulate per thread over the
// block's rows and are written once, as one partial row per block; such a launch is persistent
// and co-resident (cooperative), and after a grid barrier its blocks sum the partial rows
// column-wise in a fixed order. A variant without dW / dB has none of that code and no partial
// buffer. dx of a row does not depend on the variant or the kernel (the same threads per row,
// the helpers below, explicitly rounded operations): frozen and unfrozen give bitwise the same dx.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "core/trace.h"
#include "ops/rms_norm_kernels.h"

namespace tg::cuda::normk {

constexpr int kMaxIters = 16;     // vectors per thread per row in the register-resident kernels
constexpr int kMaxTpr = 512;      // threads per row in the register-resident kernels
constexpr int kLoopTpr = 1024;    // threads per row in the looping kernels
constexpr int kGroupBlock = 256;  // block size when several rows share a block
// Launch bounds of the register-resident kernels: the widest block an ITERS instantiation gets,
// and the blocks that must share a multiprocessor (a register cap; more blocks only where the
// cap does not spill: a float32 dx alone fits three at two vectors a thread, bf16 spills).
constexpr int max_tpr(int iters) { return iters >= 16 ? 256 : kMaxTpr; }
constexpr int min_blocks(int iters, bool accumulates = false, bool float_dx_alone = false) {
  return iters <= 1 ? (accumulates ? 2 : 4) : iters == 2 ? (float_dx_alone ? 3 : 2) : 1;
}

// C floats accessed as one (shared-memory accumulator slots, partial-row stores).
template <int C>
struct alignas(4 * C) FChunk {
  float v[C];
};

// The backward's read-once rows (dy, x, the residual gradient) under an L2 evict-first policy
// where the launch moves little data for the L2's size (read_evict_first, host side): the lines
// already in L2, often a previous kernel's dirty output, then stay, and their write-back does
// not share this launch's DRAM time. Elsewhere plain loads.
struct RowRead {
  bool evict_first;
  uint64_t policy;  // evict_first: an L2 evict-first cache policy (createpolicy)
};
__device__ __forceinline__ RowRead row_read(bool evict_first) {
  RowRead r{evict_first, 0};
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  if (evict_first) asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(r.policy));
#endif
  return r;
}
template <class T, int N>
__device__ __forceinline__ void load_row(Pack<T, N>& out, const T* p, const RowRead& rr) {
  using R = typename RawOf<sizeof(T) * N>::type;
  const R* q = reinterpret_cast<const R*>(p);
  R r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  r = *q;  // no L2 cache hints before Ampere
#else
  if (!rr.evict_first) r = *q;
  else if constexpr (sizeof(R) == 16)
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(q), "l"(rr.policy));
  else if constexpr (sizeof(R) == 8)
    asm volatile("ld.global.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(r.x), "=r"(r.y) : "l"(q), "l"(rr.policy));
  else if constexpr (sizeof(R) == 4)
    asm volatile("ld.global.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(r) : "l"(q), "l"(rr.policy));
  else
    asm volatile("ld.global.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(r) : "l"(q), "l"(rr.policy));
#endif
  memcpy(&out, &r, sizeof r);
}

// w's vector v, or ones for a norm without a weight: dy * w is then one multiply per element
// with no per-element branch (a select cost the dx kernel 8 registers; d * 1 is exact).
template <class T, int N>
__device__ __forceinline__ void load_weight(Pack<T, N>& p, const T* w, int v) {
  if (w) {
    load_pack<Access::cached>(p, w + v * N);
  } else {
    float ones[N];
#pragma unroll
    for (int e = 0; e < N; ++e) ones[e] = 1.f;
    p = pack_of<T, N>(ones);
  }
}

// Shared-memory accumulator slots through volatile accesses: kept in program order, so the
// compiler cannot hoist every slot's load ahead of the arithmetic (a register per accumulated
// element, the occupancy the slots exist to save).
template <int C>
__device__ __forceinline__ FChunk<C> acc_load(const FChunk<C>* p) {
  FChunk<C> r;
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  if constexpr (C == 4)
    asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(r.v[0]), "=f"(r.v[1]), "=f"(r.v[2]), "=f"(r.v[3]) : "r"(a));
  else if constexpr (C == 2)
    asm volatile("ld.volatile.shared.v2.f32 {%0, %1}, [%2];" : "=f"(r.v[0]), "=f"(r.v[1]) : "r"(a));
  else
    asm volatile("ld.volatile.shared.f32 %0, [%1];" : "=f"(r.v[0]) : "r"(a));
  return r;
}
template <int C>
__device__ __forceinline__ void acc_store(FChunk<C>* p, const FChunk<C>& v) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  if constexpr (C == 4)
    asm volatile("st.volatile.shared.v4.f32 [%0], {%1, %2, %3, %4};"
                 :: "r"(a), "f"(v.v[0]), "f"(v.v[1]), "f"(v.v[2]), "f"(v.v[3]) : "memory");
  else if constexpr (C == 2)
    asm volatile("st.volatile.shared.v2.f32 [%0], {%1, %2};" :: "r"(a), "f"(v.v[0]), "f"(v.v[1]) : "memory");
  else
    asm volatile("st.volatile.shared.f32 [%0], %1;" :: "r"(a), "f"(v.v[0]) : "memory");
}

// ------------------------------------------------------------------ row reduction
// This thread's row group in the block and its lane in the group (tpr a power of two when
// several groups share a block: a shift, not a division).
struct GroupLane {
  int group, lane;
};
__device__ __forceinline__ GroupLane group_lane(int tpr, int gpb) {
  if (gpb == 1) return {0, static_cast<int>(threadIdx.x)};
  return {static_cast<int>(threadIdx.x) >> (__ffs(tpr) - 1), static_cast<int>(threadIdx.x) & (tpr - 1)};
}

// Calls f(row, valid, lane) for each row of this thread's group (valid: row < rows; a block's
// last group may have none), the blocks stepping over groups of gpb rows.
template <class Args, class F>
__device__ __forceinline__ void for_each_row(const Args& a, F&& f) {
  const GroupLane gl = group_lane(a.tpr, a.gpb);
  for (int64_t base = int64_t(blockIdx.x) * a.gpb; base < a.rows; base += int64_t(gridDim.x) * a.gpb) {
    const int64_t row = base + gl.group;
    f(row, row < a.rows, gl.lane);
  }
}

// v[k] summed over the 32 / n-lane groups of the warp (n a power of two): a butterfly, which
// leaves the same bits in every lane (each step adds the same two values, in either order).
template <int K>
__device__ __forceinline__ void warp_sum(float (&v)[K], int n = 32) {
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1)
    if (off < n)
#pragma unroll
      for (int k = 0; k < K; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], off);
}

// Sums v[0..K) over the tpr threads of this thread's group; every thread of the group gets the
// same sums. Groups wider than a warp are the whole block: the warp sums go through shared
// memory (double-buffered by `phase`: one barrier per reduction) and a second butterfly adds
// them in a fixed order. Every thread of the block must call it.
template <int K>
__device__ __forceinline__ void group_sum(float (&v)[K], int tpr, float* smem, int& phase) {
  warp_sum(v, tpr);
  if (tpr <= 32) return;
  float* buf = smem + phase * 32 * K;
  phase ^= 1;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < K; ++k) buf[k * 32 + warp] = v[k];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = lane < (tpr >> 5) ? buf[k * 32 + lane] : 0.f;
  warp_sum(v);
}

// ------------------------------------------------------------------ backward arithmetic
// With xc = x - mean (RMSNorm: x), g = dy * w and the row sums s_gx = sum(g * xc), s_g = sum(g)
// (LayerNorm only), dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) becomes
//   dx = rstd * g - c * xc - d,   c = rstd^3 * s_gx / dim,   d = rstd * s_g / dim:
// two fused multiply-adds per element after the reduction. Every operation is explicitly
// rounded, so no kernel contracts them differently: dx is bitwise the same from every kernel.
template <bool LN>
__device__ __forceinline__ float centered(float x, float mu) {
  return LN ? __fsub_rn(x, mu) : x;
}
struct DxCoef {
  float rs, c, d;
};
template <bool LN>
__device__ __forceinline__ DxCoef dx_coef(const float* sums, float rs, float inv_dim) {
  DxCoef k;
  k.rs = rs;
  // rstd * mean(g * xc) first: it is O(|g|), so the further factors of rstd cannot underflow
  // where rstd^3 alone would (rows with a very large variance).
  k.c = __fmul_rn(__fmul_rn(__fmul_rn(rs, __fmul_rn(sums[0], inv_dim)), rs), rs);
  k.d = LN ? __fmul_rn(rs, __fmul_rn(sums[LN ? 1 : 0], inv_dim)) : 0.f;
  return k;
}
template <bool LN>
__device__ __forceinline__ float dx_of(float g, float xc, const DxCoef& k) {
  return __fmaf_rn(-k.c, xc, LN ? __fmaf_rn(k.rs, g, -k.d) : __fmul_rn(k.rs, g));
}
// One element's part of the row sums dx needs (g = dy * w).
template <bool LN>
__device__ __forceinline__ void add_dx_sums(float* sums, float g, float xc) {
  sums[0] = __fmaf_rn(g, xc, sums[0]);
  if (LN) sums[LN ? 1 : 0] = __fadd_rn(sums[LN ? 1 : 0], g);
}
// dW's term: dy * xhat.
__device__ __forceinline__ float dw_term(float acc, float dy, float xc, float rs) {
  return __fmaf_rn(dy, __fmul_rn(xc, rs), acc);
}

// Pass 1 of a backward over elements [e0, e1) of one vector: their part of the row sums dx
// needs; param(e, dy, xc) adds the element's dW / dB terms where the variant has them.
template <bool LN, class T, int N, class Param>
__device__ __forceinline__ void add_row_terms(float* sums, const Pack<T, N>& dy, const Pack<T, N>& x,
                                              const Pack<T, N>& w, float mu, int e0, int e1, Param&& param) {
#pragma unroll
  for (int e = e0; e < e1; ++e) {
    const float d = elem(dy, e), xc = centered<LN>(elem(x, e), mu);
    add_dx_sums<LN>(sums, __fmul_rn(d, elem(w, e)), xc);
    param(e, d, xc);
  }
}
// Pass 2: dx of one vector from its row's coefficients, plus the residual gradient r when add_r.
template <bool LN, class T, int N>
__device__ __forceinline__ void dx_values(float (&out)[N], const Pack<T, N>& dy, const Pack<T, N>& x,
                                          const Pack<T, N>& w, float mu, const DxCoef& k, const Pack<T, N>& r,
                                          bool add_r) {
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const float d = elem(dy, e);
    out[e] = dx_of<LN>(__fmul_rn(d, elem(w, e)), centered<LN>(elem(x, e), mu), k);
    if (add_r) out[e] = __fadd_rn(out[e], elem(r, e));
  }
}

// ------------------------------------------------------------------ arguments
template <class T>
struct FwdArgs {
  T* y;
  T* r;               // fused add: x + residual written here (and normalised), else null
  float* mean;        // LayerNorm statistics (null: not kept)
  float* rstd;        // null: not kept
  const T* x;
  const T* res;       // fused add residual, else null
  const T* w;         // null: no scale
  const T* b;         // null: no shift
  int64_t rows;
  int dim, nv, tpr, gpb;
  float inv_dim, eps;
};

template <class T>
struct BwdArgs {
  T* dx;              // DX
  T* dw;              // DW: [dim]
  T* db;              // DB: [dim]
  float* partial;     // DW / DB: [gridDim.x, (DW + DB) * dim], the blocks' partial sums
  const T* dy;
  const T* x;         // DX or DW
  const T* w;         // DX; null: no scale
  const float* mean;  // LayerNorm, DX or DW
  const float* rstd;  // DX or DW
  const T* dres;      // DX, fused add: gradient of r added to dx; else null
  int64_t rows;
  int dim, nv, tpr, gpb;
  float inv_dim;
  bool evict_first;   // the row reads' L2 policy (RowRead)
};

// ------------------------------------------------------------------ dW / dB from the partials
// The last step of a backward that accumulates dW / dB (a co-resident grid). After the grid
// barrier the blocks sum the P partial rows column-wise: a block takes tiles of cw columns (the
// fewest, a power of two <= 32, that leave no block more than one tile), its threads split the
// rows (slot k adds rows k, k + slots, ...), a butterfly adds a warp's slots and one thread per
// column adds the warp sums in warp order: a fixed order, the same bits run to run. Columns
// [0, dim) are dW (or dB alone), [dim, 2 dim) dB. `scratch`: 32 floats a warp.
constexpr size_t kReduceScratch = 1024 * sizeof(float);  // for blocks of up to 1024 threads
template <class T, bool DW, bool DB>
__device__ __forceinline__ void reduce_partial_rows(const BwdArgs<T>& a, int P, float* scratch) {
  cooperative_groups::this_grid().sync();  // every partial row written and visible
  const int width = (int(DW) + int(DB)) * a.dim, blocks = gridDim.x;
  int cw = 1;
  while (cw < 32 && (width + cw - 1) / cw > blocks) cw <<= 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int slot = warp * (32 / cw) + lane / cw, slots = nw * (32 / cw);
  for (int tile = blockIdx.x; tile * cw < width; tile += blocks) {
    const int col = tile * cw + (lane & (cw - 1));
    float sum = 0.f;
    if (col < width)
#pragma unroll 8
      for (int p = slot; p < P; p += slots) sum += a.partial[int64_t(p) * width + col];
    for (int off = 16; off >= cw; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane < cw) scratch[warp * 32 + lane] = sum;
    __syncthreads();
    if (warp == 0 && lane < cw && col < width) {
      float t = 0.f;
      for (int j = 0; j < nw; ++j) t += scratch[j * 32 + lane];
      if (DW && col < a.dim) a.dw[col] = cvt<T>(t);
      else a.db[col - (DW ? a.dim : 0)] = cvt<T>(t);
    }
    __syncthreads();  // scratch is rewritten by the next tile
  }
}

}  // namespace tg::cuda::normk
