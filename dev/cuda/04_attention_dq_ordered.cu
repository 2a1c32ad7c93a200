/*
One-pass deterministic flash-attention backward (issue #21): the library's dk / dv kernel
(ops/cuda/flash_attention.cuh, flash_backward_dkdv) that also produces dQ, summed into a float32
buffer in a fixed order of key blocks (FlashAttention-3's deterministic mode), against the
library's two kernels (dk / dv, then dq recomputing S and dP). dev/cuda/04_attention_dq_ordered.md
has the design, the budgets and what would justify a port.

  dkdvdq <HD, BQ, finish>: 64 keys a block (16 a warp), BQ queries a step; after dS^T is known
    the block writes it to shared memory as bf16, each warp takes 16 query rows x HD / (4 / (BQ /
    16)) columns of dQ_part = dS K, and the block adds its tile to dq_acc when the query block's
    turn counter says so. finish "fused": the last key block of the order rounds the sum to bf16
    (times the scale) into dq itself; "convert": every key block stores float32 and a last kernel
    converts dq_acc. "atomic": float32 atomics in any order (FlashAttention-2's way), for scale.
  Order: query block m sums key blocks n_hi(m), n_hi(m) - 1, ..., 0 (the diagonal one first,
    causal). A block's (key block, kv head, batch) comes from a ticket taken at its start (an
    atomic counter; key block n is x = key_blocks - 1 - n of the ticket's x fastest): a block only
    waits for the one that took the previous ticket, which is running or done (no reliance on the
    hardware's dispatch order) and, causal, reached query block m one step earlier in its walk.

Checks (each variant, every shape): dk and dv bitwise the library's (same arithmetic, same walk),
dq within bf16 rounding of the library's, dq / dk / dv bitwise equal over 5 reruns; T 17, 127, 1000,
1024, causal and not, 4 heads with 4 and 2 kv heads. Then times (CUDA events, L2 flushed, median
of 50) the library's dk dv + dq against each variant at 8x12x1024x64 and 4x32x2048x128.

Build and run (sm_90; -Xptxas -v prints each kernel's registers and spills; the run prints them too):
  nvcc -O3 -std=c++20 -arch=sm_90 --expt-relaxed-constexpr -Xptxas -v -I. \
       -o attention_dq_ordered dev/cuda/04_attention_dq_ordered.cu
  ./attention_dq_ordered            checks and times every variant
  ./attention_dq_ordered --profile  one launch of each kernel at 4x32x2048x128 (for ncu)
  ./attention_dq_ordered --streams  the library's dk dv + dq on one stream and on two
Results: 04_attention_dq_ordered.md.
*/
#include <array>
#include <cstring>

#include "common.cuh"

#include "ops/cuda/flash_attention.cuh"

using namespace tg::cuda::flash;

