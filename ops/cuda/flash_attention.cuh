// Flash-attention kernels (device code: ops/cuda/attention.cu launches them, dev/cuda/
// 02_attention_tiles.cu times other tile shapes of them) on tensor cores for bfloat16 q, k, v of
// head dim 32, 64 or 128, read in any row-aligned strided layout ([B, H, T, hd] views of
// [B, T, H, hd] projections in place), with grouped-query heads (query head h reads kv head
// h / (H / Hkv)). FlashAttention-2's scheme with mma.sync m16n8k16 (bf16 operands, float32
// accumulation); tiles move global -> shared by cp.async (two stages) and shared -> registers by
// ldmatrix. Every block has 4 warps; a warp owns 16 MT rows of its block's 64 MT (queries, or
// keys in the dk / dv pass).
//
// forward: a block per (batch, head, 64 MT queries) streams BN-key tiles of K and V: S = Q K^T,
//   online softmax in registers, O += P V; tiles above the causal diagonal are never loaded, nor
//   (banded: packed documents, sliding windows; kBand) those before the block's band.
//   Writes out and the float32 logsumexp. Traffic: q once, k and v once per query block, out + lse.
// backward: delta = rowsum(dO * O) (one pass over dO and O), then one kernel per wanted
//   gradient family, each summing in a fixed order (deterministic, no atomics):
//   dk / dv: a block per (batch, kv head, 64 keys) walks the query blocks of every query head of
//     its group (banded: up to the last query whose band starts within its keys, found by a
//     binary search since bands only move forward): S^T = K Q^T, P^T, dV += P^T dO,
//     dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q. K and V stay in shared memory;
//     Q, dO, lse and delta (and the queries' first keys) stream.
//   dq: a block per (batch, head, 64 queries) walks the key blocks: S, P, dP = dO V^T, dS,
//     dQ += dS K. It recomputes S and dP (7 tile products in all, FlashAttention-2 has 5) in
//     exchange for no float32 dq accumulator and no atomics.
//   Each kernel after the first is launched to overlap the end of the one before it
//   (programmatic dependent launch).
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "ops/cuda/flash_ptx.cuh"

