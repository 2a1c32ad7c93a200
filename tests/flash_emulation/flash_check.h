// Runs the library's flash-attention kernels (ops/cuda/flash_attention.cuh) on the CPU under
// cpu_emulation.h: random bf16 problems in the model's layouts, their float64 reference, the error
// measure and ops/cuda/attention.cu's launches. test_flash_emulation.cpp checks the library's
// kernels with it, dev/cuda/02_attention_tiles_cpu.cpp the lab's variants of them.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "flash_ptx_cpu.h"

#include "ops/cuda/flash_attention.cuh"

namespace tg::cuda::flash {
alignas(16) inline unsigned char smem[227 << 10];  // the kernels' `extern __shared__ unsigned char smem[]`
}

namespace flash_check {

using namespace tg::cuda::flash;
using bf16 = __nv_bfloat16;

constexpr double kTolerance = 1e-2;  // of each output's largest magnitude: bf16 P and dS in the MMAs

// Banded attention: documents of 1..max_doc tokens (0: none; shared: one layout for every
// sequence) and / or a sliding window (0: none). Either makes the case banded (and causal).
struct Band {
  int max_doc = 0, window = 0;
  bool shared = false;
  bool on() const { return max_doc > 0 || window > 0; }
};

struct Case {
  int B, H, Hkv, L, S, hd;
  bool causal;
  Band band = {};
};

// One problem in [B, T, H, hd] projections (q, k, v and their gradients, as the model passes
// them), out in the library's [B, H, L, hd] view of [B, L, H, hd], dout contiguous [B, H, L, hd].
struct Problem {
  Case c;
  std::vector<bf16> q, k, v, o, dout, dq, dk, dv;
  std::vector<float> lse, delta;
  std::vector<int64_t> pos;  // banded: position ids [rows, L] (empty: none)
  std::vector<int> first;    // banded: the band pre-pass's first keys [rows, L]
  int band_rows = 0;
  Params p;
  explicit Problem(const Case& cs, uint64_t seed) : c(cs) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> n;
    auto fill = [&](std::vector<bf16>& x, size_t count) {
      x.resize(count);
      for (bf16& e : x) e = __float2bfloat16_rn(n(gen));
    };
    fill(q, size_t(c.B) * c.L * c.H * c.hd);
    fill(k, size_t(c.B) * c.S * c.Hkv * c.hd);
    fill(v, size_t(c.B) * c.S * c.Hkv * c.hd);
    fill(dout, size_t(c.B) * c.H * c.L * c.hd);
    o.assign(q.size(), __float2bfloat16_rn(NAN));
    dq.assign(q.size(), __float2bfloat16_rn(NAN));
    dk.assign(k.size(), __float2bfloat16_rn(NAN));
    dv.assign(v.size(), __float2bfloat16_rn(NAN));
    lse.assign(size_t(c.B) * c.H * c.L, NAN);
    delta.assign(lse.size(), NAN);
    auto proj = [&](std::vector<bf16>& x, int T, int heads) {
      return Rows{x.data(), int64_t(T) * heads * c.hd, c.hd, int64_t(heads) * c.hd};
    };
    p.q = proj(q, c.L, c.H), p.k = proj(k, c.S, c.Hkv), p.v = proj(v, c.S, c.Hkv), p.o = proj(o, c.L, c.H);
    p.dq = proj(dq, c.L, c.H), p.dk = proj(dk, c.S, c.Hkv), p.dv = proj(dv, c.S, c.Hkv);
    p.dout = Rows{dout.data(), int64_t(c.H) * c.L * c.hd, int64_t(c.L) * c.hd, c.hd};
    p.lse = lse.data(), p.delta = delta.data();
    p.B = c.B, p.H = c.H, p.Hkv = c.Hkv, p.L = c.L, p.S = c.S;
    p.scale = 1.f / std::sqrt(float(c.hd));
    p.scale_log2 = p.scale * kLog2e;
    p.causal = c.causal;
    if (!c.band.on()) return;
    band_rows = c.band.shared ? 1 : c.B;
    if (c.band.max_doc > 0) {
      std::uniform_int_distribution<int> doc(1, c.band.max_doc);
      for (int r = 0; r < band_rows; ++r)
        for (int i = 0; i < c.L;)
          for (int n = doc(gen), t = 0; t < n && i < c.L; ++t, ++i) pos.push_back(t);
    }
    first.assign(size_t(band_rows) * c.L, -1);
    const BandParams bp{first.data(), pos.empty() ? nullptr : pos.data(), band_rows, c.L, c.band.window};
    emu::launch(attention_band, dim3(unsigned((band_rows + kThreads / 32 - 1) / (kThreads / 32))), kThreads, 0, bp);
    p.first = first.data();
    p.first_sb = c.band.shared ? 0 : c.L;
  }
  double at(const Rows& r, int b, int h, int t, int d) const { return __bfloat162float(r.at(b, h, t)[d]); }
  // The first key query i of sequence b sees (0 without a band).
  int first_key(int b, int i) const { return first.empty() ? 0 : first[size_t(c.band.shared ? 0 : b) * c.L + i]; }
  // Whether the pre-pass wrote the band's definition: the largest max(i' - pos, i' - window + 1, 0)
  // over i' <= i.
  bool band_as_defined() const {
    for (int r = 0; r < band_rows; ++r)
      for (int i = 0, want = 0; i < c.L; ++i) {
        if (!pos.empty()) want = std::max(want, pos[size_t(r) * c.L + i] <= 0 ? i : i - int(pos[size_t(r) * c.L + i]));
        if (c.band.window > 0) want = std::max(want, i - c.band.window + 1);
        if (first[size_t(r) * c.L + i] != want) return false;
      }
    return true;
  }
};

