// The CUDA RMSNorm / LayerNorm kernels, shared by ops/cuda/rms_norm.cu and layer_norm.cu
// (LN selects LayerNorm; mean = 0 and no bias for RMSNorm).
//
// Layout of the work. A row of `dim` elements is split into `nv` vectors of VB bytes (16 when
// dim and every pointer allow it, else 8, else one element). A group of `tpr` threads owns a
// row (tpr aims at preferred_tpr(): 512, or 256 for a backward over 8-byte vectors); thread
// `lane` holds vectors lane, lane + tpr, ... (ITERS of them, a compile-time count, so the row
// lives in registers between the loads and the stores). A block holds `gpb` groups (several
// only for rows of <= 32 threads). Row reductions are a warp butterfly and, for rows wider than
// a warp, one shared-memory step and a second butterfly: a fixed order, deterministic.
//
// Backward, per row: the rstd (and mean) saved by forward make one reduction enough for dx
// (the formula is in "backward arithmetic" below). The kernels are compiled per <DX, DW, DB>.
// With dx, a thread's columns are the same for every row, so dW (sum of dy * xhat) and dB (sum
// of dy) accumulate per thread (registers when few, else the thread's own shared-memory slots)
// over the block's rows and are written once, as one partial row per block. Such a launch is
// persistent and co-resident (cooperative): after a grid barrier its blocks sum the partial
// rows column-wise in a fixed order and write dW / dB, in the same kernel. With DX only, none
// of that code exists and no partial buffer is allocated.
//
// Four backward kernels:
//  - norm_bwd_kernel: each thread loads its vectors of the row, two passes over the registers;
//    dx alone (one block per row of 16-byte vectors), and dx with dW / dB where the staged
//    kernel does not apply (rows not of 16-byte vectors, several rows a block, a pre-Hopper
//    build, TG_NORM_STAGED=0);
//  - norm_bwd_staged_kernel (dx with dW / dB, or dx alone where the register kernel fits one
//    block per multiprocessor; 16-byte rows; persistent): the bulk-copy engine keeps several
//    rows in flight in shared memory ahead of the block, so loads never wait on the reduction;
//    Hopper instructions: where the kernel was compiled for an older GPU its body is empty and
//    the planner never picks it (staged_supported);
//  - norm_bwd_loop_kernel: rows wider than the register kernels take (runtime loops, the row
//    re-read from L2 for the second pass, dW accumulated in the block's partial row);
//  - norm_bwd_param_kernel: dW / dB without dx (x needs no gradient): no row sums, so the rows
//    tile in two dimensions and the partial rows are a few per column tile.
// Small launches read their rows with an L2 evict-first policy (RowRead, read_evict_first).
// TG_NORM_STAGED=0 turns the staged kernel off (benchmarks compare).
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "core/cuda/cuda_utils.cuh"
#include "core/trace.h"
#include "ops/rms_norm_kernels.h"

namespace tg::cuda::normk {

constexpr int kMaxIters = 16;    // vectors per thread per row in the register-resident kernels
constexpr int kMaxTpr = 512;     // threads per row in the register-resident kernels
constexpr int kLoopTpr = 1024;   // threads per row in the looping kernels
constexpr int kGroupBlock = 256; // block size when several rows share a block
// The register-resident kernels' launch bounds: the widest block an ITERS instantiation is
// launched with, and how many such blocks must fit on a multiprocessor (a register cap: 32 per
// thread with 1 vector per thread, so four 512-thread blocks fit; 64 with 2, 128 with 4 or 8,
// 255 with 16; a backward with dx that accumulates dW / dB gets 64 with 1 vector, as 32 spills).
constexpr int max_tpr(int iters) { return iters >= 16 ? 256 : kMaxTpr; }
// (Three blocks with 2 vectors, 40 registers, spilled for bf16 and ran slower on the H200: bf16
// RMSNorm 8192x8192 dx alone 119.7 us against 100.5 with two blocks and 56 registers.)
constexpr int min_blocks(int iters, bool accumulates = false) {
  return iters <= 1 ? (accumulates ? 2 : 4) : iters == 2 ? 2 : 1;
}

// ------------------------------------------------------------------ element conversion
template <class T>
__device__ __forceinline__ T from_f(float v) {
  if constexpr (std::is_same_v<T, bf16>) {
    bf16 r;
    r.bits = __bfloat16_as_ushort(__float2bfloat16_rn(v));  // round to nearest even, as on the CPU
    return r;
  } else {
    return v;
  }
}

// ------------------------------------------------------------------ vector access
// N elements of T loaded / stored as one access of N * sizeof(T) bytes, held as 32-bit words
// (a lone bf16 as 16 bits). bf16 elements as 16-bit members made the compiler split each
// loaded word into halves and join them again at every use: the dx kernel issued 2.1 times the
// instructions of the same kernel on words (H200, ncu: 65.9M against 31.6M, 145 against 98 us).
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  static constexpr int kBytes = sizeof(T) * N;
  using Word = std::conditional_t<kBytes >= 4, unsigned, unsigned short>;
  Word w[kBytes >= 4 ? kBytes / 4 : 1];
};
// C floats accessed as one (shared-memory accumulator slots, partial-row stores).
template <int C>
struct alignas(4 * C) FChunk {
  float v[C];
};

template <int B>
struct RawOf;
template <>
struct RawOf<16> { using type = int4; };
template <>
struct RawOf<8> { using type = int2; };
template <>
struct RawOf<4> { using type = int; };
template <>
struct RawOf<2> { using type = short; };

// Whole-pack global accesses, by cache hint:
//  - Access::stream (the forward's reads and writes): read or written once, evict first, so w
//    and b keep their L2 lines;
//  - Access::plain (dx writes; the looping and staged kernels' row reads): measured on the
//    H200 (bf16 RMSNorm 8192x8192, dx only) 98 us with plain row reads and dx writes, 109 us
//    with the streaming hint on both, 107 reading through the read-only path;
//  - Access::cached (w, b: read by every block): the read-only path.
enum class Access { stream, plain, cached };
// The register and dW / dB kernels read the backward's read-once rows (dy, x, the residual
// gradient) with an L2 evict-first policy where the launch moves little data for the L2's size
// (read_evict_first, host side): the lines it reads once are then the first to go, and the
// lines already in L2 (often dirty: a previous kernel's output, whose write-back would otherwise
// share this launch's DRAM time) stay. Elsewhere plain loads: an evict-normal policy instead
// took dW alone 10-15% longer from 537 MB up on the H200 (run 26), though the dx kernels ran
// the same with it.
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
// A whole-pack global load of a read-once row element, under rr's policy.
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
template <Access A, class T, int N>
__device__ __forceinline__ void load(Pack<T, N>& out, const T* p) {
  using R = typename RawOf<sizeof(T) * N>::type;
  const R* q = reinterpret_cast<const R*>(p);
  R r;
  if constexpr (A == Access::stream) r = __ldcs(q);
  else if constexpr (A == Access::cached) r = __ldg(q);
  else r = *q;
  memcpy(&out, &r, sizeof r);
}
template <Access A, class T, int N>
__device__ __forceinline__ void store(T* p, const Pack<T, N>& v) {
  static_assert(A != Access::cached, "stores have no read-only path");
  using R = typename RawOf<sizeof(T) * N>::type;
  R r;
  memcpy(&r, &v, sizeof r);
  if constexpr (A == Access::stream) __stcs(reinterpret_cast<R*>(p), r);
  else *reinterpret_cast<R*>(p) = r;
}
template <class T, int N>
__device__ __forceinline__ void zero_pack(Pack<T, N>& p) {
  memset(&p, 0, sizeof p);
}

// Element e of a pack, widened to float: bf16 is the high half of a float, so an element is
// its word shifted (even e) or masked (odd e).
template <int N>
__device__ __forceinline__ float elem(const Pack<bf16, N>& p, int e) {
  if constexpr (N == 1) return __uint_as_float(static_cast<unsigned>(p.w[0]) << 16);
  else return __uint_as_float(e % 2 ? p.w[e / 2] & 0xffff0000u : p.w[e / 2] << 16);
}
template <int N>
__device__ __forceinline__ float elem(const Pack<float, N>& p, int e) {
  return __uint_as_float(p.w[e]);
}
// N floats rounded to T (nearest even) as one pack: bf16 two at a time (one instruction a pair).
template <class T, int N>
__device__ __forceinline__ Pack<T, N> pack_of(const float (&f)[N]) {
  Pack<T, N> p;
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int e = 0; e < N; ++e) p.w[e] = __float_as_uint(f[e]);
  } else if constexpr (N == 1) {
    p.w[0] = from_f<bf16>(f[0]).bits;
  } else {
#pragma unroll
    for (int e = 0; e < N; e += 2) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(f[e], f[e + 1]);  // f[e] in the low half
      memcpy(&p.w[e / 2], &h, 4);
    }
  }
  return p;
}

