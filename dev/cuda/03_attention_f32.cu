/*
Float32 flash attention on CUDA cores (plain FP32 FMAs: no tensor cores, no TF32), the scheme of
the library's bf16 kernels (ops/cuda/flash_attention.cuh) on register tiles instead of mma.sync.
q / k / v / out in the projections' [B, T, H, hd] memory, read as [B, H, T, hd] views; head dim 64
or 128; causal or not; grouped-query heads (query head h reads kv head h / (H / Hkv)).
dev/cuda/03_attention_f32.md keeps the design, the register budget and the results.

  forward  a block per (batch, head, BM queries) streams BN-key tiles of K and V (two cp.async
           stages): S = Q K^T, online softmax in registers, P through the warp's shared tile,
           O += P V. Writes out and the float32 logsumexp.
  delta    delta = rowsum(dO * O), one pass.
  dk / dv  a block per (batch, kv head, BM keys) streams BN-query tiles of every head of its
           group: S^T = K Q^T, P^T from lse, dV += P^T dO, dP^T = V dO^T,
           dS^T = P^T (dP^T - delta), dK += dS^T Q.
  dq       a block per (batch, head, BM queries) streams BN-key tiles: S, P, dP = dO V^T, dS,
           dQ += dS K. Each gradient sums in a fixed order: deterministic, no atomics.

Register tiles: a warp owns WR = RG TM consecutive rows of its block; its lanes are RG row groups
x CG = 32 / RG column groups. A thread holds a TM x TN micro-tile of a score tile (rows RG apart,
streamed columns CG apart) and TM rows x HD / CG columns of an output (float4 chunks 4 CG apart).
Shared rows are padded by 16 bytes, so the CG rows a float4 load touches fall in distinct banks.

Build and run (sm_90; -Xptxas -v shows each kernel's registers and spills):
  nvcc -O3 -std=c++17 -arch=sm_90 -I. -o attention_f32 dev/cuda/03_attention_f32.cu -lcublas
  ./attention_f32              # check every variant against a float64 CPU reference, then time
  ./attention_f32 --check      # the check alone
  ./attention_f32 --reps 50    # timing repetitions (median of N, L2 flushed before each)

Prints: the device and its FP32 FMA peak; one line per (check shape, kernel variant) with the
largest error of each output relative to that output's largest value (past kTolerance the line
says FAIL, no timing runs and the exit status is 1); cuBLAS SGEMM's rate on [8192 x 768] x
[768 x 768] in the library's math mode and in pedantic mode (TF32 off in both); then for
8x12x1024x64 and 4x32x2048x128, causal and full, every variant's median time, TFLOP/s of the
products it computes and % of peak, and the forward, backward and forward + backward of the
fastest variants in ms and TFLOP/s (causal FLOPs halved, backward counted as 2.5x forward).
The same check runs on the CPU, without a GPU: dev/cuda/03_attention_f32_cpu.cpp.
*/
#include "common.cuh"

#include <string>

// PTX the CPU run (dev/cuda/03_attention_f32_cpu.cpp) replaces, and cuBLAS, which it has not.
#ifndef ATTENTION_F32_KERNELS_ONLY
#include <cublas_v2.h>

#include "ops/cuda/flash_attention.cuh"

namespace {
// A shared float4 / float2 as one ld.shared.v4 / .v2: NVVM splits plain vector loads into scalar
// ones in the larger kernels (four times the load instructions of S = Q K^T). Volatile, so no
// load moves across a barrier.
__device__ __forceinline__ float4 lds128(const float* p) {
  float4 r;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w)
               : "r"(tg::cuda::flash::smem_u32(p)));
  return r;
}
__device__ __forceinline__ float2 lds64(const float* p) {
  float2 r;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(r.x), "=f"(r.y) : "r"(tg::cuda::flash::smem_u32(p)));
  return r;
}
}  // namespace
#endif

