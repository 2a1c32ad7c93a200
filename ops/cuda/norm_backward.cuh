// RMSNorm / LayerNorm backward kernels: register-resident, staged (Hopper bulk copies),
// looping (wide rows) and dW / dB alone (layout and conventions: norm_device.cuh).
#pragma once

#include "ops/cuda/norm_device.cuh"

namespace tg::cuda::normk {

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
// dx of one row does not depend on <DW, DB> or on the kernel (norm_device.cuh's helpers, the
// same threads per row and the same summation order): the frozen and unfrozen variants give
// bitwise the same dx.
template <class T, int N, int ITERS, bool LN, bool DW, bool DB, bool RES>
__global__ void __launch_bounds__(max_tpr(ITERS), min_blocks(ITERS, DW || DB, std::is_same_v<T, float> && !(DW || DB)))
    norm_bwd_kernel(BwdArgs<T> a) {
  using P = Pack<T, N>;
  __shared__ float smem[2 * 32 * 2];
  const GroupLane gl = group_lane(a.tpr, a.gpb);
  const int group = gl.group, lane = gl.lane;
  const RowRead rr = row_read(a.evict_first);
  int phase = 0;
  // dW / dB accumulators: few per thread in registers, more in the thread's own shared-memory
  // slots (slot (part, i, q) of the group's region is an array over its lanes: no conflicts).
  constexpr int PARTS = int(DW) + int(DB), C = N < 4 ? N : 4, NC = N / C;
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
    // Every load of the row before the first use; zeros outside it add nothing.
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      const int v = lane + i * a.tpr;
      in[i] = valid && v < a.nv;
      if (in[i]) {
        load_row(dyv[i], a.dy + off + v * N, rr);
        load_row(xv[i], a.x + off + v * N, rr);
        load_weight(wv[i], a.w, v);
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
        add_row_terms<LN>(sums, dyv[i], xv[i], wv[i], mu, q * C, q * C + C, [&](int e, float d, float xc) {
          if constexpr (DW) aw.v[e - q * C] = dw_term(aw.v[e - q * C], d, xc, rs);
          if constexpr (DB) ab.v[e - q * C] = __fadd_rn(ab.v[e - q * C], d);
        });
        if constexpr (DW && !kRegAcc) acc_store(&slot(0, i, q), aw);
        if constexpr (DB && !kRegAcc) acc_store(&slot(PARTS - 1, i, q), ab);
        if constexpr (DW && kRegAcc)
#pragma unroll
          for (int k = 0; k < C; ++k) wreg[i][q * C + k] = aw.v[k];
        if constexpr (DB && kRegAcc)
#pragma unroll
          for (int k = 0; k < C; ++k) breg[i][q * C + k] = ab.v[k];
      }
    group_sum(sums, a.tpr, smem, phase);
    const DxCoef kc = dx_coef<LN>(sums, rs, a.inv_dim);
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      if (!in[i]) continue;
      const int v = lane + i * a.tpr;
      P rv;
      if constexpr (RES) load_row(rv, a.dres + off + v * N, rr);
      float out[N];
      dx_values<LN>(out, dyv[i], xv[i], wv[i], mu, kc, rv, RES);
      store_pack<Access::plain>(a.dx + off + v * N, pack_of<T, N>(out));
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
// Global -> shared bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned). No
// L2 policy: a hinted copy slowed this kernel by 30% at one shape, even beside a plain one.
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
// elements), or two vectors and fewer than 16 floats; otherwise one block rather than spilling
// more (a small spill at two blocks still beat one block of 72 registers).
constexpr int staged_min_blocks(int iters, int kept) {
  return (iters == 1 ? kept <= 16 : iters == 2 && kept < 16) ? 2 : 1;
}
constexpr int kStageHeader = 128;  // the mbarriers, before the first stage

template <class T, int N, int ITERS, bool LN, bool DW, bool DB, bool RES>
__global__ void __launch_bounds__(kMaxTpr, staged_min_blocks(ITERS, ITERS * N * (int(DW) + int(DB) + int(RES))))
    norm_bwd_staged_kernel(BwdArgs<T> a, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  // Compiled for a GPU without the bulk-copy engine: compiled_for_sm90() keeps the planner away.
  __trap();
#else
  using P = Pack<T, N>;
  extern __shared__ __align__(128) unsigned char staged_smem[];
  __shared__ float smem[2 * 32 * 2];
  uint64_t* bars = reinterpret_cast<uint64_t*>(staged_smem);
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
    bulk_load(dst, a.x + row * a.dim, row_bytes, &bars[s]);
    bulk_load(dst + row_bytes, a.dy + row * a.dim, row_bytes, &bars[s]);
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
    if (v < a.nv) load_weight(wv[i], a.w, v);
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
        if (v < a.nv) load_pack<Access::plain>(rv[i], a.dres + off + v * N);
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
      add_row_terms<LN>(sums, dyv[i], xv[i], wv[i], mu, 0, N, [&](int e, float d, float xc) {
        if constexpr (DW) wacc[i][e] = dw_term(wacc[i][e], d, xc, rs);
        if constexpr (DB) bacc[i][e] = __fadd_rn(bacc[i][e], d);
      });
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
      dx_values<LN>(out, dyv[i], xv[i], wv[i], mu, kc, rv[i], RES);
      store_pack<Access::plain>(a.dx + off + (lane + i * a.tpr) * N, pack_of<T, N>(out));
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

// Looping backward for rows too wide for registers (gpb == 1), dx alone: pass 1 the sums dx
// needs, pass 2 dx, re-reading x and dy (mostly from L2). dW / dB of such rows come from the
// tiled kernel in a second launch: accumulating them here needs a row-wide partial row for
// every block, a buffer as large as the input.
template <class T, int N, bool LN>
__global__ void __launch_bounds__(1024) norm_bwd_loop_kernel(BwdArgs<T> a) {
  using P = Pack<T, N>;
  __shared__ float smem[2 * 32 * 2];
  const int lane = threadIdx.x;
  int phase = 0;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const int64_t off = row * a.dim;
    const float rs = a.rstd[row], mu = LN ? a.mean[row] : 0.f;
    float sums[LN ? 2 : 1] = {};
    for (int v = lane; v < a.nv; v += a.tpr) {
      P xv, dyv, wv;
      load_pack<Access::cached>(xv, a.x + off + v * N);
      load_pack<Access::cached>(dyv, a.dy + off + v * N);
      load_weight(wv, a.w, v);
      add_row_terms<LN>(sums, dyv, xv, wv, mu, 0, N, [](int, float, float) {});
    }
    group_sum(sums, a.tpr, smem, phase);
    const DxCoef kc = dx_coef<LN>(sums, rs, a.inv_dim);
    for (int v = lane; v < a.nv; v += a.tpr) {
      P xv, dyv, wv, rv;
      load_pack<Access::plain>(dyv, a.dy + off + v * N);
      load_pack<Access::plain>(xv, a.x + off + v * N);
      load_weight(wv, a.w, v);
      if (a.dres) load_pack<Access::plain>(rv, a.dres + off + v * N);
      float out[N];
      dx_values<LN>(out, dyv, xv, wv, mu, kc, rv, a.dres);
      store_pack<Access::plain>(a.dx + off + v * N, pack_of<T, N>(out));
    }
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
// tile rather than one per block (a block per row group wrote and read back 17x the bytes).
// Memory: reads dy (rows * dim * T), x and the statistics (DW); writes splits * (DW + DB) *
// dim * 4 bytes of partials (read back from L2) and dim * T for each of dW, dB.
constexpr int kParamBlock = 256;
struct ParamGrid {
  int cv, tiles, splits;
};
template <class T, int N, bool LN, bool DW, bool DB>
__global__ void __launch_bounds__(kParamBlock, 4) norm_bwd_param_kernel(BwdArgs<T> a, ParamGrid g) {
  using P = Pack<T, N>;
  constexpr int PARTS = int(DW) + int(DB);
  // Rows whose loads a thread issues before their arithmetic: 4, or 2 where the thread holds 16
  // accumulators (bf16 dW and dB), which with 4 rows spilled at the 64 registers that let four
  // blocks share a multiprocessor.
  constexpr int U = PARTS * N >= 16 ? 2 : 4;
  extern __shared__ float4 param_smem[];
  float* lanes = reinterpret_cast<float*>(param_smem);  // [RL][PARTS * N][cv]: the row lanes' sums
  const T *dy = a.dy, *x = a.x;
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

}  // namespace tg::cuda::normk