namespace tg::cuda::flash {

constexpr int kThreads = 128;  // 4 warps
constexpr int kBlock = 64;     // rows of a block: 4 warps x 16
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Shared-memory tiles keep rows of HD bf16 padded by 16 bytes, so the 8 row addresses of one
// ldmatrix fall in 8 different bank groups.
template <int HD>
constexpr int kLd = HD + 8;

using bf16x2 = __nv_bfloat162;

// Rows of a [B, H, T, hd] operand (3-D tensors are [1, H, T, hd]): row (b, h, t) at
// p + b * sb + h * sh + t * st, unit stride along hd.
struct Rows {
  __nv_bfloat16* p = nullptr;
  int64_t sb = 0, sh = 0, st = 0;
  __device__ __nv_bfloat16* at(int b, int h, int t) const { return p + b * sb + h * sh + int64_t(t) * st; }
};

struct Params {
  Rows q, k, v, o, dout, dq, dk, dv;
  float* lse = nullptr;    // [B, H, L] (natural log, of the scaled scores)
  float* delta = nullptr;  // [B, H, L]
  int B = 0, H = 0, Hkv = 0, L = 0, S = 0;
  float scale = 0.f, scale_log2 = 0.f;  // scale * log2(e): softmax in base 2
  bool causal = false;
  // Banded (the kernels' kBand): query i of sequence b sees keys first[b * first_sb + i] <= j <= i,
  // non-decreasing along i (ops/attention_kernels.h); first_sb 0 when every sequence shares it.
  const int* first = nullptr;
  int64_t first_sb = 0;
};

// The first key query i of sequence b sees (i clamped to the last query: the rows of a tile past L
// read a real one, and are never stored).
__device__ __forceinline__ int first_key(const Params& p, int b, int i) {
  return p.first[b * p.first_sb + min(i, p.L - 1)];
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  bf16x2 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// ---------------------------------------------------------------- fragments
// A warp's m16n8 accumulator tile c[4]: lane (g = lane / 4, t = lane % 4) holds rows g (c[0..1])
// and g + 8 (c[2..3]), cols 2t and 2t + 1. Two neighbouring n-tiles of a row block are, rounded
// to bf16, the A fragment of a k16 product: the P V and dS K products take S's registers as is.
// A warp owns MT such 16-row tiles (rows 16 MT warp + 16 mt + ...), so every B fragment it
// loads from shared memory feeds MT products.
__device__ __forceinline__ void to_a_fragment(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// Lane addresses for ldmatrix.x4 on a row-major [rows][LD] tile at (row0, col0):
//   a_rows: the A fragment of rows row0..+15, cols col0..+15;
//   b_rows: the B fragments of two n-tiles whose n runs along the tile's rows (row0..+7, +8..+15)
//           and k along its cols (col0..+15): x4 gives {b0, b1} of n-tile 0 then of n-tile 1;
//   b_cols: the same with k along the rows and n along the cols (for ldsm_x4_t).
template <int LD>
__device__ __forceinline__ const __nv_bfloat16* a_rows(const __nv_bfloat16* s, int row0, int col0, int lane) {
  return s + (row0 + (lane % 8) + 8 * ((lane / 8) % 2)) * LD + col0 + 8 * (lane / 16);
}
template <int LD>
__device__ __forceinline__ const __nv_bfloat16* b_rows(const __nv_bfloat16* s, int row0, int col0, int lane) {
  return s + (row0 + (lane % 8) + 8 * (lane / 16)) * LD + col0 + 8 * ((lane / 8) % 2);
}
template <int LD>
__device__ __forceinline__ const __nv_bfloat16* b_cols(const __nv_bfloat16* s, int row0, int col0, int lane) {
  return a_rows<LD>(s, row0, col0, lane);
}

// n-tiles n and n + 1 of every row tile: acc[mt][n..n+1] += a[mt] times the two B fragments of b
// (as ldmatrix.x4 gives them).
template <int MT, int NT>
__device__ __forceinline__ void mma_two_ntiles(float (&acc)[MT][NT][4], const uint32_t (&a)[MT][4],
                                               const uint32_t (&b)[4], int n) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    mma(acc[mt][n], a[mt], b[0], b[1]);
    mma(acc[mt][n + 1], a[mt], b[2], b[3]);
  }
}

// acc[mt] (16 rows x 8 NT) += A_mt (16 x 16 KT) B^T, B's rows the n dim of a shared tile of
// 8 NT rows at `rows`. a_of(frag, mt, kt) yields A_mt's k-tile kt (registers or ldmatrix).
template <int LD, int KT, int NT, int MT, class AOf>
__device__ __forceinline__ void mma_abt(float (&acc)[MT][NT][4], AOf&& a_of, const __nv_bfloat16* rows, int lane) {
#pragma unroll
  for (int kt = 0; kt < KT; ++kt) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) a_of(a[mt], mt, kt);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldsm_x4(b, b_rows<LD>(rows, np * 16, kt * 16, lane));
      mma_two_ntiles(acc, a, b, 2 * np);
    }
  }
}

// acc[mt] (16 rows x HD) += P_mt (16 x 8 NP, accumulator tiles p[mt]) V, V's rows the k dim of a
// shared tile of 8 NP rows x HD.
template <int LD, int HD, int NP, int MT>
__device__ __forceinline__ void mma_pv(float (&acc)[MT][HD / 8][4], const float (&p)[MT][NP][4],
                                       const __nv_bfloat16* v, int lane) {
#pragma unroll
  for (int kt = 0; kt < NP / 2; ++kt) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) to_a_fragment(a[mt], p[mt][2 * kt], p[mt][2 * kt + 1]);
#pragma unroll
    for (int dp = 0; dp < HD / 16; ++dp) {
      uint32_t b[4];
      ldsm_x4_t(b, b_cols<LD>(v, kt * 16, dp * 16, lane));
      mma_two_ntiles(acc, a, b, 2 * dp);
    }
  }
}