namespace {

// ---------------------------------------------------------------- kernels
using tg::cuda::flash::cp_async16;
using tg::cuda::flash::cp_async4;
using tg::cuda::flash::cp_async_commit;
using tg::cuda::flash::cp_async_wait;
using tg::cuda::flash::kLn2;
using tg::cuda::flash::kLog2e;

// Rows of a [B, H, T, hd] float32 operand: row (b, h, t) at p + b sb + h sh + t st, unit stride
// along hd, 16-byte aligned.
struct Rows {
  float* p = nullptr;
  int64_t sb = 0, sh = 0, st = 0;
  __device__ float* at(int b, int h, int t) const { return p + b * sb + h * sh + int64_t(t) * st; }
};

struct Params {
  Rows q, k, v, o, dout, dq, dk, dv;  // k, v, dk, dv have Hkv heads
  float* lse = nullptr;               // [B, H, T]: natural log of the scaled scores' exp sums
  float* delta = nullptr;             // [B, H, T]
  int B = 0, H = 0, Hkv = 0, T = 0;
  float scale = 0.f, scale_log2 = 0.f;  // scale * log2(e): softmax in base 2
  bool causal = false;
};

// A kernel's tile shape (the file comment's names): NW warps of WR = RG TM rows, streamed tiles of
// BN rows, head dim HD.
template <int HD_, int NW_, int RG_, int TM_, int BN_>
struct Tiles {
  static constexpr int HD = HD_, NW = NW_, RG = RG_, TM = TM_, BN = BN_;
  static constexpr int CG = 32 / RG, WR = RG * TM, BM = NW * WR, TN = BN / CG, TC = HD / (4 * CG);
  static constexpr int kThreads = 32 * NW;
  static constexpr int LD = HD + 4;   // a shared row of a block or streamed tile
  static constexpr int LDP = WR + 4;  // a row of a warp's P tile: one streamed column, the warp's rows
  static_assert(RG * CG == 32 && BN % CG == 0 && HD % (4 * CG) == 0 && (TM == 2 || TM % 4 == 0), "tile shape");
};

// Shared bytes: the block tile(s) (BM rows), two stages of the streamed tiles (BN rows), the
// warps' P tiles; dk / dv also stage lse and delta.
template <class C>
constexpr size_t kForwardSmem = size_t((C::BM + 4 * C::BN) * C::LD + C::NW * C::BN * C::LDP) * 4;
template <class C>
constexpr size_t kDqSmem = size_t((2 * C::BM + 4 * C::BN) * C::LD + C::NW * C::BN * C::LDP) * 4;
template <class C>
constexpr size_t kDkDvSmem = size_t((2 * C::BM + 4 * C::BN) * C::LD + 4 * C::BN + C::NW * C::BN * C::LDP) * 4;

// Blocks a multiprocessor whose shared memory fits (228 KiB, 1 KiB of it reserved a block): the
// kernels' launch bounds, so ptxas neither spills for more blocks than fit nor takes registers
// that would keep the ones that fit from running.
constexpr int blocks_per_sm(size_t smem) {
  return int(std::max<size_t>(1, std::min<size_t>(4, (228 << 10) / (smem + 1024))));
}

// Rows [t0, t0 + ROWS) of head (b, h) into a shared [ROWS][LD] tile; rows at or past T are zeros
// (their products vanish, so only the softmax needs masks at the edges).
template <class C, int ROWS>
__device__ __forceinline__ void load_rows(float* s, const Rows& g, int b, int h, int t0, int T) {
  constexpr int kChunks = C::HD / 4;
  for (int c = threadIdx.x; c < ROWS * kChunks; c += C::kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 4, t = t0 + r;
    const bool ok = t < T;
    cp_async16(s + r * C::LD + col, g.at(b, h, ok ? t : 0) + col, ok);
  }
}

// BN floats of a [B, H, T] row statistic from index i0 (zeros past T).
template <class C>
__device__ __forceinline__ void load_stat(float* s, const float* g, int64_t base, int i0, int T) {
  for (int i = threadIdx.x; i < C::BN; i += C::kThreads) {
    const bool ok = i0 + i < T;
    cp_async4(s + i, g + base + (ok ? i0 + i : 0), ok);
  }
}

template <int M, int N>
__device__ __forceinline__ void zero(float (&a)[M][N]) {
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int j = 0; j < N; ++j) a[i][j] = 0.f;
}
template <int M, int N>
__device__ __forceinline__ void zero(float4 (&a)[M][N]) {
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int j = 0; j < N; ++j) a[i][j] = make_float4(0.f, 0.f, 0.f, 0.f);
}
__device__ __forceinline__ void fma4(float4& acc, float a, const float4& b) {
  acc.x = fmaf(a, b.x, acc.x), acc.y = fmaf(a, b.y, acc.y), acc.z = fmaf(a, b.z, acc.z), acc.w = fmaf(a, b.w, acc.w);
}
__device__ __forceinline__ float4 scaled(const float4& a, float s) {
  return make_float4(a.x * s, a.y * s, a.z * s, a.w * s);
}

// acc[i][j] += sum_d A[i][d] B[j][d]: the thread's TM rows of a block tile (a at its first, the
// rest RG rows apart) times its TN rows of a streamed tile (b at its first, the rest CG rows
// apart): S = Q K^T and its kin. Float4 loads along d; every sum runs in d order.
template <class C>
__device__ __forceinline__ void gemm_abt(float (&acc)[C::TM][C::TN], const float* a, const float* b) {
#pragma unroll
  for (int d = 0; d < C::HD; d += 4) {
    float4 av[C::TM], bv[C::TN];
#pragma unroll
    for (int i = 0; i < C::TM; ++i) av[i] = lds128(a + i * C::RG * C::LD + d);
#pragma unroll
    for (int j = 0; j < C::TN; ++j) bv[j] = lds128(b + j * C::CG * C::LD + d);
#pragma unroll
    for (int i = 0; i < C::TM; ++i)
#pragma unroll
      for (int j = 0; j < C::TN; ++j) {
        acc[i][j] = fmaf(av[i].x, bv[j].x, acc[i][j]);
        acc[i][j] = fmaf(av[i].y, bv[j].y, acc[i][j]);
        acc[i][j] = fmaf(av[i].z, bv[j].z, acc[i][j]);
        acc[i][j] = fmaf(av[i].w, bv[j].w, acc[i][j]);
      }
  }
}

// The thread's scores v[i][j] (row rg + RG i, column cg + CG j) into its warp's P tile,
// transposed: column j's TM values side by side at [cg + CG j][rg TM], as gemm_pv reads them.
template <class C>
__device__ __forceinline__ void store_p(float* sp, const float (&v)[C::TM][C::TN], int rg, int cg) {
#pragma unroll
  for (int j = 0; j < C::TN; ++j) {
    float* dst = sp + (cg + C::CG * j) * C::LDP + rg * C::TM;
    if constexpr (C::TM == 2) {
      *reinterpret_cast<float2*>(dst) = make_float2(v[0][j], v[1][j]);
    } else {
#pragma unroll
      for (int i = 0; i < C::TM; i += 4)
        *reinterpret_cast<float4*>(dst + i) = make_float4(v[i][j], v[i + 1][j], v[i + 2][j], v[i + 3][j]);
    }
  }
}

// acc[i][c] += sum_j P[i][j] V[j][c] over the BN streamed columns: the thread's TM rows of its
// warp's P tile (p at its first value) times a streamed [BN][LD] tile (v at its first chunk).
template <class C>
__device__ __forceinline__ void gemm_pv(float4 (&acc)[C::TM][C::TC], const float* p, const float* v) {
#pragma unroll
  for (int j = 0; j < C::BN; ++j) {
    float pv[C::TM];
    if constexpr (C::TM == 2) {
      const float2 x = lds64(p + j * C::LDP);
      pv[0] = x.x, pv[1] = x.y;
    } else {
#pragma unroll
      for (int i = 0; i < C::TM; i += 4) {
        const float4 x = lds128(p + j * C::LDP + i);
        pv[i] = x.x, pv[i + 1] = x.y, pv[i + 2] = x.z, pv[i + 3] = x.w;
      }
    }
    float4 vv[C::TC];
#pragma unroll
    for (int c = 0; c < C::TC; ++c) vv[c] = lds128(v + j * C::LD + 4 * C::CG * c);
#pragma unroll
    for (int i = 0; i < C::TM; ++i)
#pragma unroll
      for (int c = 0; c < C::TC; ++c) fma4(acc[i][c], pv[i], vv[c]);
  }
}

