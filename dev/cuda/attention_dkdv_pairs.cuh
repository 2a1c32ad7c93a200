// A dk / dv kernel by warp pairs, against the library's flash_backward_dkdv (whose warps each own
// 16 keys and do all four products): each pair of warps owns 32 keys; its even warp computes
// S^T = K Q^T, P^T and dV += P^T dO, and passes P^T (bf16) to its odd warp through shared memory,
// which computes dP^T = V dO^T, dS^T = P^T (dP^T - delta) and dK += dS^T Q. Every B fragment a
// warp loads from shared memory then feeds two row tiles: a step reads Q and dO twice a pair
// (once plain, once transposed) where the library reads them four times, for the same MMAs.
// (ncu put the library kernel at 77% of its L1 / shared throughput and 45% of its tensor pipe at
// 4x32x2048x128.) Costs: P^T in bf16 for dS (the library keeps it in float32), 8 KB more shared
// memory, a third barrier a step. Its shared-memory layout and step loading are the library
// kernel's, written out again here so the library kernel's code stays as measured; adopting this
// kernel means sharing them. Checked on the CPU by dev/cuda/02_attention_tiles_cpu.cpp, timed by
// dev/cuda/02_attention_tiles.cu ("pairs").
#pragma once

#include "ops/cuda/flash_attention.cuh"

namespace tg::cuda::flash {

template <int HD, int BQ>
constexpr size_t kPairsSmem = size_t(2 * kBlock + 4 * BQ) * kLd<HD> * sizeof(__nv_bfloat16) +
                              4 * BQ * sizeof(float) + 2 * 2 * (BQ / 8) * 32 * sizeof(uint2);

template <int HD, int BQ, bool kDK, bool kDV>
__global__ void __launch_bounds__(kThreads) flash_backward_dkdv_pairs(const Params p) {
  constexpr int LD = kLd<HD>, KT = HD / 16, QT = BQ / 8, BK = kBlock;
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* sV = sK + BK * LD;
  __nv_bfloat16* sQ = sV + BK * LD;      // two stages
  __nv_bfloat16* sO = sQ + 2 * BQ * LD;  // dO, two stages
  float* sL = reinterpret_cast<float*>(sO + 2 * BQ * LD);  // lse, two stages
  float* sD = sL + 2 * BQ;                                 // delta, two stages
  uint2* sP = reinterpret_cast<uint2*>(sD + 2 * BQ);       // P^T of each pair, [pair][mt][nt][lane]
  const int nb = blockIdx.y, hk = blockIdx.x % p.Hkv, b = blockIdx.x / p.Hkv, group = p.H / p.Hkv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int pair = warp / 2, role = warp % 2;  // role 0: P^T and dV; role 1: dS^T and dK
  const int n0 = nb * BK, wrow = 32 * pair;    // the pair's keys: n0 + wrow + 16 mt + g (+ 8)
  const int first = p.causal ? n0 / BQ : 0, blocks = (p.L + BQ - 1) / BQ;
  const int steps = blocks > first ? group * (blocks - first) : 0;

  float acc[2][HD / 8][4];  // dV (role 0) or dK (role 1) of the pair's 32 keys
  zero(acc);
  auto next = [&](int& h, int& m) {
    if (++m == blocks) m = first, ++h;
  };
  auto load_inputs = [&](int h, int m, int stage) {
    const int i0 = m * BQ;
    load_tile<HD, BQ>(sQ + stage * BQ * LD, p.q, b, h, i0, p.L);
    load_tile<HD, BQ>(sO + stage * BQ * LD, p.dout, b, h, i0, p.L);
    load_stat(sL + stage * BQ, p.lse, (int64_t(b) * p.H + h) * p.L, i0, BQ, p.L);
  };
  auto load_delta = [&](int h, int m, int stage) {
    if (kDK) load_stat(sD + stage * BQ, p.delta, (int64_t(b) * p.H + h) * p.L, m * BQ, BQ, p.L);
  };
  if (steps > 0) {
    load_tile<HD, BK>(sK, p.k, b, hk, n0, p.S);
    if (kDK) load_tile<HD, BK>(sV, p.v, b, hk, n0, p.S);
    load_inputs(hk * group, first, 0);
  }
  wait_for_previous_kernel();
  launch_dependents();
  if (steps > 0) {
    load_delta(hk * group, first, 0);
    cp_async_commit();
  }
  const ARows<LD, KT, 2, false> k_rows(sK, wrow, lane), v_rows(sV, wrow, lane);
  uint2* pair_p = sP + pair * 2 * QT * 32;
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

    float sc[2][QT][4];  // role 0: S^T, then P^T; role 1: dP^T, then dS^T
    zero(sc);
    if (role == 0) {
      mma_abt<LD, KT, QT, 2>(sc, k_rows, q_s, lane);
#pragma unroll
      for (int nt = 0; nt < QT; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float lse2 = l_s[nt * 8 + 2 * t + j] * kLog2e;
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r)
              sc[mt][nt][2 * r + j] = exp2_approx(fmaf(sc[mt][nt][2 * r + j], p.scale_log2, -lse2));
        }
      if (p.causal && i0 < n0 + wrow + 31)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < QT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int qi = i0 + nt * 8 + 2 * t + (e & 1), key = n0 + wrow + 16 * mt + g + 8 * (e >> 1);
              if (key > qi) sc[mt][nt][e] = 0.f;
            }
      if (kDK)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < QT; ++nt)
            pair_p[(mt * QT + nt) * 32 + lane] =
                make_uint2(pack_bf16(sc[mt][nt][0], sc[mt][nt][1]), pack_bf16(sc[mt][nt][2], sc[mt][nt][3]));
    } else if (kDK) {
      mma_abt<LD, KT, QT, 2>(sc, v_rows, do_s, lane);
    }
    __syncthreads();  // P^T written
    if (role == 0) {
      if (kDV) mma_pv<LD, HD, QT, 2>(acc, sc, do_s, lane);
    } else if (kDK) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < QT; ++nt) {
          uint2 w = pair_p[(mt * QT + nt) * 32 + lane];
          const float2 lo = __bfloat1622float2(*reinterpret_cast<bf16x2*>(&w.x));
          const float2 hi = __bfloat1622float2(*reinterpret_cast<bf16x2*>(&w.y));
          const float pt[4] = {lo.x, lo.y, hi.x, hi.y};
#pragma unroll
          for (int e = 0; e < 4; ++e) sc[mt][nt][e] = pt[e] * (sc[mt][nt][e] - d_s[nt * 8 + 2 * t + (e & 1)]);
        }
      mma_pv<LD, HD, QT, 2>(acc, sc, q_s, lane);
    }
    __syncthreads();  // this stage and P^T are refilled next step
  }
  float mul[2][2];
  if (role == 0 && kDV) {
    fill(mul, 1.f);
    store_rows<HD, 2>(p.dv, b, hk, n0 + wrow, p.S, acc, mul, lane);
  } else if (role == 1 && kDK) {
    fill(mul, p.scale);
    store_rows<HD, 2>(p.dk, b, hk, n0 + wrow, p.S, acc, mul, lane);
  }
}

}  // namespace tg::cuda::flash
