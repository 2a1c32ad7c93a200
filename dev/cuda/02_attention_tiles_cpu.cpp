/*
dev/cuda/attention_dkdv_pairs.cuh's dk / dv kernel (timed by 02_attention_tiles.cu) run on the CPU
under tests/flash_emulation/'s emulator, on the library forward's out and lse: dk and dv against
float64 for the unbanded cases of tests/flash_emulation/flash_check.h at head dim 128, and its
dk-only / dv-only variants bitwise equal to the dk / dv one. The GPU run stays the authority.

Build and run (from the repository root; a few seconds), or `make attention_tiles_cpu` here:
  g++ -std=c++20 -O2 -fno-strict-aliasing -I. -I/usr/local/cuda/include -Wno-attributes \
    -o attention_tiles_cpu dev/cuda/02_attention_tiles_cpu.cpp
  ./attention_tiles_cpu
*/
#include "tests/flash_emulation/flash_check.h"

#include "attention_dkdv_pairs.cuh"

using namespace flash_check;

namespace {

template <int HD, int BQ, bool DK, bool DV>
void dkdv_pairs(const Params& p) {
  emu::launch(flash_backward_dkdv_pairs<HD, BQ, DK, DV>, flash_grid((p.S + kBlock - 1) / kBlock, p.Hkv, p.B), kThreads,
              kPairsSmem<HD, BQ>, p);
}

// dev/cuda/attention_dkdv_pairs.cuh's kernel on the library forward's out and lse: dk and dv
// against float64, and its dk-only / dv-only variants bitwise equal to the dk / dv one.
template <int HD, int FMT, int FBN, int BQ>
bool check_pairs(const Case& c, uint64_t seed) {
  Problem pr(c, seed);
  const Reference ref(pr);
  forward<HD, FMT, FBN>(pr.p);
  delta<HD>(pr.p);
  dkdv_pairs<HD, BQ, true, true>(pr.p);
  const double e_k = error(pr, pr.p.dk, c.Hkv, c.S, ref.dk), e_v = error(pr, pr.p.dv, c.Hkv, c.S, ref.dv);
  const std::vector<bf16> dk_both = pr.dk, dv_both = pr.dv;
  dkdv_pairs<HD, BQ, true, false>(pr.p);
  const bool dk_same = !std::memcmp(pr.dk.data(), dk_both.data(), dk_both.size() * sizeof(bf16));
  dkdv_pairs<HD, BQ, false, true>(pr.p);
  const bool dv_same = !std::memcmp(pr.dv.data(), dv_both.data(), dv_both.size() * sizeof(bf16));
  const bool ok = e_k < kTolerance && e_v < kTolerance && dk_same && dv_same;
  std::printf("hd %3d B %d H %d/%d L %4d S %4d %-7s dk dv by warp pairs: dk %.1e dv %.1e %s%s%s\n", HD, c.B, c.H,
              c.Hkv, c.L, c.S, c.causal ? "causal" : "full", e_k, e_v, dk_same ? "" : " dk-alone differs",
              dv_same ? "" : " dv-alone differs", ok ? "  ok" : "  FAILED");
  return ok;
}

}  // namespace

int main() {
  emu::use_shared(tg::cuda::flash::smem, sizeof(tg::cuda::flash::smem));
  std::printf("dk / dv by warp pairs on the CPU (tolerance %.0e of each output's largest value)\n", kTolerance);
  bool ok = true;
  uint64_t seed = 43;
  for (Case c : kCases)  // the pairs variant has no band
    if (!c.band.on()) c.hd = 128, ok &= check_pairs<128, 2, 64, 64>(c, seed++);
  std::printf("check: %s\n", ok ? "all ok" : "FAILED");
  return ok ? 0 : 1;
}