// A row's max and sum over the CG lanes of its row group (lanes rg CG .. rg CG + CG - 1); the
// butterfly leaves the same bits in every lane.
template <class C>
__device__ __forceinline__ float row_max(float v) {
#pragma unroll
  for (int off = C::CG / 2; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
template <class C>
__device__ __forceinline__ float row_sum(float v) {
#pragma unroll
  for (int off = C::CG / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Scores of keys at or past T, or (causal) past their query, set to `value`: the thread's rows
// from row0 (RG apart), its keys from key0 (CG apart).
template <class C>
__device__ __forceinline__ void mask_keys(float (&s)[C::TM][C::TN], float value, const Params& p, int row0, int key0) {
#pragma unroll
  for (int i = 0; i < C::TM; ++i)
#pragma unroll
    for (int j = 0; j < C::TN; ++j) {
      const int key = key0 + C::CG * j, row = row0 + C::RG * i;
      if (key >= p.T || (p.causal && key > row)) s[i][j] = value;
    }
}
// Whether the warp's tile of keys [n0, n0 + BN) for rows from wrow0 has a key mask_keys masks.
template <class C>
__device__ __forceinline__ bool needs_mask(const Params& p, int n0, int wrow0) {
  return n0 + C::BN > p.T || (p.causal && n0 + C::BN - 1 > wrow0);
}

// Key tiles of BN keys that queries below `end` see.
__device__ __forceinline__ int key_tiles(const Params& p, int end, int bn) {
  const int keys = p.causal ? min(end, p.T) : p.T;
  return (keys + bn - 1) / bn;
}

// The thread's output rows (row0 + RG i, those below T) times mul[i] into dst at its chunks.
template <class C>
__device__ __forceinline__ void store_rows(const Rows& dst, int b, int h, int row0, int T,
                                           const float4 (&acc)[C::TM][C::TC], const float (&mul)[C::TM], int cg) {
#pragma unroll
  for (int i = 0; i < C::TM; ++i) {
    const int row = row0 + C::RG * i;
    if (row >= T) continue;
    float* out = dst.at(b, h, row) + 4 * cg;
#pragma unroll
    for (int c = 0; c < C::TC; ++c) *reinterpret_cast<float4*>(out + 4 * C::CG * c) = scaled(acc[i][c], mul[i]);
  }
}

// Starts loading key tile nb + 1 of K and V (batch b, kv head hk) into the other stage, then waits
// for tile nb (the cp.async groups complete in order) and for every thread's copies.
template <class C>
__device__ __forceinline__ void next_kv_tile(float* sK, float* sV, const Params& p, int b, int hk, int nb, int tiles) {
  if (nb + 1 < tiles) {
    const int other = (nb & 1) ^ 1;
    load_rows<C, C::BN>(sK + other * C::BN * C::LD, p.k, b, hk, (nb + 1) * C::BN, p.T);
    load_rows<C, C::BN>(sV + other * C::BN * C::LD, p.v, b, hk, (nb + 1) * C::BN, p.T);
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}

template <class C>
__global__ void __launch_bounds__(C::kThreads, blocks_per_sm(kForwardSmem<C>)) attention_forward(const Params p) {
  constexpr int TM = C::TM, TN = C::TN, TC = C::TC, LD = C::LD, BN = C::BN;
  extern __shared__ __align__(16) float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, rg = lane / C::CG, cg = lane % C::CG;
  float* sQ = smem;
  float* sK = sQ + C::BM * LD;                         // two stages
  float* sV = sK + 2 * BN * LD;                        // two stages
  float* sP = sV + 2 * BN * LD + warp * BN * C::LDP;  // this warp's
  const int mb = gridDim.x - 1 - blockIdx.x;           // the longest causal blocks start first
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (p.H / p.Hkv);
  const int m0 = mb * C::BM, wrow = warp * C::WR, row0 = m0 + wrow + rg;  // the thread's rows: row0 + RG i
  const int tiles = key_tiles(p, m0 + C::BM, BN);

  load_rows<C, C::BM>(sQ, p.q, b, h, m0, p.T);
  load_rows<C, BN>(sK, p.k, b, hk, 0, p.T);
  load_rows<C, BN>(sV, p.v, b, hk, 0, p.T);
  cp_async_commit();

  float4 o[TM][TC];
  zero(o);
  float m[TM], l[TM];  // the rows' running max of the raw scores, this thread's share of the exp sum
#pragma unroll
  for (int i = 0; i < TM; ++i) m[i] = -INFINITY, l[i] = 0.f;
  for (int nb = 0; nb < tiles; ++nb) {
    const int stage = nb & 1, n0 = nb * BN;
    next_kv_tile<C>(sK, sV, p, b, hk, nb, tiles);
    const float* k_s = sK + stage * BN * LD;
    const float* v_s = sV + stage * BN * LD;

    float s[TM][TN];
    zero(s);
    gemm_abt<C>(s, sQ + (wrow + rg) * LD, k_s + cg * LD);
    if (needs_mask<C>(p, n0, m0 + wrow)) mask_keys<C>(s, -INFINITY, p, row0, n0 + cg);
    // Online softmax on the raw scores, the scale folded into the exponent:
    // p = exp2(s scale log2(e) - m scale log2(e)).
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      float mx = m[i];
#pragma unroll
      for (int j = 0; j < TN; ++j) mx = fmaxf(mx, s[i][j]);
      mx = row_max<C>(mx);
      const float base = mx == -INFINITY ? 0.f : mx * p.scale_log2;  // a row that has seen no key yet
      const float alpha = exp2f(m[i] * p.scale_log2 - base);
      m[i] = mx;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        s[i][j] = exp2f(fmaf(s[i][j], p.scale_log2, -base));
        sum += s[i][j];
      }
      l[i] = l[i] * alpha + sum;
#pragma unroll
      for (int c = 0; c < TC; ++c) o[i][c] = scaled(o[i][c], alpha);
    }
    store_p<C>(sP, s, rg, cg);
    __syncwarp();
    gemm_pv<C>(o, sP + rg * TM, v_s + 4 * cg);
    __syncthreads();  // this stage is refilled, and this warp's P rewritten, next iteration
  }

  float inv[TM];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const float sum = row_sum<C>(l[i]);
    inv[i] = sum > 0.f ? 1.f / sum : 0.f;
    const int row = row0 + C::RG * i;
    if (cg == 0 && row < p.T)
      p.lse[(int64_t(b) * p.H + h) * p.T + row] = sum > 0.f ? (m[i] * p.scale_log2 + log2f(sum)) * kLn2 : -INFINITY;
  }
  store_rows<C>(p.o, b, h, row0, p.T, o, inv, cg);
}

// delta[b, h, t] = sum_d dO[b, h, t, d] O[b, h, t, d]: HD / 4 lanes a row, a float4 of each
// operand a lane, grid-stride over groups of rows (a warp's lanes iterate together).
template <int HD>
__global__ void attention_delta(const Params p) {
  constexpr int kLanes = HD / 4, kRowsPerWarp = 32 / kLanes;
  const int64_t rows = int64_t(p.B) * p.H * p.T;
  const int64_t step = int64_t(gridDim.x) * (blockDim.x / 32) * kRowsPerWarp;
  const int lane = threadIdx.x % 32, sub = lane % kLanes;
  for (int64_t row = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * kRowsPerWarp + lane / kLanes;
       row - lane / kLanes < rows; row += step) {
    float acc = 0.f;
    if (row < rows) {
      const int t = int(row % p.T), h = int((row / p.T) % p.H), b = int(row / (int64_t(p.T) * p.H));
      const float4 x = *reinterpret_cast<const float4*>(p.dout.at(b, h, t) + 4 * sub);
      const float4 y = *reinterpret_cast<const float4*>(p.o.at(b, h, t) + 4 * sub);
      acc = fmaf(x.w, y.w, fmaf(x.z, y.z, fmaf(x.y, y.y, x.x * y.x)));
    }
#pragma unroll
    for (int off = kLanes / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (sub == 0 && row < rows) p.delta[row] = acc;
  }
}

// dK and dV of BM keys of one kv head (block rows: keys; streamed: BN queries a step, every head
// of the group in turn).
template <class C>
__global__ void __launch_bounds__(C::kThreads, blocks_per_sm(kDkDvSmem<C>)) attention_backward_dkdv(const Params p) {
  constexpr int TM = C::TM, TN = C::TN, TC = C::TC, LD = C::LD, BN = C::BN;
  extern __shared__ __align__(16) float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, rg = lane / C::CG, cg = lane % C::CG;
  float* sK = smem;
  float* sV = sK + C::BM * LD;
  float* sQ = sV + C::BM * LD;  // two stages
  float* sO = sQ + 2 * BN * LD;  // dO, two stages
  float* sL = sO + 2 * BN * LD;  // lse, two stages
  float* sD = sL + 2 * BN;       // delta, two stages
  float* sP = sD + 2 * BN + warp * BN * C::LDP;
  const int n0 = blockIdx.x * C::BM, hk = blockIdx.y, b = blockIdx.z, group = p.H / p.Hkv;
  const int wrow = warp * C::WR, key0 = n0 + wrow + rg;  // the thread's keys: key0 + RG i
  // Causal: query blocks before the first that sees a key of this block are skipped.
  const int first = p.causal ? n0 / BN : 0, per_head = (p.T + BN - 1) / BN - first, steps = group * per_head;
  auto load_step = [&](int step, int stage) {
    const int h = hk * group + step / per_head, i0 = (first + step % per_head) * BN;
    const int64_t stat = (int64_t(b) * p.H + h) * p.T;
    load_rows<C, BN>(sQ + stage * BN * LD, p.q, b, h, i0, p.T);
    load_rows<C, BN>(sO + stage * BN * LD, p.dout, b, h, i0, p.T);
    load_stat<C>(sL + stage * BN, p.lse, stat, i0, p.T);
    load_stat<C>(sD + stage * BN, p.delta, stat, i0, p.T);
  };
  load_rows<C, C::BM>(sK, p.k, b, hk, n0, p.T);
  load_rows<C, C::BM>(sV, p.v, b, hk, n0, p.T);
  load_step(0, 0);
  cp_async_commit();

  float4 dk[TM][TC], dv[TM][TC];
  zero(dk);
  zero(dv);
  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1, i0 = (first + step % per_head) * BN;
    if (step + 1 < steps) {
      load_step(step + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const float *q_s = sQ + stage * BN * LD, *o_s = sO + stage * BN * LD;
    const float *l_s = sL + stage * BN + cg, *d_s = sD + stage * BN + cg;  // at the thread's first query

    float pt[TM][TN];  // S^T, then P^T = exp2(S^T scale log2(e) - lse log2(e))
    zero(pt);
    gemm_abt<C>(pt, sK + (wrow + rg) * LD, q_s + cg * LD);
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const float lse2 = l_s[C::CG * j] * kLog2e;
#pragma unroll
      for (int i = 0; i < TM; ++i) pt[i][j] = exp2f(fmaf(pt[i][j], p.scale_log2, -lse2));
    }
    // Causal: zero where the key is past the query, in the steps where the warp has such a pair.
    // Queries past T need nothing: their q and dO rows are zeros.
    if (p.causal && i0 < n0 + wrow + C::WR - 1)
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
          if (key0 + C::RG * i > i0 + cg + C::CG * j) pt[i][j] = 0.f;
    store_p<C>(sP, pt, rg, cg);
    __syncwarp();
    gemm_pv<C>(dv, sP + rg * TM, o_s + 4 * cg);

    float ds[TM][TN];  // dP^T, then dS^T = P^T (dP^T - delta)
    zero(ds);
    gemm_abt<C>(ds, sV + (wrow + rg) * LD, o_s + cg * LD);
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const float dl = d_s[C::CG * j];
#pragma unroll
      for (int i = 0; i < TM; ++i) ds[i][j] = pt[i][j] * (ds[i][j] - dl);
    }
    __syncwarp();  // the warp has read P^T
    store_p<C>(sP, ds, rg, cg);
    __syncwarp();
    gemm_pv<C>(dk, sP + rg * TM, q_s + 4 * cg);
    __syncthreads();  // this stage is refilled, and this warp's P rewritten, next step
  }
  float scale[TM], one[TM];
#pragma unroll
  for (int i = 0; i < TM; ++i) scale[i] = p.scale, one[i] = 1.f;
  store_rows<C>(p.dk, b, hk, key0, p.T, dk, scale, cg);
  store_rows<C>(p.dv, b, hk, key0, p.T, dv, one, cg);
}

// dQ of BM queries of one head; BN keys a step.
template <class C>
__global__ void __launch_bounds__(C::kThreads, blocks_per_sm(kDqSmem<C>)) attention_backward_dq(const Params p) {
  constexpr int TM = C::TM, TN = C::TN, TC = C::TC, LD = C::LD, BN = C::BN;
  extern __shared__ __align__(16) float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, rg = lane / C::CG, cg = lane % C::CG;
  float* sQ = smem;
  float* sO = sQ + C::BM * LD;  // dO
  float* sK = sO + C::BM * LD;  // two stages
  float* sV = sK + 2 * BN * LD;  // two stages
  float* sP = sV + 2 * BN * LD + warp * BN * C::LDP;
  const int mb = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, hk = h / (p.H / p.Hkv);
  const int m0 = mb * C::BM, wrow = warp * C::WR, row0 = m0 + wrow + rg;
  const int tiles = key_tiles(p, m0 + C::BM, BN);

  load_rows<C, C::BM>(sQ, p.q, b, h, m0, p.T);
  load_rows<C, C::BM>(sO, p.dout, b, h, m0, p.T);
  load_rows<C, BN>(sK, p.k, b, hk, 0, p.T);
  load_rows<C, BN>(sV, p.v, b, hk, 0, p.T);
  cp_async_commit();
  float lse2[TM], dl[TM];  // the thread's rows' lse in base 2 and delta (zeros past T)
  const int64_t stat = (int64_t(b) * p.H + h) * p.T;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int row = row0 + C::RG * i;
    lse2[i] = row < p.T ? p.lse[stat + row] * kLog2e : 0.f;
    dl[i] = row < p.T ? p.delta[stat + row] : 0.f;
  }

  float4 dq[TM][TC];
  zero(dq);
  for (int nb = 0; nb < tiles; ++nb) {
    const int stage = nb & 1, n0 = nb * BN;
    next_kv_tile<C>(sK, sV, p, b, hk, nb, tiles);
    const float* k_s = sK + stage * BN * LD;
    const float* v_s = sV + stage * BN * LD;
    float s[TM][TN], ds[TM][TN];  // S, then P; dP, then dS
    zero(s);
    zero(ds);
    gemm_abt<C>(s, sQ + (wrow + rg) * LD, k_s + cg * LD);
    gemm_abt<C>(ds, sO + (wrow + rg) * LD, v_s + cg * LD);
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) s[i][j] = exp2f(fmaf(s[i][j], p.scale_log2, -lse2[i]));
    if (needs_mask<C>(p, n0, m0 + wrow)) mask_keys<C>(s, 0.f, p, row0, n0 + cg);
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) ds[i][j] = s[i][j] * (ds[i][j] - dl[i]);
    store_p<C>(sP, ds, rg, cg);
    __syncwarp();
    gemm_pv<C>(dq, sP + rg * TM, k_s + 4 * cg);
    __syncthreads();
  }
  float scale[TM];
