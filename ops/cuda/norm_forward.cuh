// RMSNorm / LayerNorm forward kernels (layout and conventions: norm_device.cuh).
#pragma once

#include "ops/cuda/norm_device.cuh"

namespace tg::cuda::normk {

// ------------------------------------------------------------------ forward
// y = (x - mean) * rstd * w + b for each row, with rstd = 1 / sqrt(mean((x - mean)^2) + eps)
// (RMSNorm: mean = 0). Fused add first writes r = x + residual (rounded to T) and normalises r.
// Memory per row: reads dim * sizeof(T) (x; twice that with a residual), writes dim * sizeof(T)
// (y; twice with r) + 4 or 8 bytes of statistics. w and b are read once per thread, not per row.
// The fused add of one vector: x + residual, rounded to T (what gets normalised).
template <class T, int N>
__device__ __forceinline__ Pack<T, N> sum_pack(const Pack<T, N>& x, const Pack<T, N>& res) {
  float sum[N];
#pragma unroll
  for (int e = 0; e < N; ++e) sum[e] = elem(x, e) + elem(res, e);
  return pack_of<T, N>(sum);
}
// y of one vector: (x - mean) * rstd * w + b (w, b read only when present).
template <bool LN, class T, int N>
__device__ __forceinline__ void y_values(float (&out)[N], const Pack<T, N>& x, float mu, float rs,
                                         const Pack<T, N>& w, bool has_w, const Pack<T, N>& b, bool has_b) {
#pragma unroll
  for (int e = 0; e < N; ++e) {
    float f = (elem(x, e) - mu) * rs;
    if (has_w) f = f * elem(w, e);
    if (LN && has_b) f = f + elem(b, e);
    out[e] = f;
  }
}

template <class T, int N, int ITERS, bool LN>
__global__ void __launch_bounds__(max_tpr(ITERS), min_blocks(ITERS)) norm_fwd_kernel(FwdArgs<T> a) {
  using P = Pack<T, N>;
  __shared__ float smem[2 * 32];
  const T *x = a.x, *res = a.res, *w = a.w, *b = a.b;
  T *y = a.y, *r = a.r;
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
      if (in[i]) load_pack<Access::stream>(xv[i], x + off + v * N);
      else zero_pack(xv[i]);
    }
    if (res) {
      P rv[ITERS];
#pragma unroll
      for (int i = 0; i < ITERS; ++i) {
        const int v = lane + i * a.tpr;
        if (in[i]) load_pack<Access::stream>(rv[i], res + off + v * N);
        else zero_pack(rv[i]);
      }
#pragma unroll
      for (int i = 0; i < ITERS; ++i) {
        float sum[N];
#pragma unroll
        for (int e = 0; e < N; ++e) sum[e] = elem(xv[i], e) + elem(rv[i], e);
        xv[i] = pack_of<T, N>(sum);
        if (in[i]) store_pack<Access::stream>(r + off + (lane + i * a.tpr) * N, xv[i]);
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
      if (w) load_pack<Access::cached>(wv, w + v * N);
      if (LN && b) load_pack<Access::cached>(bv, b + v * N);
      float out[N];
      y_values<LN>(out, xv[i], mu, rs, wv, w, bv, b);
      store_pack<Access::stream>(y + off + v * N, pack_of<T, N>(out));
    }
  }
}

// Looping forward for rows too wide for registers: pass 1 sums (x, or x + residual, written to
// r), pass 2 (LayerNorm) the squared deviations, pass 3 writes y. Later passes re-read the row
// (mostly from L2): per row reads 2-3 * dim * sizeof(T) from cache, dim * sizeof(T) from memory.
template <class T, int N, bool LN>
__global__ void __launch_bounds__(1024) norm_fwd_loop_kernel(FwdArgs<T> a) {
  using P = Pack<T, N>;
  __shared__ float smem[2 * 32];
  const T *x = a.x, *res = a.res, *w = a.w, *b = a.b;
  T *y = a.y, *r = a.r;
  int phase = 0;
  for_each_row(a, [&](int64_t row, bool valid, int lane) {
    const int64_t off = row * a.dim;
    const T* src = res ? r : x;  // what gets normalised
    float s[1] = {0.f};
    for (int v = lane; valid && v < a.nv; v += a.tpr) {
      P xv;
      load_pack<Access::stream>(xv, x + off + v * N);
      if (res) {
        P rv;
        load_pack<Access::stream>(rv, res + off + v * N);
        xv = sum_pack(xv, rv);
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
      if (w) load_pack<Access::cached>(wv, w + v * N);
      if (LN && b) load_pack<Access::cached>(bv, b + v * N);
      float out[N];
      y_values<LN>(out, xv, mu, rs, wv, w, bv, b);
      store_pack<Access::stream>(y + off + v * N, pack_of<T, N>(out));
    }
  });
}

}  // namespace tg::cuda::normk