// w's vector v, or ones for a norm without a weight: dy * w is then one multiply per element
// with no per-element branch (the select cost the dx kernel 8 registers; d * 1 is exact, so dx
// is the same either way).
template <class T, int N>
__device__ __forceinline__ void load_weight(Pack<T, N>& p, const T* w, int v) {
  if (w) {
    load<Access::cached>(p, w + v * N);
  } else {
    float ones[N];
#pragma unroll
    for (int e = 0; e < N; ++e) ones[e] = 1.f;
    p = pack_of<T, N>(ones);
  }
}

// Shared-memory accumulator slot access as volatile loads / stores: kept in program order, so
// the compiler cannot hoist every slot's load ahead of the arithmetic (which would hold a
// float per accumulated element in registers and cost the occupancy the slots exist to save).
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
// This thread's row group in the block and its lane in the group. Several groups share a block
// only for rows of <= 32 threads, whose tpr plan() makes a power of two: a shift, not a division.
struct GroupLane {
  int group, lane;
};
__device__ __forceinline__ GroupLane group_lane(int tpr, int gpb) {
  if (gpb == 1) return {0, static_cast<int>(threadIdx.x)};
  return {static_cast<int>(threadIdx.x) >> (__ffs(tpr) - 1), static_cast<int>(threadIdx.x) & (tpr - 1)};
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
// same sums, whichever kernel calls it. Groups of <= 32 threads: a butterfly within the warp.
// Wider groups are the whole block (plan() gives such rows a block each): each warp's sum goes
// through shared memory (double-buffered by `phase`, so one barrier per reduction), then every
// warp loads the warp sums, one a lane, and adds them with a second butterfly (fixed order).
// Every thread of the block must call it (it may synchronise).
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
// two fused multiply-adds per element after the reduction. Every kernel uses these helpers with
// explicitly rounded operations, so no kernel or variant contracts them differently: dx is
// bitwise the same whichever kernel computed it.
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
  // rstd * mean(g * xc) first: it is O(|g|), so the two further factors of rstd cannot
  // underflow where rstd^3 alone would (rows with a very large variance).
  k.c = __fmul_rn(__fmul_rn(__fmul_rn(rs, __fmul_rn(sums[0], inv_dim)), rs), rs);
  k.d = LN ? __fmul_rn(rs, __fmul_rn(sums[LN ? 1 : 0], inv_dim)) : 0.f;
  return k;
}
template <bool LN>
__device__ __forceinline__ float dx_of(float g, float xc, const DxCoef& k) {
  return __fmaf_rn(-k.c, xc, LN ? __fmaf_rn(k.rs, g, -k.d) : __fmul_rn(k.rs, g));
}
// One element's part of the row sums dx needs.
template <bool LN>
__device__ __forceinline__ void add_dx_sums(float* sums, float g, float xc) {
  sums[0] = __fmaf_rn(g, xc, sums[0]);
  if (LN) sums[LN ? 1 : 0] = __fadd_rn(sums[LN ? 1 : 0], g);
}
// dW's term: dy * xhat.
__device__ __forceinline__ float dw_term(float acc, float dy, float xc, float rs) {
  return __fmaf_rn(dy, __fmul_rn(xc, rs), acc);
}

// ------------------------------------------------------------------ arguments
struct FwdArgs {
  void* y;
  void* r;            // fused add: x + residual written here (and normalised), else null
  float* mean;        // LayerNorm statistics (null: not kept)
  float* rstd;        // null: not kept
  const void* x;
  const void* res;    // fused add residual, else null
  const void* w;      // null: no scale
  const void* b;      // null: no shift
  int64_t rows;
  int dim, nv, tpr, gpb;
  float inv_dim, eps;
};

struct BwdArgs {
  void* dx;           // DX
  void* dw;           // DW: [dim]
  void* db;           // DB: [dim]
  float* partial;     // DW / DB: [gridDim.x, (DW + DB) * dim], the blocks' partial sums
  const void* dy;
  const void* x;      // DX or DW
  const void* w;      // DX; null: no scale
  const float* mean;  // LayerNorm, DX or DW
  const float* rstd;  // DX or DW
  const void* dres;   // DX, fused add: gradient of r added to dx; else null
  int64_t rows;
  int dim, nv, tpr, gpb;
  float inv_dim;
  bool evict_first;   // the row reads' L2 policy (RowRead)
};

// ------------------------------------------------------------------ dW / dB from the partials
// The last step of a backward that accumulates dW / dB (its grid is co-resident: a cooperative
// launch). The blocks have written the P partial rows of their sums (one a block, or one a row
// split for norm_bwd_param_kernel); after the grid barrier the blocks sum them column-wise. A
// block takes tiles of cw columns, cw the fewest (a power of two, <= 32) that leave no block
// more than one tile, so one round of loads where the grid allows; its threads split the P rows
// (thread slot k adds rows k, k + slots, ...), a butterfly adds the slots of a warp, and one
// thread per column adds the warp sums in warp order. A fixed order for a given launch shape:
// dW / dB are the same bits run to run. Columns [0, dim) are dW (or dB alone), [dim, 2 dim) dB.
// `scratch`: 32 floats a warp. Memory: reads P * width * 4 bytes (just written, from L2),
// writes width * sizeof(T). On the H200 (bench/RESULTS.md, session 7), at width 4096 on 264
// blocks: tiles of 8 columns, two rounds a block, took 3.6 us after the barrier, one round 2.1;
// 16-byte loads timed the same end to end but took the staged LayerNorm kernel from 72
// registers to 87 (one block a multiprocessor instead of two).
constexpr size_t kReduceScratch = 1024 * sizeof(float);  // for blocks of up to 1024 threads
template <class T, bool DW, bool DB>
__device__ __forceinline__ void reduce_partial_rows(const BwdArgs& a, int P, float* scratch) {
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
      if (DW && col < a.dim) static_cast<T*>(a.dw)[col] = from_f<T>(t);
      else static_cast<T*>(a.db)[col - (DW ? a.dim : 0)] = from_f<T>(t);
    }
    __syncthreads();  // scratch is rewritten by the next tile
  }
}

// ------------------------------------------------------------------ forward
// y = (x - mean) * rstd * w + b for each row, with rstd = 1 / sqrt(mean((x - mean)^2) + eps)
// (RMSNorm: mean = 0). Fused add first writes r = x + residual (rounded to T) and normalises r.
// Memory per row: reads dim * sizeof(T) (x; twice that with a residual), writes dim * sizeof(T)
// (y; twice with r) + 4 or 8 bytes of statistics. w and b are read once per thread, not per row.
template <class T, int N, int ITERS, bool LN>
__global__ void __launch_bounds__(max_tpr(ITERS), min_blocks(ITERS)) norm_fwd_kernel(FwdArgs a) {
  using P = Pack<T, N>;
  __shared__ float smem[2 * 32];
  const T* x = static_cast<const T*>(a.x);
  const T* res = static_cast<const T*>(a.res);
  const T* w = static_cast<const T*>(a.w);
  const T* b = static_cast<const T*>(a.b);
  T* y = static_cast<T*>(a.y);
  T* r = static_cast<T*>(a.r);
  const GroupLane gl = group_lane(a.tpr, a.gpb);
  const int group = gl.group, lane = gl.lane;
  int phase = 0;
  for (int64_t base = int64_t(blockIdx.x) * a.gpb; base < a.rows; base += int64_t(gridDim.x) * a.gpb) {
    const int64_t row = base + group;
    const bool valid = row < a.rows;
    const int64_t off = row * a.dim;
    P xv[ITERS];
    bool in[ITERS];
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      const int v = lane + i * a.tpr;
      in[i] = valid && v < a.nv;
      if (in[i]) load<Access::stream>(xv[i], x + off + v * N);
      else zero_pack(xv[i]);
    }
    if (res) {
      P rv[ITERS];
#pragma unroll
      for (int i = 0; i < ITERS; ++i) {
        const int v = lane + i * a.tpr;
        if (in[i]) load<Access::stream>(rv[i], res + off + v * N);
        else zero_pack(rv[i]);
      }
#pragma unroll
      for (int i = 0; i < ITERS; ++i) {
        float sum[N];
#pragma unroll
        for (int e = 0; e < N; ++e) sum[e] = elem(xv[i], e) + elem(rv[i], e);
        xv[i] = pack_of<T, N>(sum);
        if (in[i]) store<Access::stream>(r + off + (lane + i * a.tpr) * N, xv[i]);
      }
    }
    float mu = 0.f;
    if constexpr (LN) {
      float s[1] = {0.f};
#pragma unroll
      for (int i = 0; i < ITERS; ++i)
#pragma unroll
        for (int e = 0; e < N; ++e) s[0] += elem(xv[i], e);
      group_sum(s, a.tpr, smem, phase);
      mu = s[0] * a.inv_dim;
    }
    float ss[1] = {0.f};
#pragma unroll
    for (int i = 0; i < ITERS; ++i)
      if (in[i])
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const float d = elem(xv[i], e) - mu;
          ss[0] = fmaf(d, d, ss[0]);
        }
    group_sum(ss, a.tpr, smem, phase);
    const float rs = 1.f / sqrtf(ss[0] * a.inv_dim + a.eps);
    if (valid && lane == 0) {
      if (a.rstd) a.rstd[row] = rs;
      if (LN && a.mean) a.mean[row] = mu;
    }
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      if (!in[i]) continue;
      const int v = lane + i * a.tpr;
      P wv, bv;
      if (w) load<Access::cached>(wv, w + v * N);
      if (LN && b) load<Access::cached>(bv, b + v * N);
      float out[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        float f = (elem(xv[i], e) - mu) * rs;
        if (w) f = f * elem(wv, e);
        if (LN && b) f = f + elem(bv, e);
        out[e] = f;
      }
      store<Access::stream>(y + off + v * N, pack_of<T, N>(out));
    }
  }
}