#pragma unroll
  for (int i = 0; i < TM; ++i) scale[i] = p.scale;
  store_rows<C>(p.dq, b, h, row0, p.T, dq, scale, cg);
}

// ---------------------------------------------------------------- launch shapes
enum class Pass { kForward, kDkDv, kDq };

// One kernel variant: its function and launch shape (a block per BM rows of each head: query
// heads, or kv heads for dk / dv), and the tile products it computes (for its FLOP rate).
using KernelFn = void (*)(Params);
struct Kernel {
  std::string name;
  Pass pass;
  KernelFn fn;
  int threads, rows;
  size_t smem;
  int products;
  dim3 grid(const Params& p) const {
    return dim3(unsigned((p.T + rows - 1) / rows), unsigned(pass == Pass::kDkDv ? p.Hkv : p.H), unsigned(p.B));
  }
};

template <class C, size_t SMEM>
std::string tile_name() {
  char s[96];
  std::snprintf(s, sizeof s, "BM %3d BN %2d, %d warps, %dx%d a thread, %d/SM", C::BM, C::BN, C::NW, C::TM, C::TN,
                blocks_per_sm(SMEM));
  return s;
}
template <class C>
Kernel forward_kernel() {
  return {tile_name<C, kForwardSmem<C>>(), Pass::kForward, attention_forward<C>, C::kThreads, C::BM, kForwardSmem<C>,
          2};
}
template <class C>
Kernel dkdv_kernel() {
  return {tile_name<C, kDkDvSmem<C>>(), Pass::kDkDv, attention_backward_dkdv<C>, C::kThreads, C::BM, kDkDvSmem<C>, 4};
}
template <class C>
Kernel dq_kernel() {
  return {tile_name<C, kDqSmem<C>>(), Pass::kDq, attention_backward_dq<C>, C::kThreads, C::BM, kDqSmem<C>, 3};
}

