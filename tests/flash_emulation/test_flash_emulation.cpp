// The library's flash-attention kernels (ops/cuda/flash_attention.cuh at the tile shapes
// ops/cuda/attention.cu launches) run on the CPU under cpu_emulation.h against a float64
// reference: a kernel change's indexing, fragments and synchronisation checked without a GPU
// before a device call is spent on it; the GPU run stays the authority. For each of flash_check.h's
// cases: out and lse, the delta pre-pass, dq, dk and dv within kTolerance of each output's largest
// value (or of 0.1); the dk-only and dv-only kernels bitwise equal to the dk / dv kernel's outputs
// (what a frozen q, k or v relies on); banded cases (packed documents, sliding windows, rows whose
// band starts past the last key) also check the band pre-pass against its definition. The
// emulator runs one warp at a time as far as it can, so a missing __syncthreads or a cp.async wait
// for the wrong group reads poisoned (NaN) shared memory and fails. ctest runs it
// (FlashEmulation.*, under a minute) wherever the CUDA headers are; it needs no GPU.
#include <gtest/gtest.h>

#include "flash_check.h"

using namespace flash_check;

namespace {

template <int HD, int FMT, int FBN, int BQ, int KMT, int QBN, int QMT, bool kBand>
bool check_band(const Case& c, uint64_t seed) {
  Problem pr(c, seed);
  const Reference ref(pr);
  const bool band_ok = !kBand || pr.band_as_defined();
  forward<HD, FMT, FBN, kBand>(pr.p);
  double lse_err = 0.0;  // a row that sees no key: -inf in both
  for (size_t i = 0; i < ref.lse.size(); ++i)
    lse_err = std::max(lse_err, pr.lse[i] == ref.lse[i] ? 0.0 : std::isnan(pr.lse[i]) ? INFINITY : std::abs(pr.lse[i] - ref.lse[i]));
  delta<HD>(pr.p);
  double delta_err = 0.0, delta_scale = 1e-30;
  for (int b = 0; b < c.B; ++b)  // delta of the kernel's own out, in float64
    for (int h = 0; h < c.H; ++h)
      for (int i = 0; i < c.L; ++i) {
        double want = 0.0;
        for (int d = 0; d < c.hd; ++d) want += pr.at(pr.p.o, b, h, i, d) * pr.at(pr.p.dout, b, h, i, d);
        const size_t row = (size_t(b) * c.H + h) * c.L + i;
        delta_err = std::max(delta_err, std::abs(pr.delta[row] - want)), delta_scale = std::max(delta_scale, std::abs(want));
      }
  dkdv<HD, BQ, KMT, true, true, kBand>(pr.p);
  dq<HD, QBN, QMT, kBand>(pr.p);
  const double e_o = error(pr, pr.p.o, c.H, c.L, ref.o), e_q = error(pr, pr.p.dq, c.H, c.L, ref.dq);
  const double e_k = error(pr, pr.p.dk, c.Hkv, c.S, ref.dk), e_v = error(pr, pr.p.dv, c.Hkv, c.S, ref.dv);
  const std::vector<bf16> dk_both = pr.dk, dv_both = pr.dv;
  dkdv<HD, BQ, KMT, true, false, kBand>(pr.p);
  const bool dk_same = !std::memcmp(pr.dk.data(), dk_both.data(), dk_both.size() * sizeof(bf16));
  dkdv<HD, BQ, KMT, false, true, kBand>(pr.p);
  const bool dv_same = !std::memcmp(pr.dv.data(), dv_both.data(), dv_both.size() * sizeof(bf16));
  const bool ok = band_ok && e_o < kTolerance && lse_err < 1e-3 && delta_err / delta_scale < 1e-5 &&
                  e_q < kTolerance && e_k < kTolerance && e_v < kTolerance && dk_same && dv_same;
  char band[64] = "";
  if (kBand)
    std::snprintf(band, sizeof band, " band: docs <= %d%s window %d%s", c.band.max_doc, c.band.shared ? " shared" : "",
                  c.band.window, band_ok ? "" : " (pre-pass wrong)");
  std::printf("hd %3d B %d H %d/%d L %4d S %4d %-7s out %.1e lse %.1e delta %.1e dq %.1e dk %.1e dv %.1e%s%s%s%s\n",
              HD, c.B, c.H, c.Hkv, c.L, c.S, c.causal ? "causal" : "full", e_o, lse_err, delta_err / delta_scale, e_q,
              e_k, e_v, band, dk_same ? "" : " dk-alone differs", dv_same ? "" : " dv-alone differs",
              ok ? "  ok" : "  FAILED");
  return ok;
}

template <int HD, int FMT, int FBN, int BQ, int KMT, int QBN, int QMT>
bool check(const Case& c, uint64_t seed) {
  return c.band.on() ? check_band<HD, FMT, FBN, BQ, KMT, QBN, QMT, true>(c, seed)
                     : check_band<HD, FMT, FBN, BQ, KMT, QBN, QMT, false>(c, seed);
}

// Every case at one head dim and its tile shapes (Tiles<HD> in ops/cuda/attention.cu); case i
// takes seed 1 + 3 i + hd_index.
template <int HD, int FMT, int FBN, int BQ, int KMT, int QBN, int QMT>
void check_all(int hd_index) {
  emu::use_shared(tg::cuda::flash::smem, sizeof(tg::cuda::flash::smem));
  uint64_t seed = 1 + hd_index;
  for (Case c : kCases) {
    c.hd = HD;
    EXPECT_TRUE((check<HD, FMT, FBN, BQ, KMT, QBN, QMT>(c, seed))) << "B " << c.B << " H " << c.H << "/" << c.Hkv
                                                                 << " L " << c.L << " S " << c.S;
    seed += 3;
  }
}

}  // namespace

TEST(FlashEmulation, HeadDim32MatchesFloat64) { check_all<32, 2, 64, 64, 1, 64, 2>(0); }
TEST(FlashEmulation, HeadDim64MatchesFloat64) { check_all<64, 2, 128, 64, 1, 32, 1>(1); }
TEST(FlashEmulation, HeadDim128MatchesFloat64) { check_all<128, 2, 64, 64, 1, 32, 2>(2); }