namespace {

// ---------------------------------------------------------------- the turn of a query block

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release(int* p, int v) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// Spins until *turn == rank. A wait of 2 s means the order deadlocked (a bug): trap, so the run
// fails with a launch error instead of hanging the device call (no printf: it takes a stack frame).
__device__ void wait_turn(const int* turn, int rank) {
  const uint64_t start = global_ns();
  while (load_acquire(turn) != rank)
    if (global_ns() - start > 2000000000ull) __trap();
}

// The last key block (of kBlock keys) that query block m (of BQ queries) sees; dQ(m) sums key
// blocks n_hi(m), n_hi(m) - 1, ..., 0 in this order (n sees m from m = n kBlock / BQ on).
template <int BQ>
__device__ __forceinline__ int last_key_block(const Params& p, int m, int key_blocks) {
  return p.causal ? min(key_blocks - 1, ((m + 1) * BQ - 1) / kBlock) : key_blocks - 1;
}

// ---------------------------------------------------------------- the one-pass kernel

// How a block's dQ tile reaches dq: in the turn order, the last key block rounding into dq
// (fused) or every block storing float32 for a convert kernel; or, unordered, float32 atomics
// into a zeroed dq_acc and a convert kernel (FlashAttention-2's way: fast, not reproducible).
enum Mode { kOrderedFused, kOrderedConvert, kAtomic };
__device__ unsigned long long g_wait_ns;  // nanoseconds thread 0s spent waiting for their turn

// dK, dV of 64 keys of one kv head and their part of dQ; BQ queries a step. dq_acc: float32
// [B, H, L, HD]; turns: int [B, H, ceil(L / BQ)] and ticket, zero at launch. The S^T ... dK code
// is the library's flash_backward_dkdv<HD, BQ, 1, true, true> loop as is (dk / dv bitwise the same).
template <int HD, int BQ, int kMode, bool kFenceAll, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    flash_backward_dkdvdq(const Params p, float* dq_acc, int* turns, int* ticket) {
  constexpr int LD = kLd<HD>, KT = HD / 16, QT = BQ / 8, MT = 1, BK = kBlock;
  constexpr int LDS = BQ + 8;  // dS^T rows: BQ bf16 padded by 16 bytes, as kLd
  // dQ_part: a warp owns 16 query rows x DC columns (BQ 64: 16 rows, every column; BQ 32: half).
  constexpr int kRowTiles = BQ / 16, DC = HD / (4 / kRowTiles);
  static_assert(BQ == 32 || BQ == 64, "dQ_part splits BQ 32 or 64 query rows over the 4 warps");
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* sV = sK + BK * LD;
  __nv_bfloat16* sQ = sV + BK * LD;      // two stages
  __nv_bfloat16* sO = sQ + 2 * BQ * LD;  // dO, two stages
  float* sL = reinterpret_cast<float*>(sO + 2 * BQ * LD);  // lse, two stages
  float* sD = sL + 2 * BQ;                                 // delta, two stages
  __nv_bfloat16* sS = reinterpret_cast<__nv_bfloat16*>(sD + 2 * BQ);  // dS^T [BK][LDS]
  __shared__ int ticket_s;
  if (threadIdx.x == 0) ticket_s = atomicAdd(ticket, 1);
  __syncthreads();
  const int key_blocks = gridDim.x, nb = key_blocks - 1 - ticket_s % key_blocks;  // see Order above
  const int hk = ticket_s / key_blocks % gridDim.y, b = ticket_s / (key_blocks * gridDim.y), group = p.H / p.Hkv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n0 = nb * BK, wrow = warp * 16 * MT;  // the warp's keys: n0 + wrow + g (+ 8)
  const int qrow = 16 * (warp % kRowTiles), qcol = DC * (warp / kRowTiles);  // its dQ_part tile
  const int first = p.causal ? n0 / BQ : 0, blocks = (p.L + BQ - 1) / BQ;
  const int steps = blocks > first ? group * (blocks - first) : 0;

  uint64_t waited = 0;
  float dk[MT][HD / 8][4], dv[MT][HD / 8][4];
  zero(dk);
  zero(dv);
  auto load_step = [&](int step, int stage) {
    const int h = hk * group + step / (blocks - first), i0 = (first + step % (blocks - first)) * BQ;
    const int64_t stat = (int64_t(b) * p.H + h) * p.L;
    load_tile<HD, BQ>(sQ + stage * BQ * LD, p.q, b, h, i0, p.L);
    load_tile<HD, BQ>(sO + stage * BQ * LD, p.dout, b, h, i0, p.L);
    load_stat(sL + stage * BQ, p.lse, stat, i0, BQ, p.L);
    load_stat(sD + stage * BQ, p.delta, stat, i0, BQ, p.L);
  };
  if (steps > 0) {
    load_tile<HD, BK>(sK, p.k, b, hk, n0, p.S);
    load_tile<HD, BK>(sV, p.v, b, hk, n0, p.S);
    load_step(0, 0);
    cp_async_commit();
  }
  const ARows<LD, KT, MT, false> k_rows(sK, wrow, lane), v_rows(sV, wrow, lane);
  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    if (step + 1 < steps) {
      load_step(step + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int h = hk * group + step / (blocks - first), m = first + step % (blocks - first), i0 = m * BQ;
    const __nv_bfloat16 *q_s = sQ + stage * BQ * LD, *do_s = sO + stage * BQ * LD;
    const float *l_s = sL + stage * BQ, *d_s = sD + stage * BQ;

    float pt[MT][QT][4];  // S^T, then P^T
    zero(pt);
    mma_abt<LD, KT, QT, MT>(pt, k_rows, q_s, lane);
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
    mma_pv<LD, HD, QT, MT>(dv, pt, do_s, lane);
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

    // dS^T to shared memory as bf16 (the rounding the dK product used). Keys past S are zeros:
    // their K rows are zeros but their P^T = exp(-lse) is not masked and can overflow.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = wrow + g + 8 * r;
      const bool past_s = n0 + key >= p.S;
#pragma unroll
      for (int nt = 0; nt < QT; ++nt)
        *reinterpret_cast<uint32_t*>(sS + key * LDS + nt * 8 + 2 * t) =
            past_s ? 0u : pack_bf16(ds[0][nt][2 * r], ds[0][nt][2 * r + 1]);
    }
    __syncthreads();
    // dQ_part (queries i0 + qrow .. +15, columns qcol .. + DC) = dS K: dS's A fragments are
    // transposed loads of dS^T (keys k0.., queries qrow..), K's B fragments as V's in mma_pv.
    float dqp[1][DC / 8][4];
    zero(dqp);
#pragma unroll
    for (int kt = 0; kt < BK / 16; ++kt) {
      uint32_t a[1][4];
      ldsm_x4_t(a[0], b_rows<LDS>(sS, kt * 16, qrow, lane));
#pragma unroll
      for (int dp = 0; dp < DC / 16; ++dp) {
        uint32_t kb[4];
        ldsm_x4_t(kb, b_cols<LD>(sK, kt * 16, qcol + dp * 16, lane));
        mma_two_ntiles(dqp, a, kb, 2 * dp);
      }
    }

    // Add the tile when it is this key block's turn: rank 0 (the first of the order) stores, the
    // last (key block 0) with a fused finish writes bf16 dq; loads and stores at L2 (.cg), where
    // the previous block's stores are.
    if constexpr (kMode == kAtomic) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = i0 + qrow + g + 8 * r;
        if (row >= p.L) continue;
        float* acc = dq_acc + ((int64_t(b) * p.H + h) * p.L + row) * HD + qcol + 2 * t;
#pragma unroll
        for (int dt = 0; dt < DC / 8; ++dt)
          atomicAdd(reinterpret_cast<float2*>(acc + dt * 8), make_float2(dqp[0][dt][2 * r], dqp[0][dt][2 * r + 1]));
      }
      __syncthreads();  // sS and this stage are refilled next step
      continue;
    }
    const int rank = last_key_block<BQ>(p, m, key_blocks) - nb;
    int* turn = turns + (int64_t(b) * p.H + h) * blocks + m;
    if (rank > 0) {
      if (threadIdx.x == 0) {
        const uint64_t w0 = global_ns();
        wait_turn(turn, rank);
        waited += global_ns() - w0;
      }
      __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = i0 + qrow + g + 8 * r;
      if (row >= p.L) continue;
      float* acc = dq_acc + ((int64_t(b) * p.H + h) * p.L + row) * HD + qcol + 2 * t;
      __nv_bfloat16* out = p.dq.at(b, h, row) + qcol + 2 * t;
      // The previous sums in batches of kBatch loads before any store: a store between two loads
      // of dq_acc (which may alias, for all the compiler knows) made every load a round trip to L2.
      constexpr int kBatch = 8;
#pragma unroll
      for (int d0 = 0; d0 < DC / 8; d0 += kBatch) {
        float2 sum[kBatch];
#pragma unroll
        for (int i = 0; i < kBatch; ++i)
          sum[i] = rank > 0 ? __ldcg(reinterpret_cast<const float2*>(acc + (d0 + i) * 8)) : make_float2(0.f, 0.f);
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
          const int dt = d0 + i;
          const float2 v = make_float2(sum[i].x + dqp[0][dt][2 * r], sum[i].y + dqp[0][dt][2 * r + 1]);
          if (kMode == kOrderedFused && nb == 0)
            *reinterpret_cast<bf16x2*>(out + dt * 8) = __floats2bfloat162_rn(v.x * p.scale, v.y * p.scale);
          else
            __stcg(reinterpret_cast<float2*>(acc + dt * 8), v);
        }
      }
    }
    if (kFenceAll) __threadfence();  // (the release below is cumulative: the lab measures this fence)
    __syncthreads();  // every thread's part is in; also: this stage is refilled next step
    if (threadIdx.x == 0) store_release(turn, rank + 1);
  }
  if (threadIdx.x == 0 && waited) atomicAdd(&g_wait_ns, waited);
  float scale[MT][2], one[MT][2];
  fill(scale, p.scale);
  fill(one, 1.f);
  store_rows<HD, MT>(p.dk, b, hk, n0 + wrow, p.S, dk, scale, lane);
  store_rows<HD, MT>(p.dv, b, hk, n0 + wrow, p.S, dv, one, lane);
}