// ROWS x HD rows [t0, t0 + ROWS) of head (b, h) into a shared tile; rows at or past `limit` are
// zeros (their products vanish, so edges need masks only where a softmax sees them). A thread
// copies one 16-byte column chunk of every kRowsPerPass-th row: one address, then fixed strides,
// no division per chunk.
template <int HD, int ROWS>
__device__ __forceinline__ void load_tile(__nv_bfloat16* s, const Rows& g, int b, int h, int t0, int limit) {
  constexpr int kChunks = HD / 8, kRowsPerPass = kThreads / kChunks;
  static_assert(ROWS % kRowsPerPass == 0, "a tile is whole passes of the block's threads");
  const int r0 = threadIdx.x / kChunks, col = (threadIdx.x % kChunks) * 8;
  const __nv_bfloat16* src = g.at(b, h, t0 + r0) + col;
  const int64_t pass_stride = kRowsPerPass * g.st;
#pragma unroll
  for (int k = 0; k < ROWS / kRowsPerPass; ++k) {
    const bool ok = t0 + r0 + k * kRowsPerPass < limit;
    cp_async16(s + (r0 + k * kRowsPerPass) * kLd<HD> + col, ok ? src + k * pass_stride : g.p, ok);
  }
}

// n 4-byte values of a [B, H, L] row statistic (or a band's [B, L] first keys) from index i0 (zeros
// past L).
template <class T>
__device__ __forceinline__ void load_stat(T* s, const T* g, int64_t row_base, int i0, int n, int L) {
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const bool ok = i0 + i < L;
    cp_async4(s + i, g + row_base + (ok ? i0 + i : 0), ok);
  }
}

template <int MT, int NT>
__device__ __forceinline__ void zero(float (&a)[MT][NT][4]) {
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int i = 0; i < NT; ++i) a[m][i][0] = a[m][i][1] = a[m][i][2] = a[m][i][3] = 0.f;
}

// The warp's MT x 16 rows (from row0) of an accumulator, row r times mul[mt][r / 8], as bf16 rows
// (skipped from `limit` on).
template <int HD, int MT>
__device__ __forceinline__ void store_rows(const Rows& dst, int b, int h, int row0, int limit,
                                           const float (&acc)[MT][HD / 8][4], const float (&mul)[MT][2], int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 16 * mt + g + 8 * r;
      if (row >= limit) continue;
      __nv_bfloat16* out = dst.at(b, h, row) + 2 * t;
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt)
        *reinterpret_cast<bf16x2*>(out + dt * 8) =
            __floats2bfloat162_rn(acc[mt][dt][2 * r] * mul[mt][r], acc[mt][dt][2 * r + 1] * mul[mt][r]);
    }
}

template <int MT>
__device__ __forceinline__ void fill(float (&a)[MT][2], float v) {
#pragma unroll
  for (int m = 0; m < MT; ++m) a[m][0] = a[m][1] = v;
}

// A warp's score tile of keys [n0, n0 + BN) for rows from row0 (of sequence b): the scores of keys
// past S, (causal) past their query or (kBand) before their query's first key set to `value`, in
// the tiles where the warp has such keys only (the first key of the warp's last row is the
// largest of its rows'; read here, not kept in a register through the key loop).
template <int MT, int NT, int BN, bool kBand>
__device__ __forceinline__ void mask_scores(float (&s)[MT][NT][4], float value, const Params& p, int n0, int row0,
                                            int g, int t, int b) {
  if (n0 + BN <= p.S && !(p.causal && n0 + BN - 1 > row0) && (!kBand || n0 >= first_key(p, b, row0 + 16 * MT - 1)))
    return;
  if constexpr (kBand) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {  // row by row, its keys [first, last] (fewer registers live)
        const int row = row0 + 16 * mt + g + 8 * r, first = first_key(p, b, row) - n0 - 2 * t;
        const int last = (p.causal ? min(row, p.S - 1) : p.S - 1) - n0 - 2 * t;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int j = 0; j < 2; ++j)
            if (nt * 8 + j < first || nt * 8 + j > last) s[mt][nt][2 * r + j] = value;
      }
  } else {  // the order the unbanded kernels' registers were tuned with
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + nt * 8 + 2 * t + (e & 1), row = row0 + 16 * mt + g + 8 * (e >> 1);
          if (key >= p.S || (p.causal && key > row)) s[mt][nt][e] = value;
        }
  }
}

// Number of key tiles of `bn` keys that queries [m0, m0 + bm) see.
__device__ __forceinline__ int key_tiles(const Params& p, int m0, int bm, int bn) {
  const int keys = p.causal ? min(m0 + bm, p.S) : p.S;
  return (keys + bn - 1) / bn;
}