// Looping forward for rows too wide for registers: pass 1 sums (x, or x + residual, written to
// r), pass 2 (LayerNorm) the squared deviations, pass 3 writes y. Later passes re-read the row
// (mostly from L2): per row reads 2-3 * dim * sizeof(T) from cache, dim * sizeof(T) from memory.
template <class T, int N, bool LN>
__global__ void __launch_bounds__(1024) norm_fwd_loop_kernel(FwdArgs a) {
  using P = Pack<T, N>;
  __shared__ float smem[2 * 32];
  const T* x = static_cast<const T*>(a.x);
  const T* res = static_cast<const T*>(a.res);
  const T* w = static_cast<const T*>(a.w);
  const T* b = static_cast<const T*>(a.b);
  T* y = static_cast<T*>(a.y);
  T* r = static_cast<T*>(a.r);
  const GroupLane gl = group_lane(a.tpr, a.gpb);
  const int group = gl.group, lane = gl.lane;
  int phase = 0;
  for (int64_t base = int64_t(blockIdx.x) * a.gpb; base < a.rows; base += int64_t(gridDim.x) * a.gpb) {
    const int64_t row = base + group;
    const bool valid = row < a.rows;
    const int64_t off = row * a.dim;
    const T* src = res ? r : x;  // what gets normalised
    float s[1] = {0.f};
    for (int v = lane; valid && v < a.nv; v += a.tpr) {
      P xv;
      load<Access::stream>(xv, x + off + v * N);
      if (res) {
        P rv;
        load<Access::stream>(rv, res + off + v * N);
        float sum[N];
#pragma unroll
        for (int e = 0; e < N; ++e) sum[e] = elem(xv, e) + elem(rv, e);
        xv = pack_of<T, N>(sum);
        *reinterpret_cast<P*>(r + off + v * N) = xv;
      }
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float f = elem(xv, e);
        s[0] = LN ? s[0] + f : fmaf(f, f, s[0]);
      }
    }
    group_sum(s, a.tpr, smem, phase);
    float mu = 0.f, ms = s[0] * a.inv_dim;
    if constexpr (LN) {
      mu = s[0] * a.inv_dim;
      float q[1] = {0.f};
      for (int v = lane; valid && v < a.nv; v += a.tpr) {
        const P xv = *reinterpret_cast<const P*>(src + off + v * N);
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const float d = elem(xv, e) - mu;
          q[0] = fmaf(d, d, q[0]);
        }
      }
      group_sum(q, a.tpr, smem, phase);
      ms = q[0] * a.inv_dim;
    }
    const float rs = 1.f / sqrtf(ms + a.eps);
    if (valid && lane == 0) {
      if (a.rstd) a.rstd[row] = rs;
      if (LN && a.mean) a.mean[row] = mu;
    }
    for (int v = lane; valid && v < a.nv; v += a.tpr) {
      const P xv = *reinterpret_cast<const P*>(src + off + v * N);
      P wv, bv;
      if (w) load<Access::cached>(wv, w + v * N);
      if (LN && b) load<Access::cached>(bv, b + v * N);
      float out[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        float f = (elem(xv, e) - mu) * rs;
        if (w) f = f * elem(wv, e);
        if (LN && b) f = f + elem(bv, e);
        out[e] = f;
      }
      store<Access::stream>(y + off + v * N, pack_of<T, N>(out));
    }
  }
}

// ------------------------------------------------------------------ backward
// One pass over x and dy computing dx and what <DW, DB> asks besides:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (+ dres), g = dy * w
//   DW: this block's sum over its rows of dy * xhat   -> partial row blockIdx.x
//   DB: this block's sum over its rows of dy           -> partial row blockIdx.x
// Memory per row (bytes, T the element size): reads dy, x (dim*T each), the statistics (4 or
// 8), dres (dim*T, fused add with r's gradient); writes dx (dim*T).
// Per block, once: reads w (dim*T); writes (DW + DB) * dim * 4 bytes of partials.
// Launched with one block per row group for dx alone (the hardware keeps several rows in
// flight per multiprocessor), persistent when it accumulates dW / dB over the block's rows.
// dx of one row does not depend on <DW, DB> or on the kernel (the helpers above, the same
// threads per row and the same summation order): the frozen and unfrozen variants give bitwise
// the same dx.
template <class T, int N, int ITERS, bool LN, bool DW, bool DB, bool RES>
__global__ void __launch_bounds__(max_tpr(ITERS), min_blocks(ITERS, DW || DB)) norm_bwd_kernel(BwdArgs a) {
  using P = Pack<T, N>;
  __shared__ float smem[2 * 32 * 2];
  const T* dy = static_cast<const T*>(a.dy);
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  const T* dres = static_cast<const T*>(a.dres);
  T* dx = static_cast<T*>(a.dx);
  const GroupLane gl = group_lane(a.tpr, a.gpb);
  const int group = gl.group, lane = gl.lane;
  const RowRead rr = row_read(a.evict_first);
  int phase = 0;
  // dW / dB accumulators: shared memory, each thread its own slots (no atomics, no conflicts:
  // slot (part, i, q) of the group's region is an array over the group's lanes).
  constexpr int PARTS = int(DW) + int(DB), C = N < 4 ? N : 4, NC = N / C;
  // Few accumulated elements per thread: registers; more: the shared-memory slots.
  constexpr bool kRegAcc = ITERS * N * PARTS <= 8;
  [[maybe_unused]] float wreg[DW && kRegAcc ? ITERS : 1][DW && kRegAcc ? N : 1] = {};
  [[maybe_unused]] float breg[DB && kRegAcc ? ITERS : 1][DB && kRegAcc ? N : 1] = {};
  using FC = FChunk<C>;
  extern __shared__ float4 acc_smem[];
  [[maybe_unused]] FC* acc = reinterpret_cast<FC*>(acc_smem) + size_t(group) * PARTS * ITERS * NC * a.tpr;
  auto slot = [&](int part, int i, int q) -> FC& { return acc[((part * ITERS + i) * NC + q) * a.tpr + lane]; };
  if constexpr (PARTS > 0 && !kRegAcc)
#pragma unroll
    for (int part = 0; part < PARTS; ++part)
#pragma unroll
      for (int i = 0; i < ITERS; ++i)
#pragma unroll
        for (int q = 0; q < NC; ++q) slot(part, i, q) = FC{};

  for (int64_t base = int64_t(blockIdx.x) * a.gpb; base < a.rows; base += int64_t(gridDim.x) * a.gpb) {
    const int64_t row = base + group;
    const bool valid = row < a.rows;
    const int64_t off = row * a.dim;
    P dyv[ITERS], xv[ITERS], wv[ITERS];
    bool in[ITERS];
    // Issue every load of the row before the first use; zeros outside it add nothing.
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      const int v = lane + i * a.tpr;
      in[i] = valid && v < a.nv;
      if (in[i]) {
        load_row(dyv[i], dy + off + v * N, rr);
        load_row(xv[i], x + off + v * N, rr);
        load_weight(wv[i], w, v);
      } else {
        zero_pack(dyv[i]);
        zero_pack(xv[i]);
        zero_pack(wv[i]);
      }
    }
    float rs = 0.f, mu = 0.f;
    if (valid) {
      rs = a.rstd[row];
      if (LN) mu = a.mean[row];
    }
    // Pass 1 over the registers: the sums dx needs, and this row's dW / dB terms.
    float sums[LN ? 2 : 1] = {};
#pragma unroll
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
      for (int q = 0; q < NC; ++q) {
        [[maybe_unused]] FC aw, ab;
        if constexpr (DW && !kRegAcc) aw = acc_load(&slot(0, i, q));
        if constexpr (DB && !kRegAcc) ab = acc_load(&slot(PARTS - 1, i, q));
        if constexpr (DW && kRegAcc)
#pragma unroll
          for (int k = 0; k < C; ++k) aw.v[k] = wreg[i][q * C + k];
        if constexpr (DB && kRegAcc)
#pragma unroll
          for (int k = 0; k < C; ++k) ab.v[k] = breg[i][q * C + k];
#pragma unroll
        for (int k = 0; k < C; ++k) {
          const int e = q * C + k;
          const float d = elem(dyv[i], e), xc = centered<LN>(elem(xv[i], e), mu);
          add_dx_sums<LN>(sums, __fmul_rn(d, elem(wv[i], e)), xc);
          if constexpr (DW) aw.v[k] = dw_term(aw.v[k], d, xc, rs);
          if constexpr (DB) ab.v[k] = __fadd_rn(ab.v[k], d);
        }
        if constexpr (DW && !kRegAcc) acc_store(&slot(0, i, q), aw);
        if constexpr (DB && !kRegAcc) acc_store(&slot(PARTS - 1, i, q), ab);
        if constexpr (DW && kRegAcc)
#pragma unroll
          for (int k = 0; k < C; ++k) wreg[i][q * C + k] = aw.v[k];
        if constexpr (DB && kRegAcc)
#pragma unroll
          for (int k = 0; k < C; ++k) breg[i][q * C + k] = ab.v[k];
      }
    // Pass 2: dx from the row's sums.
    group_sum(sums, a.tpr, smem, phase);
    const DxCoef kc = dx_coef<LN>(sums, rs, a.inv_dim);
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      if (!in[i]) continue;
      const int v = lane + i * a.tpr;
      P rv;
      if constexpr (RES) load_row(rv, dres + off + v * N, rr);
      float out[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float d = elem(dyv[i], e);
        out[e] = dx_of<LN>(__fmul_rn(d, elem(wv[i], e)), centered<LN>(elem(xv[i], e), mu), kc);
        if constexpr (RES) out[e] = __fadd_rn(out[e], elem(rv, e));
      }
      store<Access::plain>(dx + off + v * N, pack_of<T, N>(out));
    }
  }

  if constexpr (PARTS > 0) {
    if constexpr (kRegAcc)  // into the slots, for the common combine below
#pragma unroll
      for (int part = 0; part < PARTS; ++part)
#pragma unroll
        for (int i = 0; i < ITERS; ++i)
#pragma unroll
          for (int q = 0; q < NC; ++q) {
            FC t;
#pragma unroll
            for (int k = 0; k < C; ++k) {
              if constexpr (DW) {
                if (part == 0) t.v[k] = wreg[i][q * C + k];
              }
              if constexpr (DB) {
                if (part == PARTS - 1) t.v[k] = breg[i][q * C + k];
              }
            }
            slot(part, i, q) = t;
          }
    // One partial row per block: group 0 adds the groups' accumulators in group order.
    if (a.gpb > 1) __syncthreads();
    if (group == 0) {
      const size_t stride = size_t(PARTS) * ITERS * NC * a.tpr;  // between groups' regions
      float* prow = a.partial + int64_t(blockIdx.x) * PARTS * a.dim;
#pragma unroll
      for (int part = 0; part < PARTS; ++part)
#pragma unroll
        for (int i = 0; i < ITERS; ++i) {
          const int v = lane + i * a.tpr;
          if (v >= a.nv) continue;
#pragma unroll
          for (int q = 0; q < NC; ++q) {
            FC t = slot(part, i, q);
            for (int gi = 1; gi < a.gpb; ++gi) {
              const FC o = (&slot(part, i, q))[gi * stride];
#pragma unroll
              for (int k = 0; k < C; ++k) t.v[k] += o.v[k];
            }
            *reinterpret_cast<FC*>(prow + part * a.dim + v * N + q * C) = t;
          }
        }
    }
    __syncthreads();  // the slots are the reduction's scratch now
    reduce_partial_rows<T, DW, DB>(a, gridDim.x, reinterpret_cast<float*>(acc_smem));
  }
}