// The variants of each pass at head dim hd (the first the default), and the delta pre-pass.
std::vector<Kernel> variants(int hd, Pass pass) {
  if (hd == 64) {
    if (pass == Pass::kForward)
      return {forward_kernel<Tiles<64, 4, 4, 4, 64>>(), forward_kernel<Tiles<64, 4, 4, 8, 32>>(),
              forward_kernel<Tiles<64, 4, 4, 4, 32>>()};
    if (pass == Pass::kDkDv)
      return {dkdv_kernel<Tiles<64, 4, 4, 4, 32>>(), dkdv_kernel<Tiles<64, 4, 4, 4, 64>>(),
              dkdv_kernel<Tiles<64, 8, 4, 4, 32>>()};
    return {dq_kernel<Tiles<64, 4, 4, 4, 32>>(), dq_kernel<Tiles<64, 4, 4, 4, 64>>(),
            dq_kernel<Tiles<64, 4, 4, 8, 32>>(), dq_kernel<Tiles<64, 8, 4, 4, 32>>()};
  }
  if (pass == Pass::kForward)
    return {forward_kernel<Tiles<128, 4, 4, 4, 32>>(), forward_kernel<Tiles<128, 4, 4, 4, 64>>()};
  if (pass == Pass::kDkDv) return {dkdv_kernel<Tiles<128, 4, 4, 2, 32>>(), dkdv_kernel<Tiles<128, 4, 4, 4, 32>>()};
  return {dq_kernel<Tiles<128, 4, 4, 4, 32>>(), dq_kernel<Tiles<128, 4, 4, 2, 32>>()};
}