// dq = bf16(dq_acc scale), 8 elements a thread (two 16-byte loads, one 16-byte store).
template <int HD>
__global__ void dq_from_acc(const Params p, const float* dq_acc) {
  constexpr int kChunks = HD / 8;
  const int64_t chunks = int64_t(p.B) * p.H * p.L * kChunks;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = c / kChunks;
    const int col = static_cast<int>(c % kChunks) * 8;
    const int i = static_cast<int>(row % p.L), h = static_cast<int>((row / p.L) % p.H);
    const int b = static_cast<int>(row / (int64_t(p.L) * p.H));
    const float4 x = __ldcs(reinterpret_cast<const float4*>(dq_acc + row * HD + col));
    const float4 y = __ldcs(reinterpret_cast<const float4*>(dq_acc + row * HD + col + 4));
    const uint4 o{pack_bf16(x.x * p.scale, x.y * p.scale), pack_bf16(x.z * p.scale, x.w * p.scale),
                  pack_bf16(y.x * p.scale, y.y * p.scale), pack_bf16(y.z * p.scale, y.w * p.scale)};
    *reinterpret_cast<uint4*>(p.dq.at(b, h, i) + col) = o;
  }
}

// ---------------------------------------------------------------- host side

std::vector<uint16_t> bits_of(const __nv_bfloat16* d, size_t n) {
  std::vector<uint16_t> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

size_t differing(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

// q, dout, out, dq in the models' [B, T, H, hd] memory, k, v, dk, dv in [B, T, Hkv, hd], all read
// as [B, heads, T, hd] views.
struct Problem {
  int B, H, Hkv, T, hd;
  bool causal;
  size_t nq, nkv;
  Params p;  // the library's outputs (dq, dk, dv) and out, lse, delta of its forward
  __nv_bfloat16 *dq, *dk, *dv;  // the one-pass kernel's
  float* dq_acc;
  int* turns;
};

Rows rows_of(__nv_bfloat16* base, int T, int heads, int hd) {
  return Rows{base, int64_t(T) * heads * hd, hd, int64_t(heads) * hd};
}

Problem make_problem(int B, int H, int Hkv, int T, int hd, bool causal) {
  Problem pr{B, H, Hkv, T, hd, causal};
  pr.nq = size_t(B) * T * H * hd;
  pr.nkv = size_t(B) * T * Hkv * hd;
  std::vector<float> rounded;
  Params& p = pr.p;
  p.q = rows_of(to_device<__nv_bfloat16>(random_values(pr.nq, 1), rounded), T, H, hd);
  p.k = rows_of(to_device<__nv_bfloat16>(random_values(pr.nkv, 2), rounded), T, Hkv, hd);
  p.v = rows_of(to_device<__nv_bfloat16>(random_values(pr.nkv, 3), rounded), T, Hkv, hd);
  p.dout = rows_of(to_device<__nv_bfloat16>(random_values(pr.nq, 4), rounded), T, H, hd);
  p.o = rows_of(device_zeros<__nv_bfloat16>(pr.nq), T, H, hd);
  p.dq = rows_of(device_zeros<__nv_bfloat16>(pr.nq), T, H, hd);
  p.dk = rows_of(device_zeros<__nv_bfloat16>(pr.nkv), T, Hkv, hd);
  p.dv = rows_of(device_zeros<__nv_bfloat16>(pr.nkv), T, Hkv, hd);
  p.lse = device_zeros<float>(size_t(B) * H * T);
  p.delta = device_zeros<float>(size_t(B) * H * T);
  p.B = B, p.H = H, p.Hkv = Hkv, p.L = T, p.S = T;
  p.scale = 1.f / std::sqrt(float(hd));
  p.scale_log2 = p.scale * 1.4426950408889634f;
  p.causal = causal;
  pr.dq = device_zeros<__nv_bfloat16>(pr.nq);
  pr.dk = device_zeros<__nv_bfloat16>(pr.nkv);
  pr.dv = device_zeros<__nv_bfloat16>(pr.nkv);
  pr.dq_acc = device_zeros<float>(pr.nq);
  pr.turns = device_zeros<int>(size_t(B) * H * ((T + 31) / 32) + 1);  // BQ >= 32, and the ticket
  return pr;
}

void free_problem(Problem& pr) {
  for (void* d : {(void*)pr.p.q.p, (void*)pr.p.k.p, (void*)pr.p.v.p, (void*)pr.p.dout.p, (void*)pr.p.o.p,
                  (void*)pr.p.dq.p, (void*)pr.p.dk.p, (void*)pr.p.dv.p, (void*)pr.p.lse, (void*)pr.p.delta,
                  (void*)pr.dq, (void*)pr.dk, (void*)pr.dv, (void*)pr.dq_acc, (void*)pr.turns})
    CUDA_CHECK(cudaFree(d));
}

template <int HD>
size_t tile_bytes(int rows) {
  return size_t(rows) * kLd<HD> * sizeof(__nv_bfloat16);
}

template <class Kernel, class... Args>
void launch(Kernel kernel, dim3 grid, size_t smem, Args... args) {
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid, kThreads, smem>>>(args...);
  CUDA_CHECK(cudaGetLastError());
}

// The library's kernels at its shapes (ops/cuda/attention.cu, Tiles): forward, delta, dk dv, dq.
template <int HD>
constexpr int kLibDqBN = HD == 128 ? 32 : 64;

template <int HD>
void library_forward(const Problem& pr) {
  launch(flash_forward<HD, 2, 64>, flash_grid((pr.T + 127) / 128, pr.H, pr.B), tile_bytes<HD>(128 + 4 * 64), pr.p);
  const int64_t rows = int64_t(pr.B) * pr.H * pr.T, rows_per_block = 256 / 32 * kDeltaRowsPerWarp<HD>;
  attention_delta<HD><<<unsigned((rows + rows_per_block - 1) / rows_per_block), 256>>>(pr.p);
  CUDA_CHECK(cudaGetLastError());
}
template <int HD, int BQ>
size_t dkdv_smem() {
  return tile_bytes<HD>(2 * kBlock + 4 * BQ) + 4 * BQ * sizeof(float);
}
template <int HD, int BQ>
void library_dkdv(const Problem& pr) {
  launch(flash_backward_dkdv<HD, BQ, 1, true, true>, flash_grid((pr.T + kBlock - 1) / kBlock, pr.Hkv, pr.B),
         dkdv_smem<HD, BQ>(), pr.p);
}
template <int HD>
void library_dq(const Problem& pr) {
  constexpr int BN = kLibDqBN<HD>;
  launch(flash_backward_dq<HD, BN, 2>, flash_grid((pr.T + 127) / 128, pr.H, pr.B), tile_bytes<HD>(2 * 128 + 4 * BN),
         pr.p);
}

// A one-pass variant: head dim, queries a step, fused finish or convert kernel, and the blocks a
// multiprocessor asked of ptxas (__launch_bounds__; 0 leaves ptxas its default).
template <int HD_, int BQ_, int kMode_, bool kFenceAll_ = false, int kMinBlocks_ = 0>
struct Variant {
  static constexpr int HD = HD_, BQ = BQ_, kMode = kMode_, kMinBlocks = kMinBlocks_;
  static constexpr bool kFenceAll = kFenceAll_, kFused = kMode == kOrderedFused;
  static constexpr auto kernel = flash_backward_dkdvdq<HD, BQ, kMode, kFenceAll, kMinBlocks>;
  static size_t smem() { return dkdv_smem<HD, BQ>() + size_t(kBlock) * (BQ + 8) * sizeof(__nv_bfloat16); }
  static const char* name() {
    static char s[64];
    std::snprintf(s, sizeof s, "dkdvdq<%d, BQ %d, %s%s, min %d>", HD, BQ,
                  kMode == kAtomic ? "atomic" : kFused ? "fused" : "convert", kFenceAll ? " fence all" : "", kMinBlocks);
    return s;
  }
};

// The one-pass backward: turns zeroed, the kernel, (convert) the float32 sum to bf16.
template <class V>
void one_pass(const Problem& pr) {
  Params p = pr.p;
  p.dq = rows_of(pr.dq, pr.T, pr.H, pr.hd), p.dk = rows_of(pr.dk, pr.T, pr.Hkv, pr.hd);
  p.dv = rows_of(pr.dv, pr.T, pr.Hkv, pr.hd);
  const size_t turns = size_t(pr.B) * pr.H * ((pr.T + V::BQ - 1) / V::BQ);
  CUDA_CHECK(cudaMemsetAsync(pr.turns, 0, (turns + 1) * sizeof(int)));
  if (V::kMode == kAtomic) CUDA_CHECK(cudaMemsetAsync(pr.dq_acc, 0, pr.nq * sizeof(float)));
  launch(V::kernel, dim3((pr.T + kBlock - 1) / kBlock, pr.Hkv, pr.B), V::smem(), p, pr.dq_acc, pr.turns,
         pr.turns + turns);
  if (!V::kFused) {
    dq_from_acc<V::HD><<<unsigned(std::min<size_t>((pr.nq / 8 + 255) / 256, 132 * 16)), 256>>>(p, pr.dq_acc);
    CUDA_CHECK(cudaGetLastError());
  }
}

template <class Kernel>
void print_resources(const char* name, Kernel kernel, size_t smem) {
  cudaFuncAttributes a;
  CUDA_CHECK(cudaFuncGetAttributes(&a, kernel));
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  std::printf("  %-36s %3d registers, %4zu B local (spills), %6zu B shared, %d blocks / SM\n", name, a.numRegs,
              size_t(a.localSizeBytes), smem, per_sm);
}

// One variant at one shape: the library's backward (dk dv at the same BQ) as the reference, then
// the one-pass kernel 6 times. Returns whether everything matched.
template <class V>
bool check_variant(const Problem& pr) {
  library_forward<V::HD>(pr);
  library_dkdv<V::HD, V::BQ>(pr);
  library_dq<V::HD>(pr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> want_dq = to_host(pr.p.dq.p, pr.nq);
  const std::vector<uint16_t> lib_dq = bits_of(pr.p.dq.p, pr.nq), lib_dk = bits_of(pr.p.dk.p, pr.nkv),
                              lib_dv = bits_of(pr.p.dv.p, pr.nkv);
  std::vector<uint16_t> dq0, dk0, dv0;
  size_t rerun_diffs = 0;
  for (int run = 0; run < 6; ++run) {
    // NaNs everywhere first: an output element never written, or a dq_acc read before its write, shows.
    CUDA_CHECK(cudaMemset(pr.dq, 0xff, pr.nq * 2));
    CUDA_CHECK(cudaMemset(pr.dk, 0xff, pr.nkv * 2));
    CUDA_CHECK(cudaMemset(pr.dv, 0xff, pr.nkv * 2));
    CUDA_CHECK(cudaMemset(pr.dq_acc, 0xff, pr.nq * sizeof(float)));
    one_pass<V>(pr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> dq = bits_of(pr.dq, pr.nq), dk = bits_of(pr.dk, pr.nkv), dv = bits_of(pr.dv, pr.nkv);
    if (run == 0) {
      dq0 = std::move(dq), dk0 = std::move(dk), dv0 = std::move(dv);
    } else {
      rerun_diffs += differing(dq, dq0) + differing(dk, dk0) + differing(dv, dv0);
    }
  }
  const size_t dk_diff = differing(dk0, lib_dk), dv_diff = differing(dv0, lib_dv);
  const size_t dq_same = pr.nq - differing(dq0, lib_dq);
  float dq_max = 0;
  for (float w : want_dq) dq_max = std::max(dq_max, std::fabs(w));
  std::vector<float> got_dq(pr.nq);
  for (size_t i = 0; i < pr.nq; ++i) got_dq[i] = bf16_value(dq0[i]);
  char label[160];
  std::snprintf(label, sizeof label, "  %s %dx%d(kv %d)x%dx%d %-6s dq vs library", V::name(), pr.B, pr.H, pr.Hkv,
                pr.T, V::HD, pr.causal ? "causal" : "full");
  // Two bf16 ulps of the value, or 1e-3 of the largest |dq| (sums that cancel).
  const bool dq_ok = check(label, got_dq, want_dq, 1.f / 128, 1e-3f * dq_max);
  // Atomics add in any order: dq may move between reruns (reported, not a failure).
  const bool ok = dq_ok && dk_diff == 0 && dv_diff == 0 && (rerun_diffs == 0 || V::kMode == kAtomic);
  std::printf("      dq bitwise the library's: %.1f%%; dk / dv bits differing: %zu / %zu; over 5 reruns: %zu%s\n",
              100.0 * dq_same / pr.nq, dk_diff, dv_diff, rerun_diffs, ok ? "" : "  FAILED");
  return ok;
}

template <class V>
bool check_shapes() {
  bool ok = true;
  for (int T : {17, 127, 1000, 1024})
    for (bool causal : {true, false})
      for (int Hkv : {4, 2}) {
        Problem pr = make_problem(2, 4, Hkv, T, V::HD, causal);
        ok = check_variant<V>(pr) && ok;
        free_problem(pr);
      }
  return ok;
}

// A one-pass variant against the library's dk dv + dq, checked first; its dq must keep its bits
// over the 53 timed runs too.
template <class V>
bool time_variant(const Problem& pr, double library_us) {
  const bool ok = check_variant<V>(pr);
  const std::vector<uint16_t> checked = bits_of(pr.dq, pr.nq);
  const unsigned long long zero_ns = 0;
  CUDA_CHECK(cudaMemcpyToSymbol(g_wait_ns, &zero_ns, sizeof zero_ns));
  const double us = median_us([&] { one_pass<V>(pr); }, 50);
  CUDA_CHECK(cudaDeviceSynchronize());
  unsigned long long wait_ns = 0;
  CUDA_CHECK(cudaMemcpyFromSymbol(&wait_ns, g_wait_ns, sizeof wait_ns));
  // Wait per block-step: 53 runs (3 warm-up), steps = the (query block, key block) pairs of each head.
  const int64_t qb = (pr.T + V::BQ - 1) / V::BQ, kb = (pr.T + kBlock - 1) / kBlock;
  int64_t pairs = 0;
  for (int64_t n = 0; n < kb; ++n) pairs += pr.causal ? qb - n * kBlock / V::BQ : qb;
  const double steps = 53.0 * pairs * pr.B * pr.H;
  const size_t drift = differing(bits_of(pr.dq, pr.nq), checked);
  std::printf("    %-44s %9.1f us  %5.2fx the library's dk dv + dq; waited %.2f us a step%s\n", V::name(), us,
              library_us / us, wait_ns * 1e-3 / steps,
              drift ? (V::kMode == kAtomic ? "  (dq bits moved: atomics)" : "  (dq bits moved over the timed runs: NOT deterministic)") : "");
  return ok && (drift == 0 || V::kMode == kAtomic);
}

// The library's dq kernel on another stream, so that it runs beside the dk / dv kernel (its blocks
// fill the multiprocessors the dk / dv tail leaves idle).
template <int HD>
void library_dkdv_and_dq_concurrently(const Problem& pr) {
  static cudaStream_t side = nullptr;
  static cudaEvent_t fork = nullptr, join = nullptr;
  if (!side) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  }
  constexpr int BN = kLibDqBN<HD>;
  const size_t smem = tile_bytes<HD>(2 * 128 + 4 * BN);
  CUDA_CHECK(cudaFuncSetAttribute(flash_backward_dq<HD, BN, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  CUDA_CHECK(cudaEventRecord(fork, 0));
  CUDA_CHECK(cudaStreamWaitEvent(side, fork));
  library_dkdv<HD, 64>(pr);
  flash_backward_dq<HD, BN, 2><<<flash_grid((pr.T + 127) / 128, pr.H, pr.B), kThreads, smem, side>>>(pr.p);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaEventRecord(join, side));
  CUDA_CHECK(cudaStreamWaitEvent(0, join));
}

template <int HD>
double time_library(const Problem& pr) {
  library_forward<HD>(pr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const double delta = median_us([&] { library_forward<HD>(pr); }, 20);  // forward + delta, for scale
  const double dkdv = median_us([&] { library_dkdv<HD, 64>(pr); }, 50);
  const double dq = median_us([&] { library_dq<HD>(pr); }, 50);
  const double both = median_us([&] { library_dkdv<HD, 64>(pr), library_dq<HD>(pr); }, 50);
  const double side = median_us([&] { library_dkdv_and_dq_concurrently<HD>(pr); }, 50);
  std::printf("  %dx%dx%dx%d %s: library forward + delta %.1f us; dk dv %.1f us, dq %.1f us, both %.1f us, "
              "both on two streams %.1f us\n",
              pr.B, pr.H, pr.T, pr.hd, pr.causal ? "causal" : "full", delta, dkdv, dq, both, side);
  return both;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach the log even if the run is cut short
  if (argc > 1 && !std::strcmp(argv[1], "--streams")) {  // the library's backward, one or two streams
    for (auto [B, H, T] : {std::array<int, 3>{4, 32, 2048}, std::array<int, 3>{1, 16, 8192}}) {
      Problem pr = make_problem(B, H, H, T, 128, true);
      time_library<128>(pr);
      free_problem(pr);
    }
    Problem pr = make_problem(8, 12, 12, 1024, 64, true);
    time_library<64>(pr);
    free_problem(pr);
    return 0;
  }
  if (argc > 1 && !std::strcmp(argv[1], "--profile")) {  // one launch of each kernel, for ncu
    Problem pr = make_problem(4, 32, 32, 2048, 128, true);
    library_forward<128>(pr);
    one_pass<Variant<128, 64, kOrderedFused>>(pr);
    one_pass<Variant<128, 64, kAtomic>>(pr);
    library_dkdv<128, 64>(pr);
    library_dq<128>(pr);
    CUDA_CHECK(cudaDeviceSynchronize());
    return 0;
  }
  std::printf("registers and shared memory (the library's kernels first)\n");
  print_resources("library dkdv<64, BQ 64>", flash_backward_dkdv<64, 64, 1, true, true>, dkdv_smem<64, 64>());
  print_resources("library dq<64, BN 64, MT 2>", flash_backward_dq<64, 64, 2>, tile_bytes<64>(2 * 128 + 4 * 64));
  print_resources("library dkdv<128, BQ 64>", flash_backward_dkdv<128, 64, 1, true, true>, dkdv_smem<128, 64>());
  print_resources("library dkdv<128, BQ 32>", flash_backward_dkdv<128, 32, 1, true, true>, dkdv_smem<128, 32>());
  print_resources("library dq<128, BN 32, MT 2>", flash_backward_dq<128, 32, 2>, tile_bytes<128>(2 * 128 + 4 * 32));
  using H64 = Variant<64, 64, kOrderedFused>;
  using H64Min3 = Variant<64, 64, kOrderedFused, false, 3>;  // 3 blocks a multiprocessor, as the library's dk dv
  using H64Atomic = Variant<64, 64, kAtomic, false, 3>;
  using H128 = Variant<128, 64, kOrderedFused>;
  using H128FenceAll = Variant<128, 64, kOrderedFused, true>;  // the first version: a fence a thread
  using H128Convert = Variant<128, 64, kOrderedConvert>;
  using H128Atomic = Variant<128, 64, kAtomic>;
  print_resources(H64::name(), H64::kernel, H64::smem());
  print_resources(H64Min3::name(), H64Min3::kernel, H64Min3::smem());
  print_resources(H64Atomic::name(), H64Atomic::kernel, H64Atomic::smem());
  print_resources(H128::name(), H128::kernel, H128::smem());
  print_resources(H128FenceAll::name(), H128FenceAll::kernel, H128FenceAll::smem());
  print_resources(H128Convert::name(), H128Convert::kernel, H128Convert::smem());
  print_resources(H128Atomic::name(), H128Atomic::kernel, H128Atomic::smem());

  bool ok = true;
  std::printf("checks: 2 batches, 4 heads\n");
  ok = check_shapes<H64>() && ok;
  ok = check_shapes<H64Min3>() && ok;
  ok = check_shapes<H64Atomic>() && ok;
  ok = check_shapes<H128>() && ok;
  ok = check_shapes<H128Convert>() && ok;
  ok = check_shapes<H128Atomic>() && ok;

  std::printf("times (median of 50, L2 flushed)\n");
  for (bool causal : {true, false}) {
    Problem pr = make_problem(8, 12, 12, 1024, 64, causal);
    const double lib = time_library<64>(pr);
    ok = time_variant<H64>(pr, lib) && ok;
    ok = time_variant<H64Min3>(pr, lib) && ok;
    ok = time_variant<H64Atomic>(pr, lib) && ok;
    free_problem(pr);
  }
  for (bool causal : {true, false}) {
    Problem pr = make_problem(4, 32, 32, 2048, 128, causal);
    const double lib = time_library<128>(pr);
    ok = time_variant<H128>(pr, lib) && ok;
    ok = time_variant<H128FenceAll>(pr, lib) && ok;
    ok = time_variant<H128Convert>(pr, lib) && ok;
    ok = time_variant<H128Atomic>(pr, lib) && ok;
    free_problem(pr);
  }
  std::printf("%s\n", ok ? "ALL CHECKS PASSED" : "SOME CHECKS FAILED");
  return ok ? 0 : 1;
}