// ------------------------------------------------------------------ backward, staged rows
// The same computation as norm_bwd_kernel (a persistent grid, each block accumulating dW / dB
// over its rows when asked), for rows whose x and dy are 16-byte aligned and fit a few times in
// shared memory (gpb == 1). Instead of each thread loading its vectors when the block
// reaches the row, thread 0 keeps `stages` rows in flight ahead of the block with the bulk-copy
// engine (cp.async.bulk, completing on a per-stage mbarrier): while the block reduces and
// writes row k, rows k+1 .. k+stages-1 are arriving, so memory never waits on the reduction.
// The block copies row k's vectors from shared memory to registers and proceeds with the same
// per-row arithmetic as norm_bwd_kernel (so dx is bitwise the same as there); w stays in
// registers for the whole kernel, rstd / mean of the next row are fetched a row ahead.
// Memory per row: as norm_bwd_kernel (x and dy through shared memory, read once from DRAM).
__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
// Global -> shared bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned).
// No L2 policy here: with an evict-first policy the staged kernel took LayerNorm bf16 8192x3584
// 86 us instead of 66 (H200, runs 25 and 27), and so it did with a plain copy chosen at run time
// beside the hinted one; the gain elsewhere was at most 2.5% (bf16 RMSNorm 2048x4096).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

constexpr int kMaxStages = 8;
// A thread of the staged kernel holds at most this many elements of a row (its dW / dB
// accumulators stay in registers: more spill); wider rows take norm_bwd_kernel.
constexpr int kStagedMaxElems = 16;
// Two blocks per multiprocessor (64 registers a thread) when a thread holds one vector of the
// row and keeps at most 16 floats beyond it (dW / dB accumulators, the residual gradient's
// elements), or two vectors and fewer than 16 floats; otherwise one block, rather than spilling
// more. (LayerNorm bf16 with dW and dB at one vector a thread: 64 registers and 16 bytes of
// spill; left to 72 registers it ran one 512-thread block a multiprocessor.)
constexpr int staged_min_blocks(int iters, int kept) {
  return (iters == 1 ? kept <= 16 : iters == 2 && kept < 16) ? 2 : 1;
}
constexpr int kStageHeader = 128;  // the mbarriers, before the first stage

template <class T, int N, int ITERS, bool LN, bool DW, bool DB, bool RES>
__global__ void __launch_bounds__(kMaxTpr, staged_min_blocks(ITERS, ITERS * N * (int(DW) + int(DB) + int(RES))))
    norm_bwd_staged_kernel(BwdArgs a, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  // Compiled for a GPU without the bulk-copy engine: staged_supported() keeps the planner away.
  __trap();
#else
  using P = Pack<T, N>;
  extern __shared__ __align__(128) unsigned char staged_smem[];
  __shared__ float smem[2 * 32 * 2];
  uint64_t* bars = reinterpret_cast<uint64_t*>(staged_smem);
  const T* dy = static_cast<const T*>(a.dy);
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  const T* dres = static_cast<const T*>(a.dres);
  T* dx = static_cast<T*>(a.dx);
  const int lane = threadIdx.x;  // one row per block: the group is the block
  const unsigned row_bytes = unsigned(a.dim) * sizeof(T);
  const unsigned stage_bytes = 2 * row_bytes;  // x, then dy
  auto stage = [&](int s) { return staged_smem + kStageHeader + size_t(s) * stage_bytes; };
  int phase = 0;
  const int64_t first = blockIdx.x, step = gridDim.x;
  const int64_t mine = first < a.rows ? (a.rows - first + step - 1) / step : 0;
  auto issue = [&](int64_t k) {  // thread 0: row k of this block into stage k % stages
    const int s = int(k % stages);
    const int64_t row = first + k * step;
    unsigned char* dst = stage(s);
    mbar_expect_tx(&bars[s], stage_bytes);
    bulk_load(dst, x + row * a.dim, row_bytes, &bars[s]);
    bulk_load(dst + row_bytes, dy + row * a.dim, row_bytes, &bars[s]);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(&bars[s], 1);
    mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int64_t k = 0; k < mine && k < stages; ++k) issue(k);

  [[maybe_unused]] P wv[ITERS];
#pragma unroll
  for (int i = 0; i < ITERS; ++i) {
    const int v = lane + i * a.tpr;
    if (v < a.nv) load_weight(wv[i], w, v);
    else zero_pack(wv[i]);
  }
  [[maybe_unused]] float wacc[DW ? ITERS : 1][DW ? N : 1] = {};
  [[maybe_unused]] float bacc[DB ? ITERS : 1][DB ? N : 1] = {};
  float rs_next = 0.f, mu_next = 0.f;
  if (mine > 0) {
    rs_next = a.rstd[first];
    if (LN) mu_next = a.mean[first];
  }

  for (int64_t k = 0; k < mine; ++k) {
    const int s = int(k % stages);
    const int64_t row = first + k * step;
    const int64_t off = row * a.dim;
    const float rs = rs_next, mu = mu_next;
    if (k + 1 < mine) {  // a row ahead: its latency overlaps this row
      rs_next = a.rstd[row + step];
      if (LN) mu_next = a.mean[row + step];
    }
    [[maybe_unused]] P rv[ITERS];
    if constexpr (RES)
#pragma unroll
      for (int i = 0; i < ITERS; ++i) {
        const int v = lane + i * a.tpr;
        if (v < a.nv) load<Access::plain>(rv[i], dres + off + v * N);
      }
    mbar_wait(&bars[s], unsigned((k / stages) & 1));
    const T* xs = reinterpret_cast<const T*>(stage(s));
    const T* dys = xs + a.dim;
    P dyv[ITERS], xv[ITERS];
    bool in[ITERS];
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      const int v = lane + i * a.tpr;
      in[i] = v < a.nv;
      if (in[i]) {
        dyv[i] = *reinterpret_cast<const P*>(dys + v * N);
        xv[i] = *reinterpret_cast<const P*>(xs + v * N);
      } else {
        zero_pack(dyv[i]);
        zero_pack(xv[i]);
      }
    }
    float sums[LN ? 2 : 1] = {};
#pragma unroll
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float d = elem(dyv[i], e), xc = centered<LN>(elem(xv[i], e), mu);
        add_dx_sums<LN>(sums, __fmul_rn(d, elem(wv[i], e)), xc);
        if constexpr (DW) wacc[i][e] = dw_term(wacc[i][e], d, xc, rs);
        if constexpr (DB) bacc[i][e] = __fadd_rn(bacc[i][e], d);
      }
    // The reduction's barrier also means every thread has its vectors: the stage is refilled.
    group_sum(sums, a.tpr, smem, phase);
    if (threadIdx.x == 0 && k + stages < mine) {
      fence_proxy_async();
      issue(k + stages);
    }
    const DxCoef kc = dx_coef<LN>(sums, rs, a.inv_dim);
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      if (!in[i]) continue;
      float out[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float d = elem(dyv[i], e);
        out[e] = dx_of<LN>(__fmul_rn(d, elem(wv[i], e)), centered<LN>(elem(xv[i], e), mu), kc);
        if constexpr (RES) out[e] = __fadd_rn(out[e], elem(rv[i], e));
      }
      store<Access::plain>(dx + off + (lane + i * a.tpr) * N, pack_of<T, N>(out));
    }
  }
  if constexpr (DW || DB) {
    float* prow = a.partial + int64_t(blockIdx.x) * (int(DW) + int(DB)) * a.dim;
    constexpr int C = N < 4 ? N : 4;  // floats per store
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      const int v = lane + i * a.tpr;
      if (v >= a.nv) continue;
#pragma unroll
      for (int q = 0; q < N; q += C) {
        FChunk<C> tw, tb;
#pragma unroll
        for (int k = 0; k < C; ++k) {
          if constexpr (DW) tw.v[k] = wacc[i][q + k];
          if constexpr (DB) tb.v[k] = bacc[i][q + k];
        }
        if constexpr (DW) *reinterpret_cast<FChunk<C>*>(prow + v * N + q) = tw;
        if constexpr (DB) *reinterpret_cast<FChunk<C>*>(prow + (DW ? a.dim : 0) + v * N + q) = tb;
      }
    }
    // Every stage has been consumed: the stage memory is the reduction's scratch.
    reduce_partial_rows<T, DW, DB>(a, gridDim.x, reinterpret_cast<float*>(staged_smem + kStageHeader));
  }