constexpr int kDeltaThreads = 256;
KernelFn delta_kernel(int hd) { return hd == 64 ? attention_delta<64> : attention_delta<128>; }
dim3 delta_grid(const Params& p, int hd) {  // grid-stride past 65535 blocks
  const int64_t rows = int64_t(p.B) * p.H * p.T, per_block = kDeltaThreads / 32 * (128 / hd);
  return dim3(unsigned(std::min<int64_t>((rows + per_block - 1) / per_block, 65535)));
}

// ---------------------------------------------------------------- CPU reference and check
struct Shape {
  int B, H, Hkv, T, hd;
  bool causal;
  size_t nq() const { return size_t(B) * T * H * hd; }    // q, dout, out, dq
  size_t nk() const { return size_t(B) * T * Hkv * hd; }  // k, v, dk, dv
  size_t nl() const { return size_t(B) * H * T; }         // lse, delta
};

// The check's shapes: T = 1, 17, 127 and 256, causal and not, hd 64 and 128; T = 127 with
// grouped-query heads (2 query heads a kv head).
std::vector<Shape> check_shapes() {
  std::vector<Shape> all;
  for (int hd : {64, 128})
    for (int T : {1, 17, 127, 256})
      for (bool causal : {false, true})
        all.push_back(T == 127 ? Shape{1, 4, 2, T, hd, causal} : Shape{2, 3, 3, T, hd, causal});
  return all;
}

struct Inputs {
  std::vector<float> q, k, v, dout;
};
// Random inputs whose scores spread ~1.3 after scaling: peaked enough that the running max matters.
Inputs make_inputs(const Shape& s) {
  return {random_values(s.nq(), 1, 2.f), random_values(s.nk(), 2, 2.f), random_values(s.nk(), 3),
          random_values(s.nq(), 4)};
}

// Params over buffers in the kernels' layouts: q, dout, out, dq [B, T, H, hd]; k, v, dk, dv
// [B, T, Hkv, hd]; lse, delta [B, H, T].
Params params_of(const Shape& s, float* q, float* k, float* v, float* dout, float* out, float* dq, float* dk,
                 float* dv, float* lse, float* delta) {
  auto rows = [&](float* base, int heads) {
    return Rows{base, int64_t(s.T) * heads * s.hd, s.hd, int64_t(heads) * s.hd};
  };
  Params p;
  p.q = rows(q, s.H), p.k = rows(k, s.Hkv), p.v = rows(v, s.Hkv), p.dout = rows(dout, s.H);
  p.o = rows(out, s.H), p.dq = rows(dq, s.H), p.dk = rows(dk, s.Hkv), p.dv = rows(dv, s.Hkv);
  p.lse = lse, p.delta = delta;
  p.B = s.B, p.H = s.H, p.Hkv = s.Hkv, p.T = s.T;
  p.scale = 1.f / std::sqrt(float(s.hd)), p.scale_log2 = p.scale * kLog2e;
  p.causal = s.causal;
  return p;
}

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

// Naive float64 attention forward and backward of the float32 inputs, one query row at a time.
Reference attention_reference(const Shape& s, const Inputs& in) {
  const int hd = s.hd;
  const double scale = 1.0 / std::sqrt(double(hd));
  Reference r{std::vector<double>(s.nq()), std::vector<double>(s.nl()), std::vector<double>(s.nq()),
              std::vector<double>(s.nk()), std::vector<double>(s.nk())};
  auto qi = [&](int b, int t, int h) { return ((size_t(b) * s.T + t) * s.H + h) * hd; };
  auto ki = [&](int b, int t, int h) { return ((size_t(b) * s.T + t) * s.Hkv + h) * hd; };
  auto dot = [&](const float* x, const float* y) {
    double a = 0;
    for (int d = 0; d < hd; ++d) a += double(x[d]) * y[d];
    return a;
  };
  std::vector<double> pr(s.T);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h) {
      const int hk = h / (s.H / s.Hkv);
      for (int i = 0; i < s.T; ++i) {
        const int n = s.causal ? i + 1 : s.T;
        const float* qr = &in.q[qi(b, i, h)];
        double mx = -INFINITY, sum = 0, delta = 0;
        for (int j = 0; j < n; ++j) mx = std::max(mx, pr[j] = scale * dot(qr, &in.k[ki(b, j, hk)]));
        for (int j = 0; j < n; ++j) sum += std::exp(pr[j] - mx);
        const double lse = mx + std::log(sum);
        r.lse[(size_t(b) * s.H + h) * s.T + i] = lse;
        double* o = &r.out[qi(b, i, h)];
        for (int j = 0; j < n; ++j) {
          pr[j] = std::exp(pr[j] - lse);
          for (int d = 0; d < hd; ++d) o[d] += pr[j] * in.v[ki(b, j, hk) + d];
        }
        const float* dor = &in.dout[qi(b, i, h)];
        for (int d = 0; d < hd; ++d) delta += dor[d] * o[d];
        for (int j = 0; j < n; ++j) {
          const double ds = pr[j] * (dot(dor, &in.v[ki(b, j, hk)]) - delta);
          for (int d = 0; d < hd; ++d) {
            r.dq[qi(b, i, h) + d] += scale * ds * in.k[ki(b, j, hk) + d];
            r.dk[ki(b, j, hk) + d] += scale * ds * qr[d];
            r.dv[ki(b, j, hk) + d] += pr[j] * dor[d];
          }
        }
      }
    }
  return r;
}