// The float64 reference from the same bf16 inputs: [B, H, L | S, hd] arrays and lse [B, H, L].
struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
  explicit Reference(const Problem& pr) {
    const Case& c = pr.c;
    const Params& p = pr.p;
    o.assign(size_t(c.B) * c.H * c.L * c.hd, 0.0), dq.assign(o.size(), 0.0), lse.assign(size_t(c.B) * c.H * c.L, 0.0);
    dk.assign(size_t(c.B) * c.Hkv * c.S * c.hd, 0.0), dv.assign(dk.size(), 0.0);
    for (int b = 0; b < c.B; ++b)
      for (int h = 0; h < c.H; ++h) {
        const int hk = h / (c.H / c.Hkv);
        for (int i = 0; i < c.L; ++i) {
          // keys [j0, keys): from the band's first (0 without one) to the causal end
          const int keys = c.causal ? std::min(i + 1, c.S) : c.S, j0 = std::min(pr.first_key(b, i), keys);
          std::vector<double> s(keys, 0.0), dp(keys, 0.0);
          double mx = -INFINITY, sum = 0.0, delta = 0.0;
          for (int j = j0; j < keys; ++j) {
            double x = 0.0;
            for (int d = 0; d < c.hd; ++d) x += pr.at(p.q, b, h, i, d) * pr.at(p.k, b, hk, j, d);
            s[j] = x * p.scale;
            mx = std::max(mx, s[j]);
          }
          for (int j = j0; j < keys; ++j) sum += std::exp(s[j] - mx);
          const size_t row = (size_t(b) * c.H + h) * c.L + i;
          lse[row] = keys > j0 ? mx + std::log(sum) : -INFINITY;
          for (int j = j0; j < keys; ++j) s[j] = std::exp(s[j] - lse[row]);  // P
          for (int d = 0; d < c.hd; ++d) {
            double acc = 0.0;
            for (int j = j0; j < keys; ++j) acc += s[j] * pr.at(p.v, b, hk, j, d);
            o[row * c.hd + d] = acc;
            delta += acc * pr.at(p.dout, b, h, i, d);
          }
          for (int j = j0; j < keys; ++j) {
            double x = 0.0;
            for (int d = 0; d < c.hd; ++d) x += pr.at(p.dout, b, h, i, d) * pr.at(p.v, b, hk, j, d);
            dp[j] = s[j] * (x - delta);  // dS
          }
          for (int j = j0; j < keys; ++j) {
            const size_t kv = ((size_t(b) * c.Hkv + hk) * c.S + j) * c.hd;
            for (int d = 0; d < c.hd; ++d) {
              dq[row * c.hd + d] += dp[j] * pr.at(p.k, b, hk, j, d) * p.scale;
              dk[kv + d] += dp[j] * pr.at(p.q, b, h, i, d) * p.scale;
              dv[kv + d] += s[j] * pr.at(p.dout, b, h, i, d);
            }
          }
        }
      }
  }
};