// The first key tile of `bn` keys that queries from m0 (of sequence b) see: a band only moves
// forward, so query m0's first key is the smallest of the block's.
template <bool kBand>
__device__ __forceinline__ int first_key_tile(const Params& p, int b, int m0, int bn) {
  if constexpr (kBand) return first_key(p, b, m0) / bn;
  else return 0;
}

// The last query from `from` (whose band starts at most at key_end) whose band starts at most at
// key_end: a binary search, since the first keys do not decrease.
__device__ __forceinline__ int last_query_from(const Params& p, int b, int from, int key_end) {
  int lo = from, hi = p.L - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first_key(p, b, mid) <= key_end) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Q-like operands (16 x HD a warp) stay in registers for one row tile; with two, the accumulators
// take the register budget and they are read from shared memory for each product.
template <int HD, int MT>
constexpr bool kInRegisters = MT == 1;

// The A fragments of a warp's MT row tiles (rows row0 + 16 mt ..) of a shared tile, for mma_abt:
// loaded into registers once (kRegs) or read from shared memory for each product.
template <int LD, int KT, int MT, bool kRegs>
struct ARows {
  const __nv_bfloat16* s;
  int row0, lane;
  uint32_t f[kRegs ? MT : 1][KT][4];  // filled by load()
  __device__ __forceinline__ ARows(const __nv_bfloat16* tile, int first_row, int lane_id)
      : s(tile), row0(first_row), lane(lane_id) {}
  __device__ __forceinline__ void load() {
    if constexpr (kRegs)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kt = 0; kt < KT; ++kt) ldsm_x4(f[mt][kt], a_rows<LD>(s, row0 + 16 * mt, kt * 16, lane));
  }
  __device__ __forceinline__ void operator()(uint32_t (&d)[4], int mt, int kt) const {
    if constexpr (kRegs) {
#pragma unroll
      for (int i = 0; i < 4; ++i) d[i] = f[mt][kt][i];
    } else {
      ldsm_x4(d, a_rows<LD>(s, row0 + 16 * mt, kt * 16, lane));
    }
  }
};