#endif
}

// Looping backward for rows too wide for registers (gpb == 1): pass 1 the sums dx needs, pass 2
// dx and the dW/dB terms, accumulated straight into this block's partial row (which only this
// block touches, each column always by the same thread). Pass 2 re-reads x, dy (mostly L2).
template <class T, int N, bool LN, bool DW, bool DB>
__global__ void __launch_bounds__(1024) norm_bwd_loop_kernel(BwdArgs a) {
  using P = Pack<T, N>;
  __shared__ float smem[2 * 32 * 2];
  const T* dy = static_cast<const T*>(a.dy);
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  const T* dres = static_cast<const T*>(a.dres);
  T* dx = static_cast<T*>(a.dx);
  const int lane = threadIdx.x;
  int phase = 0;
  const int width = (int(DW) + int(DB)) * a.dim;
  [[maybe_unused]] float* prow = (DW || DB) ? a.partial + int64_t(blockIdx.x) * width : nullptr;
  if constexpr (DW || DB) {
    for (int c = lane; c < width; c += a.tpr) prow[c] = 0.f;
    __syncthreads();  // zeroed by element, accumulated below by vector: other threads' columns
  }
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const int64_t off = row * a.dim;
    const float rs = a.rstd[row], mu = LN ? a.mean[row] : 0.f;
    float sums[LN ? 2 : 1] = {};
    for (int v = lane; v < a.nv; v += a.tpr) {
      P xv, dyv, wv;
      load<Access::cached>(xv, x + off + v * N);
      load<Access::cached>(dyv, dy + off + v * N);
      load_weight(wv, w, v);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float d = elem(dyv, e);
        add_dx_sums<LN>(sums, __fmul_rn(d, elem(wv, e)), centered<LN>(elem(xv, e), mu));
      }
    }
    group_sum(sums, a.tpr, smem, phase);
    const DxCoef kc = dx_coef<LN>(sums, rs, a.inv_dim);
    for (int v = lane; v < a.nv; v += a.tpr) {
      P xv, dyv, wv, rv;
      load<Access::plain>(dyv, dy + off + v * N);
      load<Access::plain>(xv, x + off + v * N);
      load_weight(wv, w, v);
      if (dres) load<Access::plain>(rv, dres + off + v * N);
      float out[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float d = elem(dyv, e), xc = centered<LN>(elem(xv, e), mu);
        const int col = v * N + e;
        out[e] = dx_of<LN>(__fmul_rn(d, elem(wv, e)), xc, kc);
        if (dres) out[e] = __fadd_rn(out[e], elem(rv, e));
        if constexpr (DW) prow[col] = dw_term(prow[col], d, xc, rs);
        if constexpr (DB) prow[(DW ? a.dim : 0) + col] = __fadd_rn(prow[(DW ? a.dim : 0) + col], d);
      }
      store<Access::plain>(dx + off + v * N, pack_of<T, N>(out));
    }
  }
  if constexpr (DW || DB) {
    extern __shared__ float4 acc_smem[];
    reduce_partial_rows<T, DW, DB>(a, gridDim.x, reinterpret_cast<float*>(acc_smem));
  }
}

// ------------------------------------------------------------------ backward, dW / dB alone
// When x needs no gradient there are no row sums: rows are independent, so the work tiles in
// two dimensions rather than a row per block. A work item is a (column tile, row split) pair:
// the block's threads form cv columns (a power of two <= 32 of vectors, consecutive lanes on
// consecutive vectors) by RL = kParamBlock / cv row lanes, and row lane r of split s adds rows
// s * RL + r, stepping by splits * RL, with several rows' loads issued before their
// arithmetic. The block then adds its row lanes in order (shared memory) into row s of the
// partial buffer; after the grid barrier reduce_partial_rows sums the `splits` rows. The planner
// takes as many splits as fill the GPU once, so the partial buffer is a few rows per column
// tile rather than one per block (bf16 2048x4096: 33 rows, 0.5 MB; a block per row group made
// 528, 8.7 MB, written and read back in a pass that must move 34 MB).
// Memory: reads dy (rows * dim * T), x and the statistics (DW); writes splits * (DW + DB) *
// dim * 4 bytes of partials (read back from L2) and dim * T for each of dW, dB.
constexpr int kParamBlock = 256;
struct ParamGrid {
  int cv, tiles, splits;
};
template <class T, int N, bool LN, bool DW, bool DB>
__global__ void __launch_bounds__(kParamBlock, 4) norm_bwd_param_kernel(BwdArgs a, ParamGrid g) {
  using P = Pack<T, N>;
  constexpr int PARTS = int(DW) + int(DB);
  // Rows whose loads a thread issues before their arithmetic: 4, or 2 where the thread holds 16
  // accumulators (bf16 dW and dB), which with 4 rows spilled at the 64 registers that let four
  // blocks share a multiprocessor.
  constexpr int U = PARTS * N >= 16 ? 2 : 4;
  extern __shared__ float4 param_smem[];
  float* lanes = reinterpret_cast<float*>(param_smem);  // [RL][PARTS * N][cv]: the row lanes' sums
  const T* dy = static_cast<const T*>(a.dy);
  const T* x = static_cast<const T*>(a.x);
  const RowRead rr = row_read(a.evict_first);
  const int shift = __ffs(g.cv) - 1, RL = kParamBlock >> shift;
  const int cl = threadIdx.x & (g.cv - 1), rl = threadIdx.x >> shift;
  const int64_t step = int64_t(g.splits) * RL;
  for (int item = blockIdx.x; item < g.tiles * g.splits; item += gridDim.x) {
    const int tile = item % g.tiles, split = item / g.tiles;
    const int v = tile * g.cv + cl;
    float acc[PARTS][N] = {};
    // One row's terms: dW += dy * xhat (part 0), dB += dy (the last part).
    auto add = [&](const P& dyv, const P& xv, float rs, float mu) {
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float d = elem(dyv, e);
        if constexpr (DW) acc[0][e] = dw_term(acc[0][e], d, centered<LN>(elem(xv, e), mu), rs);
        if constexpr (DB) acc[PARTS - 1][e] = __fadd_rn(acc[PARTS - 1][e], d);
      }
    };
    // Row `row`'s loads (x and the statistics only for dW).
    auto fetch = [&](int64_t row, P& dyv, P& xv, float& rs, float& mu) {
      load_row(dyv, dy + row * a.dim + v * N, rr);
      if constexpr (DW) {
        load_row(xv, x + row * a.dim + v * N, rr);
        rs = a.rstd[row];
        if (LN) mu = a.mean[row];
      }
    };
    if (v < a.nv) {
      int64_t row = int64_t(split) * RL + rl;
      for (; row + (U - 1) * step < a.rows; row += U * step) {
        P dyv[U], xv[U];
        float rs[U] = {}, mu[U] = {};
#pragma unroll
        for (int u = 0; u < U; ++u) fetch(row + u * step, dyv[u], xv[u], rs[u], mu[u]);
#pragma unroll
        for (int u = 0; u < U; ++u) add(dyv[u], xv[u], rs[u], mu[u]);
      }
      for (; row < a.rows; row += step) {
        P dyv, xv;
        float rs = 0.f, mu = 0.f;
        fetch(row, dyv, xv, rs, mu);
        add(dyv, xv, rs, mu);
      }
    }
#pragma unroll
    for (int part = 0; part < PARTS; ++part)
#pragma unroll
      for (int e = 0; e < N; ++e) lanes[((rl * PARTS + part) * N + e) * g.cv + cl] = acc[part][e];
    __syncthreads();
    if (rl == 0 && v < a.nv) {
      float* prow = a.partial + int64_t(split) * PARTS * a.dim;
#pragma unroll
      for (int part = 0; part < PARTS; ++part)
#pragma unroll
        for (int e = 0; e < N; ++e) {
          float t = 0.f;
          for (int r = 0; r < RL; ++r) t += lanes[((r * PARTS + part) * N + e) * g.cv + cl];
          prow[part * a.dim + v * N + e] = t;
        }
    }
    __syncthreads();  // the lanes' slots are rewritten by the next item, or are the scratch below
  }
  reduce_partial_rows<T, DW, DB>(a, g.splits, lanes);
}