// Largest |got - want| over the largest |want| (at least 0.1: with one key dq and dk are 0 but for
// rounding), got read through `rows` ([B, heads, T, hd]).
inline double error(const Problem& pr, const Rows& rows, int heads, int T, const std::vector<double>& want) {
  double worst = 0.0, scale = 0.1;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (int b = 0; b < pr.c.B; ++b)
    for (int h = 0; h < heads; ++h)
      for (int t = 0; t < T; ++t)
        for (int d = 0; d < pr.c.hd; ++d) {
          const double got = pr.at(rows, b, h, t, d), w = want[((size_t(b) * heads + h) * T + t) * pr.c.hd + d];
          worst = std::max(worst, std::isnan(got) ? INFINITY : std::abs(got - w));
        }
  return worst / scale;
}

template <int HD>
constexpr size_t tile_bytes(int rows) {
  return size_t(rows) * kLd<HD> * sizeof(bf16);
}

// The launches of ops/cuda/attention.cu, for its tile shapes (Tiles<HD> there), banded or not.
template <int HD, int MT, int BN, bool kBand = false>
void forward(const Params& p) {
  emu::launch(flash_forward<HD, MT, BN, kBand>, flash_grid((p.L + kBlock * MT - 1) / (kBlock * MT), p.H, p.B),
              kThreads, tile_bytes<HD>(kBlock * MT + 4 * BN), p);
}
template <int HD>
void delta(const Params& p) {
  const int64_t rows = int64_t(p.B) * p.H * p.L, per_block = 256 / 32 * kDeltaRowsPerWarp<HD>;
  emu::launch(attention_delta<HD>, dim3(unsigned((rows + per_block - 1) / per_block)), 256, 0, p);
}
template <int HD, int BQ, int MT, bool DK, bool DV, bool kBand = false>
void dkdv(const Params& p) {
  emu::launch(flash_backward_dkdv<HD, BQ, MT, DK, DV, kBand>,
              flash_grid((p.S + kBlock * MT - 1) / (kBlock * MT), p.Hkv, p.B), kThreads,
              tile_bytes<HD>(2 * kBlock * MT + 4 * BQ) + (kBand ? 6 : 4) * BQ * sizeof(float), p);
}
template <int HD, int BN, int MT, bool kBand = false>
void dq(const Params& p) {
  emu::launch(flash_backward_dq<HD, BN, MT, kBand>, flash_grid((p.L + kBlock * MT - 1) / (kBlock * MT), p.H, p.B),
              kThreads, tile_bytes<HD>(2 * kBlock * MT + 4 * BN), p);
}

// Shapes for head dims 32, 64 and 128 (hd set per check): causal and not, one, two and four query
// heads a kv head, one query, lengths that do not fill a block, more and fewer keys than queries.
inline const Case kCases[] = {
    {1, 2, 1, 70, 70, 0, true}, {1, 2, 2, 130, 70, 0, true}, {1, 2, 1, 70, 130, 0, false},
    {2, 2, 2, 17, 17, 0, true}, {1, 2, 1, 150, 150, 0, true}, {1, 4, 1, 1, 1, 0, true}, {1, 4, 1, 64, 64, 0, false},
    // banded: documents per sequence, shared, a window, both; more and fewer keys
    {1, 2, 1, 150, 150, 0, true, {.max_doc = 50}}, {2, 2, 2, 97, 97, 0, true, {.max_doc = 9}},
    {2, 4, 2, 97, 97, 0, true, {.max_doc = 40, .shared = true}}, {1, 2, 1, 160, 160, 0, true, {.window = 37}},
    {1, 2, 2, 140, 140, 0, true, {.max_doc = 70, .window = 50}}, {1, 2, 1, 70, 130, 0, true, {.max_doc = 25}},
    {1, 2, 1, 150, 90, 0, true, {.max_doc = 60}}};

}  // namespace flash_check