// Starts loading key tile nb + 1 of (b, hk) into the other stage, then waits for tile nb (the
// cp.async groups complete in order) and for every thread's copies.
template <int HD, int BN>
__device__ __forceinline__ void next_kv_tile(__nv_bfloat16* sK, __nv_bfloat16* sV, const Params& p, int b, int hk,
                                             int nb, int tiles) {
  constexpr int LD = kLd<HD>;
  const int other = (nb & 1) ^ 1;
  if (nb + 1 < tiles) {
    load_tile<HD, BN>(sK + other * BN * LD, p.k, b, hk, (nb + 1) * BN, p.S);
    load_tile<HD, BN>(sV + other * BN * LD, p.v, b, hk, (nb + 1) * BN, p.S);
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}

// The grid of a flash kernel: x runs over (head, batch), y over the blocks of the sequence. Blocks
// start in blockIdx order, x fastest, so every head's longest causal block starts before any
// shorter one (longest first over the whole grid: no long block is left to run alone at the end).
inline dim3 flash_grid(int seq_blocks, int heads, int batch) {
  return dim3(static_cast<unsigned>(heads) * static_cast<unsigned>(batch), static_cast<unsigned>(seq_blocks));
}

// ---------------------------------------------------------------- band

// Banded attention's first keys (ops/attention_kernels.h's sdpa_band): first[r, i] is the largest
// max(i' - pos[r, i'], i' - window + 1, 0) over i' <= i (pos null: none; window 0: none; a
// position <= 0 starts a document). A warp per row, 32 queries a step: a max-scan across the
// lanes, carried from step to step.
struct BandParams {
  int* first = nullptr;          // [rows, L]
  const int64_t* pos = nullptr;  // [rows, L] or null
  int rows = 0, L = 0, window = 0;
};
__global__ void __launch_bounds__(kThreads) attention_band(const BandParams bp) {
  const int r = blockIdx.x * (kThreads / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  const int L = bp.L, window = bp.window;
  int* first = bp.first;
  const int64_t* pos = bp.pos;
  if (r >= bp.rows) return;
  int carried = 0;
  for (int i0 = 0; i0 < L; i0 += 32) {
    const int i = i0 + lane;
    int lo = 0;
    if (i < L && pos) {
      const int64_t q = pos[int64_t(r) * L + i];
      lo = q <= 0 ? i : q >= i ? 0 : i - static_cast<int>(q);
    }
    if (i < L && window > 0) lo = max(lo, i - window + 1);
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int before = __shfl_up_sync(0xffffffffu, lo, d);
      if (lane >= d) lo = max(lo, before);
    }
    lo = max(lo, carried);
    if (i < L) first[int64_t(r) * L + i] = lo;
    carried = __shfl_sync(0xffffffffu, lo, 31);
  }
}

// ---------------------------------------------------------------- forward

template <int HD, int MT, int BN, bool kBand = false>
__global__ void __launch_bounds__(kThreads) flash_forward(const Params p) {
  constexpr int LD = kLd<HD>, KT = HD / 16, BM = kBlock * MT, NT = BN / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* sK = sQ + BM * LD;      // two stages
  __nv_bfloat16* sV = sK + 2 * BN * LD;  // two stages
  const int mb = gridDim.y - 1 - blockIdx.y;  // the longest causal blocks start first
  const int h = blockIdx.x % p.H, b = blockIdx.x / p.H, hk = h / (p.H / p.Hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int m0 = mb * BM, wrow = warp * 16 * MT;  // the warp's rows: m0 + wrow + 16 mt + g (+ 8)
  // Key tiles [first_tile, tiles): before the band's start (kBand) and above the causal diagonal
  // none is loaded.
  const int first_tile = first_key_tile<kBand>(p, b, m0, BN), tiles = key_tiles(p, m0, BM, BN);

  load_tile<HD, BM>(sQ, p.q, b, h, m0, p.L);
  load_tile<HD, BN>(sK + (first_tile & 1) * BN * kLd<HD>, p.k, b, hk, first_tile * BN, p.S);
  load_tile<HD, BN>(sV + (first_tile & 1) * BN * kLd<HD>, p.v, b, hk, first_tile * BN, p.S);
  cp_async_commit();

  ARows<LD, KT, MT, kInRegisters<HD, MT>> q(sQ, wrow, lane);
  float o[MT][HD / 8][4];
  zero(o);
  float m[MT][2], l[MT][2];
  fill(m, -INFINITY);
  fill(l, 0.f);
  for (int nb = first_tile; nb < tiles; ++nb) {
    const int stage = nb & 1;
    next_kv_tile<HD, BN>(sK, sV, p, b, hk, nb, tiles);
    if (nb == first_tile) q.load();

    float s[MT][NT][4];
    zero(s);
    mma_abt<LD, KT, NT, MT>(s, q, sK + stage * BN * LD, lane);

    // Keys past S, (causal) past the query and (kBand) before its band are -inf, only in the tiles
    // where the warp has some.
    mask_scores<MT, NT, BN, kBand>(s, -INFINITY, p, nb * BN, m0 + wrow, g, t, b);
    // Online softmax on the raw scores (m is their running max), the scale folded into the
    // exponent: p = exp2(s scale log2(e) - m scale log2(e)), one FFMA and one ex2 a score. The 4
    // lanes of a row group share its max; sums stay per lane until the end.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = m[mt][r];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == -INFINITY ? 0.f : mx * p.scale_log2;  // a row that has seen no key yet
        const float alpha = exp2_approx(m[mt][r] * p.scale_log2 - base);
        m[mt][r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          s[mt][nt][2 * r] = exp2_approx(fmaf(s[mt][nt][2 * r], p.scale_log2, -base));
          s[mt][nt][2 * r + 1] = exp2_approx(fmaf(s[mt][nt][2 * r + 1], p.scale_log2, -base));
          sum += s[mt][nt][2 * r] + s[mt][nt][2 * r + 1];
        }
        l[mt][r] = l[mt][r] * alpha + sum;
#pragma unroll
        for (int dt = 0; dt < HD / 8; ++dt) o[mt][dt][2 * r] *= alpha, o[mt][dt][2 * r + 1] *= alpha;
      }
    mma_pv<LD, HD, NT, MT>(o, s, sV + stage * BN * LD, lane);
    __syncthreads();  // this stage is refilled next iteration
  }
  if constexpr (kBand) cp_async_wait<0>();  // a block whose band starts past S ran no step

  float inv[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      inv[mt][r] = sum > 0.f ? 1.f / sum : 0.f;
      const int row = m0 + wrow + 16 * mt + g + 8 * r;
      if (t == 0 && row < p.L)
        p.lse[(int64_t(b) * p.H + h) * p.L + row] =
            sum > 0.f ? (m[mt][r] * p.scale_log2 + log2_approx(sum)) * kLn2 : -INFINITY;
    }
  store_rows<HD, MT>(p.o, b, h, m0 + wrow, p.L, o, inv, lane);
}

// ---------------------------------------------------------------- backward

// delta[b, h, i] = sum_d dout[b, h, i, d] * out[b, h, i, d]: HD / 8 lanes a row, 16 bytes of each
// operand a lane (rows are 16-byte aligned, as cp.async wants), grid-stride over groups of rows.
// Traffic: dout and out read once, delta written once.
template <int HD>
constexpr int kDeltaRowsPerWarp = 32 / (HD / 8);
template <int HD>
__global__ void attention_delta(const Params p) {
  launch_dependents();
  constexpr int kLanes = HD / 8, kRowsPerWarp = kDeltaRowsPerWarp<HD>;
  const int64_t rows = int64_t(p.B) * p.H * p.L;
  const int64_t step = int64_t(gridDim.x) * (blockDim.x / 32) * kRowsPerWarp;
  const int lane = threadIdx.x % 32, sub = lane % kLanes;
  for (int64_t row = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * kRowsPerWarp + lane / kLanes;
       row - lane / kLanes < rows; row += step) {
    float acc = 0.f;
    if (row < rows) {
      const int i = static_cast<int>(row % p.L), h = static_cast<int>((row / p.L) % p.H);
      const int b = static_cast<int>(row / (int64_t(p.L) * p.H));
      const int4 x = *reinterpret_cast<const int4*>(p.dout.at(b, h, i) + 8 * sub);
      const int4 y = *reinterpret_cast<const int4*>(p.o.at(b, h, i) + 8 * sub);
      const bf16x2* xs = reinterpret_cast<const bf16x2*>(&x);
      const bf16x2* ys = reinterpret_cast<const bf16x2*>(&y);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 a = __bfloat1622float2(xs[e]), c = __bfloat1622float2(ys[e]);
        acc += a.x * c.x + a.y * c.y;
      }
    }
#pragma unroll
    for (int off = kLanes / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (sub == 0 && row < rows) p.delta[row] = acc;
  }
}

// dK and / or dV of 64 MT keys of one kv head; BQ queries a step.
// kBand: 2 BQ ints of shared memory more (the steps' first keys).
template <int HD, int BQ, int MT, bool kDK, bool kDV, bool kBand = false>
__global__ void __launch_bounds__(kThreads) flash_backward_dkdv(const Params p) {
  constexpr int LD = kLd<HD>, KT = HD / 16, QT = BQ / 8, BK = kBlock * MT;
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* sV = sK + BK * LD;
  __nv_bfloat16* sQ = sV + BK * LD;      // two stages
  __nv_bfloat16* sO = sQ + 2 * BQ * LD;  // dO, two stages
  float* sL = reinterpret_cast<float*>(sO + 2 * BQ * LD);  // lse, two stages
  float* sD = sL + 2 * BQ;                                 // delta, two stages
  int* sF = reinterpret_cast<int*>(sD + 2 * BQ);           // kBand: first keys, two stages
  const int nb = blockIdx.y, hk = blockIdx.x % p.Hkv, b = blockIdx.x / p.Hkv, group = p.H / p.Hkv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n0 = nb * BK, wrow = warp * 16 * MT;  // the warp's keys: n0 + wrow + 16 mt + g (+ 8)
  // Query blocks [first, blocks): none before the keys (causal), none past the last query whose
  // band starts within them (kBand).
  int first = p.causal ? n0 / BQ : 0, blocks = (p.L + BQ - 1) / BQ;
  if constexpr (kBand)
    if (n0 < p.L) blocks = last_query_from(p, b, n0, n0 + BK - 1) / BQ + 1;
  const int steps = blocks > first ? group * (blocks - first) : 0;

  float dk[MT][HD / 8][4], dv[MT][HD / 8][4];
  zero(dk);
  zero(dv);
  // The steps walk query blocks m = first .. blocks - 1 of each query head h of the group; (h, m)
  // are counters, so no step divides by a runtime count.
  auto next = [&](int& h, int& m) {
    if (++m == blocks) m = first, ++h;
  };
  auto load_inputs = [&](int h, int m, int stage) {
    const int i0 = m * BQ;
    load_tile<HD, BQ>(sQ + stage * BQ * LD, p.q, b, h, i0, p.L);
    load_tile<HD, BQ>(sO + stage * BQ * LD, p.dout, b, h, i0, p.L);
    load_stat(sL + stage * BQ, p.lse, (int64_t(b) * p.H + h) * p.L, i0, BQ, p.L);
    if (kBand) load_stat(sF + stage * BQ, p.first, b * p.first_sb, i0, BQ, p.L);
  };
  auto load_delta = [&](int h, int m, int stage) {
    if (kDK) load_stat(sD + stage * BQ, p.delta, (int64_t(b) * p.H + h) * p.L, m * BQ, BQ, p.L);
  };
  if (steps > 0) {
    load_tile<HD, BK>(sK, p.k, b, hk, n0, p.S);
    if (kDK) load_tile<HD, BK>(sV, p.v, b, hk, n0, p.S);
    load_inputs(hk * group, first, 0);
  }
  // Launched to overlap attention_delta's end: delta is read only after it has finished. Then the
  // dq kernel (which reads delta, not dk / dv) may start in this kernel's tail.
  wait_for_previous_kernel();
  launch_dependents();
  if (steps > 0) {
    load_delta(hk * group, first, 0);
    cp_async_commit();
  }
  const ARows<LD, KT, MT, false> k_rows(sK, wrow, lane), v_rows(sV, wrow, lane);
  int h = hk * group, m = first;
  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1, i0 = m * BQ;
    next(h, m);
    if (step + 1 < steps) {
      load_inputs(h, m, stage ^ 1);
      load_delta(h, m, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16 *q_s = sQ + stage * BQ * LD, *do_s = sO + stage * BQ * LD;
    const float *l_s = sL + stage * BQ, *d_s = sD + stage * BQ;
    const int* f_s = sF + stage * BQ;

    float pt[MT][QT][4];  // S^T, then P^T
    zero(pt);
    mma_abt<LD, KT, QT, MT>(pt, k_rows, q_s, lane);
    // P^T = exp2(S^T scale log2(e) - lse log2(e)) (one FFMA and one ex2 a score); zero for keys
    // past the query, only in the steps where the warp has some.
#pragma unroll
    for (int nt = 0; nt < QT; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float lse2 = l_s[nt * 8 + 2 * t + j] * kLog2e;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r)
            pt[mt][nt][2 * r + j] = exp2_approx(fmaf(pt[mt][nt][2 * r + j], p.scale_log2, -lse2));
      }
    if (p.causal && i0 < n0 + wrow + 16 * MT - 1)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < QT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int qi = i0 + nt * 8 + 2 * t + (e & 1), key = n0 + wrow + 16 * mt + g + 8 * (e >> 1);
            if (key > qi) pt[mt][nt][e] = 0.f;
          }
    // Zero for keys before the query's band, only in the steps where some query's band starts
    // past the warp's first key (the step's last query has the largest first key).
    if (kBand && f_s[min(BQ, p.L - i0) - 1] > n0 + wrow)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < QT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (n0 + wrow + 16 * mt + g + 8 * (e >> 1) < f_s[nt * 8 + 2 * t + (e & 1)]) pt[mt][nt][e] = 0.f;
    if (kDV) mma_pv<LD, HD, QT, MT>(dv, pt, do_s, lane);
    if (kDK) {
      float ds[MT][QT][4];  // dP^T, then dS^T
      zero(ds);
      mma_abt<LD, KT, QT, MT>(ds, v_rows, do_s, lane);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < QT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            ds[mt][nt][e] = pt[mt][nt][e] * (ds[mt][nt][e] - d_s[nt * 8 + 2 * t + (e & 1)]);
      mma_pv<LD, HD, QT, MT>(dk, ds, q_s, lane);
    }
    __syncthreads();  // this stage is refilled next step
  }
  float scale[MT][2], one[MT][2];
  fill(scale, p.scale);
  fill(one, 1.f);
  if (kDK) store_rows<HD, MT>(p.dk, b, hk, n0 + wrow, p.S, dk, scale, lane);
  if (kDV) store_rows<HD, MT>(p.dv, b, hk, n0 + wrow, p.S, dv, one, lane);
}