// ------------------------------------------------------------------ host side: launch plans
// Lets `fn` use `smem` bytes of dynamic shared memory (above 48 KB it must opt in), once per
// kernel, device and size.
inline void allow_smem(const void* fn, size_t smem, int device) {
  if (smem <= 48 * 1024) return;
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> done;
  std::lock_guard<std::mutex> lock(mu);
  size_t& have = done[{fn, device}];
  if (have >= smem) return;
  TG_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  have = smem;
}

// Resident blocks of `fn` per multiprocessor (cached per kernel, block size, smem and device).
inline int blocks_per_sm(const void* fn, int block, size_t smem, int device) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int64_t>, int> cache;
  allow_smem(fn, smem, device);
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_pair(fn, (int64_t(smem) * 2048 + block) * 64 + device);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int n = 0;
  TG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, block, smem));
  TG_CHECK(n >= 1, "norm", "a kernel configuration does not fit on the GPU (block ", block, ", ", smem,
           " bytes of shared memory)");
  return cache[key] = n;
}

// Threads per row the planner aims for at most (then more vectors per thread, up to
// kMaxIters): 512, and 256 for a backward over rows of 8-byte vectors. On the H200, same run
// each: for rows of 16-byte vectors 512 and 256 ran the same for dx alone (bf16 RMSNorm
// 8192x8192: 100.1 / 101.4 us) and 512 was faster with dW (110.0 / 115.4); for 8-byte vectors
// (bf16 8192x1500) 256 was faster in every variant but dW alone (RMS frozen 29.5 -> 27.5, full
// 42.4 -> 39.0; LayerNorm full 55.6 -> 42.0; dW alone 29.0 -> 29.6; 128: frozen 25.5 but full
// 44.5). The choice never depends on the mask, so frozen and unfrozen variants reduce a row in
// the same order (bitwise-identical dx). TG_NORM_TPR overrides it (benchmarks sweep it).
enum class Pass { forward, backward };
inline int preferred_tpr(int vb, Pass pass) {
  static const int forced = [] {
    const char* s = std::getenv("TG_NORM_TPR");
    const int t = s ? std::atoi(s) : 0;
    return t >= 32 && t <= kLoopTpr ? t : 0;  // above kMaxTpr: the looping kernels
  }();
  if (forced) return forced;
  return pass == Pass::backward && vb == 8 ? 256 : kMaxTpr;
}

struct Config {
  int vb = 0;     // bytes per vector access
  int iters = 0;  // vectors per thread (0: the looping kernels)
  int tpr = 0, gpb = 0, block = 0;
  int64_t nv = 0;  // vectors per row
};

inline bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The launch shape of `pass` for rows of `dim` elements of `esize` bytes whose pointers are
// `ptrs` (null entries ignored), aiming at preferred_tpr threads per row.
inline Config plan(int64_t dim, int esize, std::initializer_list<const void*> ptrs, Pass pass) {
  Config c;
  c.vb = 16;
  auto fits = [&](int vb) {
    if ((dim * esize) % vb) return false;
    for (const void* p : ptrs)
      if (p && !aligned(p, vb)) return false;
    return true;
  };
  while (c.vb > esize && !fits(c.vb)) c.vb = c.vb == 16 ? 8 : esize;
  c.nv = dim * esize / c.vb;
  const int pref = preferred_tpr(c.vb, pass);
  c.iters = 1;
  while (c.iters < kMaxIters && (c.nv + c.iters - 1) / c.iters > pref) c.iters *= 2;
  int64_t tpr = (c.nv + c.iters - 1) / c.iters;
  if (tpr > max_tpr(c.iters)) {  // too wide for registers
    c.iters = 0;
    c.tpr = kLoopTpr;
    c.gpb = 1;
  } else if (tpr <= 32) {
    int t = 1;
    while (t < tpr) t *= 2;
    c.tpr = t;
    c.gpb = kGroupBlock / t;
  } else {
    // A row per block: the dW / dB accumulators of a block are then one row's worth, which
    // keeps blocks small enough for several to share a multiprocessor's shared memory.
    c.tpr = static_cast<int>((tpr + 31) / 32 * 32);
    c.gpb = 1;
  }
  c.block = c.tpr * c.gpb;
  return c;
}

inline int grid_for(int64_t rows, const Config& c, const void* fn, size_t smem, int device) {
  const int64_t groups = (rows + c.gpb - 1) / c.gpb;
  const int64_t resident = int64_t(sm_count(device)) * blocks_per_sm(fn, c.block, smem, device);
  return static_cast<int>(groups < resident ? (groups < 1 ? 1 : groups) : resident);
}

// Calls f(std::integral_constant<int, N>, std::integral_constant<int, ITERS>) for the config's
// elements per vector and vectors per thread (ITERS 0: the looping kernels).
template <class T, class F>
void with_shape(const Config& c, F&& f) {
  auto by_iters = [&](auto n) {
    switch (c.iters) {
      case 1: return f(n, std::integral_constant<int, 1>{});
      case 2: return f(n, std::integral_constant<int, 2>{});
      case 4: return f(n, std::integral_constant<int, 4>{});
      case 8: return f(n, std::integral_constant<int, 8>{});
      case 16: return f(n, std::integral_constant<int, 16>{});
      default: return f(n, std::integral_constant<int, 0>{});
    }
  };
  if (c.vb == 16) return by_iters(std::integral_constant<int, 16 / int(sizeof(T))>{});
  if (c.vb == 8) return by_iters(std::integral_constant<int, 8 / int(sizeof(T))>{});
  return by_iters(std::integral_constant<int, 1>{});
}

template <class T, bool LN>
const void* fwd_kernel(const Config& c) {
  const void* fn = nullptr;
  with_shape<T>(c, [&](auto n, auto it) {
    constexpr int N = decltype(n)::value, IT = decltype(it)::value;
    if constexpr (IT == 0) fn = reinterpret_cast<const void*>(&norm_fwd_loop_kernel<T, N, LN>);
    else fn = reinterpret_cast<const void*>(&norm_fwd_kernel<T, N, IT, LN>);
  });
  return fn;
}

// The backward kernel with dx of a config: register-resident or looping.
template <class T, bool LN, bool DW, bool DB, bool RES>
const void* bwd_kernel(const Config& c) {
  const void* fn = nullptr;
  with_shape<T>(c, [&](auto n, auto it) {
    constexpr int N = decltype(n)::value, IT = decltype(it)::value;
    if constexpr (IT == 0) fn = reinterpret_cast<const void*>(&norm_bwd_loop_kernel<T, N, LN, DW, DB>);
    else fn = reinterpret_cast<const void*>(&norm_bwd_kernel<T, N, IT, LN, DW, DB, RES>);
  });
  return fn;
}

