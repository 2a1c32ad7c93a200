// The CUDA RMSNorm / LayerNorm kernels, shared by ops/cuda/rms_norm.cu and layer_norm.cu
// (LN selects LayerNorm; mean = 0 and no bias for RMSNorm). This header: the layout below, the
// device primitives, the backward arithmetic and the dW / dB sum; the kernels are in
// norm_forward.cuh and norm_backward.cuh, the launch plans in norm_launch.cuh.
//
// Layout of the work. A row of `dim` elements is split into `nv` vectors of VB bytes (16 when
// dim and every pointer allow it, else 8, else one element). A group of `tpr` threads owns a
// row (tpr aims at preferred_tpr(): 512; for a backward 256 over 8-byte vectors, 16 over rows
// of at most 32 vectors); thread `lane` holds vectors lane, lane + tpr, ... (ITERS of them, a
// compile-time count, so the row lives in registers between the loads and the stores). A block
// holds `gpb` groups (several only for rows of <= 32 threads). Row reductions are a warp
// butterfly and, for rows wider than a warp, one shared-memory step and a second butterfly: a
// fixed order, deterministic.
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
//    block per multiprocessor; 16-byte rows; persistent): the bulk-copy engine keeps rows in
//    flight in shared memory ahead of the block (about kStagedInFlight bytes a multiprocessor),
//    so loads never wait on the reduction;
//    Hopper instructions: where the kernel was compiled for an older GPU its body is empty and
//    the planner never picks it (staged_supported);
//  - norm_bwd_loop_kernel: dx of rows wider than the register kernels take (runtime loops, the
//    row re-read from L2 for the second pass);
//  - norm_bwd_param_kernel: dW / dB without dx (x needs no gradient), and of rows too wide for
//    registers after the looping kernel's dx: no row sums, so the rows tile in two dimensions
//    and the partial rows are a few per column tile.
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
// thread with 1 vector per thread, so four 512-thread blocks fit; 64 with 2 (40 for a float32
// dx alone), 128 with 4 or 8, 255 with 16; a backward with dx that accumulates dW / dB gets 64
// with 1 vector, as 32 spills).
constexpr int max_tpr(int iters) { return iters >= 16 ? 256 : kMaxTpr; }
// Three blocks with 2 vectors (40 registers) for a float32 backward of dx alone: it fits them
// without spilling (ptxas; 48-50 registers unbounded) and ran 1-3.5% faster on the H200 at
// float32 rows of 3584 and 4096 (run 56: RMSNorm 8192x3584 frozen 89.6 -> 86.9 us, 4096x4096 53.4
// -> 52.7; LayerNorm 8192x3584 91.5 -> 88.3, 8192x4096 101.5 -> 99.3); at rows of 128, also two
// vectors a thread, the same (LayerNorm 99.3 -> 99.2).
// bf16 spills there and ran slower (RMSNorm 8192x8192 dx alone 119.7 us against 100.5 with two
// blocks and 56 registers).
constexpr int min_blocks(int iters, bool accumulates = false, bool float_dx_alone = false) {
  return iters <= 1 ? (accumulates ? 2 : 4) : iters == 2 ? (float_dx_alone ? 3 : 2) : 1;
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

}  // namespace tg::cuda::normk