// The largest |got - want| relative to want's largest magnitude, floored at 0.1 (the outputs here
// reach 0.3 to 7, but dq and dk at T = 1 are zeros up to rounding: one key, so dS = P (dP - delta)
// = 0); infinite if got has a non-finite value.
double max_rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, top = 0.1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, std::fabs(got[i] - want[i]));
    top = std::max(top, std::fabs(want[i]));
  }
  return err / top;
}

// Plain float32 sums of up to 256 terms, exp2f / log2f and the base-2 rescale stay near 1e-6; a
// wrong index or a missed key shows at 1e-3 or more.
constexpr double kTolerance = 1e-4;

// Every variant of every pass on one shape against the float64 reference; the backward variants
// start from the default forward's out and lse. The backend (the GPU, or the CPU emulation) holds
// the problem: Params p over its buffers, clear(buffer, n) to NaN, run(kernel) (false if it does
// not fit a block), run_delta() and fetch(buffer, n) to the host.
template <class Backend>
bool check_shape(const Shape& s, const Inputs& in, Backend& be) {
  const Reference ref = attention_reference(s, in);
  const Params& p = be.p;
  char head[96];
  std::snprintf(head, sizeof head, "hd %3d T %3d %-6s B %d H %d/%d", s.hd, s.T, s.causal ? "causal" : "full", s.B,
                s.H, s.Hkv);
  bool ok = true;
  auto run = [&](const Kernel& k, std::initializer_list<std::pair<float*, size_t>> outputs) {
    for (const auto& [buffer, n] : outputs) be.clear(buffer, n);  // NaN until written
    if (be.run(k)) return true;
    std::printf("%s  %s does not fit a block\n", head, k.name.c_str());
    return false;
  };
  auto report = [&](const char* pass, const Kernel& k, std::initializer_list<std::pair<const char*, double>> errs) {
    bool pass_ok = true;
    std::printf("%s  %-8s %-44s", head, pass, k.name.c_str());
    for (const auto& [what, e] : errs) {
      std::printf(" %s %.1e", what, e);
      pass_ok = pass_ok && e <= kTolerance;
    }
    std::printf("  %s\n", pass_ok ? "ok" : "FAIL");
    ok = ok && pass_ok;
  };
  for (const Kernel& k : variants(s.hd, Pass::kForward))
    if (run(k, {{p.o.p, s.nq()}, {p.lse, s.nl()}}))
      report("forward", k, {{"out", max_rel_error(be.fetch(p.o.p, s.nq()), ref.out)},
                            {"lse", max_rel_error(be.fetch(p.lse, s.nl()), ref.lse)}});
  run(variants(s.hd, Pass::kForward)[0], {{p.o.p, s.nq()}, {p.lse, s.nl()}});
  be.run_delta();
  for (const Kernel& k : variants(s.hd, Pass::kDkDv))
    if (run(k, {{p.dk.p, s.nk()}, {p.dv.p, s.nk()}}))
      report("dk dv", k, {{"dk", max_rel_error(be.fetch(p.dk.p, s.nk()), ref.dk)},
                          {"dv", max_rel_error(be.fetch(p.dv.p, s.nk()), ref.dv)}});
  for (const Kernel& k : variants(s.hd, Pass::kDq))
    if (run(k, {{p.dq.p, s.nq()}})) report("dq", k, {{"dq", max_rel_error(be.fetch(p.dq.p, s.nq()), ref.dq)}});
  return ok;
}

}  // namespace