// ------------------------------------------------------------------ host side: launches
template <class T, bool LN>
void launch_forward(const Tensor& y, const Tensor& r, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                    const Tensor& res, const Tensor& w, const Tensor& b, double eps) {
  const int64_t dim = x.shape()[1], rows = x.shape()[0];
  if (rows == 0) return;
  FwdArgs a{};
  a.y = y.data_ptr();
  a.r = r.defined() ? r.data_ptr() : nullptr;
  a.mean = mean.defined() ? mean.data_ptr<float>() : nullptr;
  a.rstd = rstd.defined() ? rstd.data_ptr<float>() : nullptr;
  a.x = x.data_ptr();
  a.res = res.defined() ? res.data_ptr() : nullptr;
  a.w = w.defined() ? w.data_ptr() : nullptr;
  a.b = b.defined() ? b.data_ptr() : nullptr;
  const Config c = plan(dim, sizeof(T), {a.y, a.r, a.x, a.res, a.w, a.b}, Pass::forward);
  a.rows = rows;
  a.dim = static_cast<int>(dim);
  a.nv = static_cast<int>(c.nv);
  a.tpr = c.tpr;
  a.gpb = c.gpb;
  a.inv_dim = 1.f / static_cast<float>(dim);
  a.eps = static_cast<float>(eps);
  const int device = x.device().index;
  cudaStream_t s = stream_for(x);
  const int grid = grid_for(rows, c, fwd_kernel<T, LN>(c), 0, device);
  with_shape<T>(c, [&](auto n, auto it) {
    constexpr int N = decltype(n)::value, IT = decltype(it)::value;
    if constexpr (IT == 0) norm_fwd_loop_kernel<T, N, LN><<<grid, c.block, 0, s>>>(a);
    else norm_fwd_kernel<T, N, IT, LN><<<grid, c.block, 0, s>>>(a);
  });
  TG_CUDA_CHECK_LAUNCH(LN ? "layer_norm.forward" : "rms_norm.forward");
}

// The staged kernel's shape for a launch: stages per block and blocks per multiprocessor, or
// stages == 0 when it does not apply (dW / dB alone; dx alone where the register kernel fits
// two blocks per multiprocessor; rows not 16-byte vectors, several rows per block, more than
// kStagedMaxElems elements per thread, rows too large for two stages; TG_NORM_STAGED=0).
struct Staged {
  int stages = 0, blocks_per_sm = 0;
  size_t smem = 0;
};
inline bool staged_enabled() {
  static const bool on = [] {
    const char* s = std::getenv("TG_NORM_STAGED");
    return !(s && s[0] == '0');
  }();
  return on;
}
// Benchmark knobs, read once (0: not set): TG_NORM_STAGED_BLOCKS forces the staged kernel's
// blocks per multiprocessor (1 or 2), TG_NORM_STAGES caps its stages (and lifts the
// kStagedInFlight budget: TG_NORM_STAGES=8 is the plan that filled the shared memory).
inline int env_knob(const char* name) {
  const char* s = std::getenv(name);
  return s ? std::atoi(s) : 0;
}
inline int staged_blocks_knob() {
  static const int v = env_knob("TG_NORM_STAGED_BLOCKS");
  return v;
}
inline int stages_knob() {
  static const int v = env_knob("TG_NORM_STAGES");
  return v;
}
template <class T, bool LN, bool DW, bool DB, bool RES>
const void* staged_kernel(const Config& c) {
  const void* fn = nullptr;
  with_shape<T>(c, [&](auto n, auto it) {
    constexpr int N = decltype(n)::value, IT = decltype(it)::value;
    if constexpr (IT != 0 && N * sizeof(T) == 16 && IT * N <= kStagedMaxElems)
      fn = reinterpret_cast<const void*>(&norm_bwd_staged_kernel<T, N, IT, LN, DW, DB, RES>);
  });
  return fn;
}

// Whether the staged kernel `fn` has its body on `device`: it was compiled from PTX for Hopper
// or newer. A build for an older architecture (CMAKE_CUDA_ARCHITECTURES=80) runs the other
// kernels, also where the driver compiles its PTX for a newer GPU.
inline bool staged_supported(const void* fn, int device) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, bool> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find({fn, device});
  if (it != cache.end()) return it->second;
  cudaFuncAttributes attr;
  TG_CUDA_CHECK(cudaFuncGetAttributes(&attr, fn));
  return cache[{fn, device}] = attr.ptxVersion >= 90;
}

// Bytes of rows a multiprocessor's staged blocks keep in flight: about what its share of the
// memory bandwidth needs over the latency under load (4.3 TB/s / 132 SMs x ~3 us). Filling the
// shared memory instead (up to 8 stages, 224 KB a multiprocessor) made every block's first row
// wait behind the whole grid's prefetch (H200 timeline, bf16 RMSNorm 2048x4096: the first row's
// sums at 8.4 us against 2.4 in the register kernel) and the launch slower: bf16 RMSNorm
// 2048x4096 full 26.8 us with 6 stages, 23.7 with 3 (bench/RESULTS.md, session 7, run 32).
// Two blocks a multiprocessor only where each still gets 3 stages within it; else one block.
constexpr size_t kStagedInFlight = 96 * 1024;

// The staged kernel's shape for a backward with dx (dW / dB alone have their own kernel).
template <class T, bool LN, bool DW, bool DB, bool RES>
Staged staged_plan(const Config& c, int64_t dim, int device) {
  Staged st;
  // dx alone runs the register kernel with a block per row while two or more such blocks fit
  // on a multiprocessor (on the H200 as fast or faster: bf16 8192x8192 98 us against 102 for
  // the lab's staged kernel); with fewer (float32 rows of 8192: 82 registers a thread, one
  // block) too few rows are in flight, and staging keeps them coming.
  if (!staged_enabled() || c.vb != 16 || c.gpb != 1 || c.iters == 0 ||
      c.iters * 16 / int(sizeof(T)) > kStagedMaxElems)
    return st;
  if (!(DW || DB) && blocks_per_sm(bwd_kernel<T, LN, DW, DB, RES>(c), c.block, 0, device) * c.block >= 1024)
    return st;
  const void* fn = staged_kernel<T, LN, DW, DB, RES>(c);
  if (!staged_supported(fn, device)) return st;
  // Blocks that fit by registers and threads alone; shared memory is then split among them.
  const int reg_fit = blocks_per_sm(fn, c.block, 0, device);
  static std::mutex mu;
  static std::map<int, int> smem_per_sm, smem_per_block;
  int per_sm, per_block;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!smem_per_sm.count(device)) {
      cudaDeviceProp prop;
      TG_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
      smem_per_sm[device] = static_cast<int>(prop.sharedMemPerMultiprocessor);
      smem_per_block[device] = static_cast<int>(prop.sharedMemPerBlockOptin);
    }
    per_sm = smem_per_sm[device];
    per_block = smem_per_block[device];
  }
  const size_t stage_bytes = 2 * dim * sizeof(T);
  const size_t reserve = 2048;  // static shared memory and the per-block reservation
  const int max_stages = stages_knob() >= 2 ? std::min(stages_knob(), kMaxStages) : kMaxStages;
  for (int blocks : {2, 1}) {
    if (blocks > reg_fit || (staged_blocks_knob() && blocks != staged_blocks_knob())) continue;
    const size_t avail = std::min<size_t>(per_sm / blocks - reserve, per_block - reserve) - kStageHeader;
    const size_t budget =
        stages_knob() >= 2 ? kMaxStages : std::max<size_t>(2, kStagedInFlight / (blocks * stage_bytes));
    const int stages = static_cast<int>(std::min<size_t>({size_t(max_stages), avail / stage_bytes, budget}));
    if (stages >= (blocks == 2 ? 3 : 2)) {
      st.stages = stages;
      st.blocks_per_sm = blocks;
      st.smem = kStageHeader + stages * stage_bytes;
      return st;
    }
  }
  return st;
}

// Persistent grid of the staged kernel.
template <class T, bool LN, bool DW, bool DB, bool RES>
int staged_grid(int64_t rows, const Config& c, const Staged& st, int device) {
  const void* fn = staged_kernel<T, LN, DW, DB, RES>(c);
  const int fit = std::min(st.blocks_per_sm, blocks_per_sm(fn, c.block, st.smem, device));
  const int64_t resident = int64_t(sm_count(device)) * fit;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(rows, resident)));
}

// Dynamic shared memory of a backward variant: its dW / dB accumulator slots, at least the
// final reduction's scratch.
template <class T, bool DW, bool DB>
size_t bwd_smem(const Config& c) {
  if (!DW && !DB) return 0;
  const size_t slots = c.iters ? size_t(int(DW) + int(DB)) * c.iters * (c.vb / sizeof(T)) * c.block * sizeof(float) : 0;
  return std::max(slots, kReduceScratch);
}