// dQ of 64 MT queries of one head; BN keys a step.
template <int HD, int BN, int MT, bool kBand = false>
__global__ void __launch_bounds__(kThreads) flash_backward_dq(const Params p) {
  constexpr int LD = kLd<HD>, KT = HD / 16, NT = BN / 8, BM = kBlock * MT;
  constexpr bool kRegs = kInRegisters<HD, MT>;
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* sO = sQ + BM * LD;      // dO
  __nv_bfloat16* sK = sO + BM * LD;      // two stages
  __nv_bfloat16* sV = sK + 2 * BN * LD;  // two stages
  const int mb = gridDim.y - 1 - blockIdx.y;
  const int h = blockIdx.x % p.H, b = blockIdx.x / p.H, hk = h / (p.H / p.Hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int m0 = mb * BM, wrow = warp * 16 * MT;
  const int first_tile = first_key_tile<kBand>(p, b, m0, BN), tiles = key_tiles(p, m0, BM, BN);  // as forward's

  load_tile<HD, BM>(sQ, p.q, b, h, m0, p.L);
  load_tile<HD, BM>(sO, p.dout, b, h, m0, p.L);
  load_tile<HD, BN>(sK + (first_tile & 1) * BN * kLd<HD>, p.k, b, hk, first_tile * BN, p.S);
  load_tile<HD, BN>(sV + (first_tile & 1) * BN * kLd<HD>, p.v, b, hk, first_tile * BN, p.S);
  cp_async_commit();
  float lse2[MT][2], dl[MT][2];  // this thread's rows' lse in base 2 and delta (zeros past L)
  const int64_t stat = (int64_t(b) * p.H + h) * p.L;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = m0 + wrow + 16 * mt + g + 8 * r;
      lse2[mt][r] = row < p.L ? p.lse[stat + row] * kLog2e : 0.f;
      dl[mt][r] = row < p.L ? p.delta[stat + row] : 0.f;
    }

  ARows<LD, KT, MT, kRegs> q(sQ, wrow, lane), o(sO, wrow, lane);
  float dq[MT][HD / 8][4];
  zero(dq);
  for (int nb = first_tile; nb < tiles; ++nb) {
    const int stage = nb & 1;
    next_kv_tile<HD, BN>(sK, sV, p, b, hk, nb, tiles);
    if (nb == first_tile) q.load(), o.load();
    const __nv_bfloat16 *k_s = sK + stage * BN * LD, *v_s = sV + stage * BN * LD;
    float pr[MT][NT][4], ds[MT][NT][4];  // P; dP, then dS
    zero(pr);
    zero(ds);
    mma_abt<LD, KT, NT, MT>(pr, q, k_s, lane);
    mma_abt<LD, KT, NT, MT>(ds, o, v_s, lane);
    // P = exp2(S scale log2(e) - lse log2(e)), zero for keys past S, (causal) past the query or
    // (kBand) before its band (only in the tiles where the warp has some); dS = P (dP - delta).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) pr[mt][nt][e] = exp2_approx(fmaf(pr[mt][nt][e], p.scale_log2, -lse2[mt][e >> 1]));
    mask_scores<MT, NT, BN, kBand>(pr, 0.f, p, nb * BN, m0 + wrow, g, t, b);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) ds[mt][nt][e] = pr[mt][nt][e] * (ds[mt][nt][e] - dl[mt][e >> 1]);
    mma_pv<LD, HD, NT, MT>(dq, ds, k_s, lane);
    __syncthreads();
  }
  if constexpr (kBand) cp_async_wait<0>();  // a block whose band starts past S ran no step
  float scale[MT][2];
  fill(scale, p.scale);
  store_rows<HD, MT>(p.dq, b, h, m0 + wrow, p.L, dq, scale, lane);
  // Launched to overlap the dk / dv kernel, whose outputs it does not read: it only must not finish
  // before that kernel does, so that what follows in the stream sees dk and dv.
  wait_for_previous_kernel();
}

}  // namespace tg::cuda::flash