// Everything above (kernels, launch shapes, reference, check) also runs on the CPU under
// tests/flash_emulation/cpu_emulation.h: dev/cuda/03_attention_f32_cpu.cpp.
#ifndef ATTENTION_F32_KERNELS_ONLY
namespace {

// ---------------------------------------------------------------- host
#define CUBLAS_CHECK(call)                                                                         \
  do {                                                                                             \
    const cublasStatus_t s_ = (call);                                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      std::fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #call, int(s_)); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

float* device_buffer(size_t n) {  // NaN until written
  float* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
  CUDA_CHECK(cudaMemset(d, 0xff, n * sizeof(float)));
  return d;
}

int max_smem_per_block() {
  int v = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  return v;
}

// One problem on the GPU: the check's backend, and the timing's.
struct Gpu {
  Shape s;
  Params p;
  Gpu(const Shape& shape, const Inputs& in) : s(shape) {
    std::vector<float> unused;
    p = params_of(s, to_device<float>(in.q, unused), to_device<float>(in.k, unused), to_device<float>(in.v, unused),
                  to_device<float>(in.dout, unused), device_buffer(s.nq()), device_buffer(s.nq()),
                  device_buffer(s.nk()), device_buffer(s.nk()), device_buffer(s.nl()), device_buffer(s.nl()));
  }
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;
  ~Gpu() {
    for (float* d : {p.q.p, p.k.p, p.v.p, p.dout.p, p.o.p, p.dq.p, p.dk.p, p.dv.p, p.lse, p.delta})
      CUDA_CHECK(cudaFree(d));
  }
  // Launches k without waiting (false if its shared memory does not fit a block).
  bool launch(const Kernel& k) const {
    static const int max_smem = max_smem_per_block();
    if (k.smem > size_t(max_smem)) return false;
    if (k.smem > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(k.smem)));
    k.fn<<<k.grid(p), k.threads, k.smem>>>(p);
    CUDA_CHECK(cudaGetLastError());
    return true;
  }
  void launch_delta() const {
    delta_kernel(s.hd)<<<delta_grid(p, s.hd), kDeltaThreads>>>(p);
    CUDA_CHECK(cudaGetLastError());
  }
  void clear(float* d, size_t n) const { CUDA_CHECK(cudaMemset(d, 0xff, n * sizeof(float))); }
  bool run(const Kernel& k) const {
    const bool fits = launch(k);
    CUDA_CHECK(cudaDeviceSynchronize());
    return fits;
  }
  void run_delta() const {
    launch_delta();
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<float> fetch(const float* d, size_t n) const { return to_host(d, n); }
};

// FP32 FMA peak: 128 lanes a multiprocessor, 2 FLOPs an FMA, at the peak clock.
double fp32_peak_tflops() {
  int sms = 0, khz = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  return sms * 128.0 * 2.0 * khz * 1e3 / 1e12;
}

// cuBLAS SGEMM on [8192 x 768] x [768 x 768] (row-major; C^T = B^T A^T in cuBLAS's column-major).
void time_sgemm(int reps) {
  const int M = 8192, N = 768, K = 768;
  std::vector<float> unused;
  float* a = to_device<float>(random_values(size_t(M) * K, 5), unused);
  float* b = to_device<float>(random_values(size_t(K) * N, 6), unused);
  float* c = device_buffer(size_t(M) * N);
  cublasHandle_t h;
  CUBLAS_CHECK(cublasCreate(&h));
  const float one = 1.f, zero = 0.f;
  const struct {
    const char* name;
    cublasMath_t mode;
  } modes[] = {
      {"library's mode (DEFAULT | DISALLOW_REDUCED_PRECISION_REDUCTION)",
       static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)},
      {"CUBLAS_PEDANTIC_MATH", CUBLAS_PEDANTIC_MATH},
  };
  for (const auto& m : modes) {
    CUBLAS_CHECK(cublasSetMathMode(h, m.mode));
    const double us = median_us(
        [&] { CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, b, N, a, K, &zero, c, N)); }, reps);
    std::printf("  cublasSgemm 8192x768x768, %s: %.1f us, %.1f TFLOP/s\n", m.name, us, 2.0 * M * N * K / us / 1e6);
  }
  CUBLAS_CHECK(cublasDestroy(h));
  for (float* d : {a, b, c}) CUDA_CHECK(cudaFree(d));
}

// Every variant's time on one problem, then forward, backward (delta + dk / dv + dq) and both, of
// the fastest variant of each pass.
void time_shape(const Shape& s, int reps, double peak) {
  const Gpu g(s, make_inputs(s));
  // FLOPs of one tile product (2 B H T^2 hd, halved causal): the forward has 2, the backward 2.5x.
  const double product = 2.0 * s.B * s.H * double(s.T) * s.T * s.hd * (s.causal ? 0.5 : 1.0);
  std::printf("%dx%dx%dx%d %s (B x H x T x hd), %d kv heads\n", s.B, s.H, s.T, s.hd, s.causal ? "causal" : "full",
              s.Hkv);
  g.launch(variants(s.hd, Pass::kForward)[0]);  // out and lse for the backward
  g.launch_delta();
  const std::vector<Kernel> all[3] = {variants(s.hd, Pass::kForward), variants(s.hd, Pass::kDkDv),
                                      variants(s.hd, Pass::kDq)};
  const char* names[3] = {"forward", "dk dv", "dq"};
  const Kernel* best[3] = {};
  double best_us[3] = {};
  for (int i = 0; i < 3; ++i)
    for (const Kernel& k : all[i]) {
      if (!g.launch(k)) {
        std::printf("  %-8s %-44s does not fit a block\n", names[i], k.name.c_str());
        continue;
      }
      const double us = median_us([&] { g.launch(k); }, reps);
      const double tflops = k.products * product / us / 1e6;
      std::printf("  %-8s %-44s %9.1f us  %5.1f TFLOP/s  %3.0f%% of peak\n", names[i], k.name.c_str(), us, tflops,
                  100 * tflops / peak);
      if (!best[i] || us < best_us[i]) best[i] = &k, best_us[i] = us;
    }
  const double d_us = median_us([&] { g.launch_delta(); }, reps);
  std::printf("  %-8s %-44s %9.1f us\n", "delta", "", d_us);
  if (!best[0] || !best[1] || !best[2]) return;
  auto forward = [&] { g.launch(*best[0]); };
  auto backward = [&] { g.launch_delta(), g.launch(*best[1]), g.launch(*best[2]); };
  const double f = median_us(forward, reps), b = median_us(backward, reps);
  const double fb = median_us([&] { forward(), backward(); }, reps);
  const double fwd_flops = 2 * product;
  std::printf("  fastest: forward %.3f ms %.1f TFLOP/s, backward %.3f ms %.1f TFLOP/s, forward + backward %.3f ms "
              "%.1f TFLOP/s\n",
              f / 1e3, fwd_flops / f / 1e6, b / 1e3, 2.5 * fwd_flops / b / 1e6, fb / 1e3, 3.5 * fwd_flops / fb / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  bool check_only = false;
  int reps = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--check") check_only = true;
    else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: %s [--check] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double peak = fp32_peak_tflops();
  std::printf("%s, %d multiprocessors, FP32 FMA peak %.1f TFLOP/s\n", prop.name, prop.multiProcessorCount, peak);

  bool ok = true;
  std::printf("check (tolerance %.0e of each output's largest value)\n", kTolerance);
  for (const Shape& s : check_shapes()) {
    const Inputs in = make_inputs(s);
    Gpu g(s, in);
    ok = check_shape(s, in, g) && ok;
  }
  std::printf("check: %s\n", ok ? "all ok" : "FAILED");
  if (check_only || !ok) return ok ? 0 : 1;

  std::printf("timing (median of %d, L2 flushed before each)\n", reps);
  time_sgemm(reps);
  for (bool causal : {true, false}) {
    time_shape(Shape{8, 12, 12, 1024, 64, causal}, reps, peak);
    time_shape(Shape{4, 32, 32, 2048, 128, causal}, reps, peak);
  }
  return 0;
}
#endif  // ATTENTION_F32_KERNELS_ONLY