// Launches kernel<<<grid, block, smem, s>>>(args...), as a cooperative launch when `coop` (the
// grid must be co-resident: the kernel ends with a grid barrier; grids sized by occupancy are).
template <class... Params, class... Args>
void launch(bool coop, void (*kernel)(Params...), int grid, int block, size_t smem, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = coop ? 1 : 0;
  TG_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// The dW / dB-only kernel of a config, and its launch: column tiles of cv vectors, as many row
// splits as fill the GPU once (at most max_splits, and no more than the row lanes need).
template <class T, bool LN, bool DW, bool DB>
const void* param_kernel(const Config& c) {
  const void* fn = nullptr;
  with_shape<T>(c, [&](auto n, auto) {
    fn = reinterpret_cast<const void*>(&norm_bwd_param_kernel<T, decltype(n)::value, LN, DW, DB>);
  });
  return fn;
}
struct ParamLaunch {
  ParamGrid g;
  int grid;
  size_t smem;
};
template <class T, bool LN, bool DW, bool DB>
ParamLaunch param_plan(const Config& c, int64_t rows, int device, int64_t max_splits) {
  ParamLaunch p;
  const size_t elems = c.vb / sizeof(T);
  p.smem = std::max(size_t(kParamBlock) * (int(DW) + int(DB)) * elems * sizeof(float), kReduceScratch);
  int cv = 1;
  while (cv < 32 && cv < c.nv) cv *= 2;
  const int64_t lanes = kParamBlock / cv, tiles = (c.nv + cv - 1) / cv;
  const int64_t resident =
      int64_t(sm_count(device)) * blocks_per_sm(param_kernel<T, LN, DW, DB>(c), kParamBlock, p.smem, device);
  const int64_t splits = std::max<int64_t>(1, std::min({resident / tiles, (rows + lanes - 1) / lanes, max_splits}));
  p.g = {cv, static_cast<int>(tiles), static_cast<int>(splits)};
  p.grid = static_cast<int>(std::min(tiles * splits, resident));
  return p;
}

// Rows of the partial buffer: the persistent grid of the variant (the row splits for dW / dB
// alone), on x's shape and alignment.
template <class T, bool LN, bool DX, bool DW, bool DB>
int64_t partial_rows(const Tensor& x) {
  const int64_t dim = x.shape()[1], rows = x.shape()[0];
  const int device = x.device().index;
  const Config c = plan(dim, sizeof(T), {x.data_ptr()}, Pass::backward);
  if constexpr (!DX) {
    return param_plan<T, LN, DW, DB>(c, rows, device, INT32_MAX).g.splits;
  } else {
    const Staged st = staged_plan<T, LN, DW, DB, false>(c, dim, device);
    if (st.stages) return staged_grid<T, LN, DW, DB, false>(rows, c, st, device);
    return grid_for(rows, c, bwd_kernel<T, LN, DW, DB, false>(c), bwd_smem<T, DW, DB>(c), device);
  }
}

// Whether a launch that moves `bytes` reads its rows with the L2 evict-first policy (RowRead;
// the register and dW / dB kernels, not the staged kernel's bulk copies): up to `l2_multiple`
// times the L2's size. Measured on the H200 (63 MB L2, full of a flush's dirty lines before each
// call; bench/RESULTS.md, session 6, run 25, every load evict-first against none): with dx,
// 2.6-7% faster at 50 and 74 MB of traffic (bf16 RMSNorm 8192x1500 dx alone 27.5 -> 25.8 us),
// even at 100 MB, 3-11% slower from 200 MB up; dW / dB alone, 7-11% faster up to 235 MB read
// (bf16 RMSNorm 4096x4096 29.9 -> 26.8 us), 1.6% at 268 MB, 3.5% slower at 537 MB. Hence 1.5
// L2s of traffic with dx, 5 L2s of reads without.
inline bool read_evict_first(int64_t bytes, double l2_multiple, int device) {
  return static_cast<double>(bytes) <= l2_multiple * static_cast<double>(l2_bytes(device));
}

// dW / dB alone: the tiled kernel (a cooperative launch: it ends with the partial rows' sum).
template <class T, bool LN, bool DW, bool DB>
void launch_param_backward(const BwdArgs& a, const Config& c, int64_t partial_rows, cudaStream_t s, int device) {
  const ParamLaunch p = param_plan<T, LN, DW, DB>(c, a.rows, device, partial_rows);
  with_shape<T>(c, [&](auto n, auto) {
    launch(true, norm_bwd_param_kernel<T, decltype(n)::value, LN, DW, DB>, p.grid, kParamBlock, p.smem, s, a, p.g);
  });
}

// dx, and dW / dB when asked: the staged kernel where it applies, else the register-resident or
// the looping kernel. With dW / dB the grid is persistent and co-resident (a cooperative
// launch) and at most the partial buffer's rows.
template <class T, bool LN, bool DW, bool DB, bool RES>
void launch_dx_backward(const BwdArgs& a, const Config& c, int64_t partial_rows, cudaStream_t s, int device) {
  auto reducing_grid = [&](int resident) { return static_cast<int>(std::min<int64_t>(resident, partial_rows)); };
  const Staged st = staged_plan<T, LN, DW, DB, RES>(c, a.dim, device);
  if (st.stages) {
    allow_smem(staged_kernel<T, LN, DW, DB, RES>(c), st.smem, device);
    const int resident = staged_grid<T, LN, DW, DB, RES>(a.rows, c, st, device);
    const int grid = (DW || DB) ? reducing_grid(resident) : resident;
    with_shape<T>(c, [&](auto n, auto it) {
      constexpr int N = decltype(n)::value, IT = decltype(it)::value;
      if constexpr (IT != 0 && N * sizeof(T) == 16 && IT * N <= kStagedMaxElems)
        launch(DW || DB, norm_bwd_staged_kernel<T, N, IT, LN, DW, DB, RES>, grid, c.block, st.smem, s, a, st.stages);
    });
    return;
  }
  const void* fn = bwd_kernel<T, LN, DW, DB, RES>(c);
  const size_t smem = bwd_smem<T, DW, DB>(c);
  // dx alone, a row per block of 16-byte vectors: a block per row (the hardware schedules
  // them, several rows in flight per multiprocessor, no tail of unequal loops); small rows and
  // rows of 8-byte or scalar accesses: a persistent grid (H200, bf16 8192x1500: 33.9 us
  // persistent, 38.4 a block per row).
  const int resident = grid_for(a.rows, c, fn, smem, device);
  const int grid = (DW || DB) ? reducing_grid(resident)
                   : c.gpb == 1 && c.iters && c.vb == 16 ? static_cast<int>(std::min<int64_t>(a.rows, INT32_MAX))
                                                         : resident;
  allow_smem(fn, smem, device);
  with_shape<T>(c, [&](auto n, auto it) {
    constexpr int N = decltype(n)::value, IT = decltype(it)::value;
    if constexpr (IT == 0) launch(DW || DB, norm_bwd_loop_kernel<T, N, LN, DW, DB>, grid, c.block, smem, s, a);
    else launch(DW || DB, norm_bwd_kernel<T, N, IT, LN, DW, DB, RES>, grid, c.block, smem, s, a);
  });
}

// One backward launch of variant <DX, DW, DB>: dx, and dw / db through the partial buffer (the
// op sized it with partial_rows) in the same kernel.
template <class T, bool LN, bool DX, bool DW, bool DB>
void launch_backward(const char* op, const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& partial,
                     const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                     const Tensor& dres) {
  KernelTrace::record(norm_backward_event(op, DX, DW, DB));
  const int64_t dim = dy.shape()[1], rows = dy.shape()[0];
  if (rows == 0) return;
  BwdArgs a{};
  a.dx = DX ? dx.data_ptr() : nullptr;
  a.dw = DW ? dw.data_ptr() : nullptr;
  a.db = DB ? db.data_ptr() : nullptr;
  a.partial = (DW || DB) ? partial.data_ptr<float>() : nullptr;
  a.dy = dy.data_ptr();
  a.x = (DX || DW) ? x.data_ptr() : nullptr;
  a.w = DX && w.defined() ? w.data_ptr() : nullptr;
  a.mean = LN && (DX || DW) ? mean.data_ptr<float>() : nullptr;
  a.rstd = (DX || DW) ? rstd.data_ptr<float>() : nullptr;
  a.dres = DX && dres.defined() ? dres.data_ptr() : nullptr;
  const Config c = plan(dim, sizeof(T), {a.dx, a.dy, a.x, a.w, a.dres}, Pass::backward);
  a.rows = rows;
  a.dim = static_cast<int>(dim);
  a.nv = static_cast<int>(c.nv);
  a.tpr = c.tpr;
  a.gpb = c.gpb;
  a.inv_dim = 1.f / static_cast<float>(dim);
  cudaStream_t s = stream_for(dy);
  const int device = dy.device().index;
  const int64_t prows = (DW || DB) ? partial.shape()[0] : 0;
  const int64_t row_bytes = rows * dim * int64_t(sizeof(T));
  a.evict_first = DX ? read_evict_first(row_bytes * (a.dres ? 4 : 3), 1.5, device)
                     : read_evict_first(row_bytes * (DW ? 2 : 1), 5.0, device);
  if constexpr (!DX) {
    launch_param_backward<T, LN, DW, DB>(a, c, prows, s, device);
  } else if (!LN && a.dres) {
    // The residual-gradient add (fused_add_rms_norm) is its own instantiation, so plain
    // rms_norm / layer_norm pay no registers for it.
    if constexpr (!LN) launch_dx_backward<T, LN, DW, DB, true>(a, c, prows, s, device);
  } else {
    launch_dx_backward<T, LN, DW, DB, false>(a, c, prows, s, device);
  }
  TG_CUDA_CHECK_LAUNCH("norm backward");
}

// Calls f(type_tag<T>) for the float32 / bfloat16 dtypes the CUDA kernels support.
template <class F>
void dispatch_gpu_float(DType t, const char* op, F&& f) {
  if (t == kFloat32) return f(static_cast<float*>(nullptr));
  if (t == kBFloat16) return f(static_cast<bf16*>(nullptr));
  fail(op, "on the GPU wants float32 or bfloat16, got ", t);
}

}  // namespace tg::cuda::normk
