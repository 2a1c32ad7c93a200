/*
Flash attention tile shapes: the library's kernels (ops/cuda/flash_attention.cuh) instantiated
with other tile shapes, each checked against the library's shape (the first row of its group,
which the op tests check against the CPU) and timed from a flushed L2, causal, bf16, q / k / v
in the models' [B, T, H, hd] memory read as [B, H, T, hd] views. dev/cuda/attention.md keeps
the results.

  forward  <HD, MT, BN>: 16 MT query rows a warp, BN keys a step
  dk / dv  <HD, BQ, MT>: 16 MT keys a warp, BQ queries a step; "pairs": attention_dkdv_pairs.cuh
  dq       <HD, BN, MT>: 16 MT query rows a warp, BN keys a step

Build and run (sm_90; -Xptxas -v shows each variant's registers and spills):
  nvcc -O3 -std=c++20 -arch=sm_90 -I. -o attention_tiles dev/cuda/02_attention_tiles.cu
  ./attention_tiles
*/
#include "common.cuh"

#include "ops/cuda/flash_attention.cuh"
#include "attention_dkdv_pairs.cuh"

using namespace tg::cuda::flash;

namespace {

struct Problem {
  int B, H, T, hd;
  Params p;  // q, k, v, dout, out, lse, delta filled by the reference forward
  __nv_bfloat16 *q, *k, *v, *dout, *out, *dq, *dk, *dv;
  size_t n;
};

Rows rows_of(__nv_bfloat16* base, const Problem& pr) {  // [B, T, H, hd] memory as [B, H, T, hd]
  return Rows{base, int64_t(pr.T) * pr.H * pr.hd, pr.hd, int64_t(pr.H) * pr.hd};
}

Problem make_problem(int B, int H, int T, int hd) {
  Problem pr{B, H, T, hd};
  pr.n = size_t(B) * T * H * hd;
  std::vector<float> rounded;
  pr.q = to_device<__nv_bfloat16>(random_values(pr.n, 1), rounded);
  pr.k = to_device<__nv_bfloat16>(random_values(pr.n, 2), rounded);
  pr.v = to_device<__nv_bfloat16>(random_values(pr.n, 3), rounded);
  pr.dout = to_device<__nv_bfloat16>(random_values(pr.n, 4), rounded);
  pr.out = device_zeros<__nv_bfloat16>(pr.n);
  pr.dq = device_zeros<__nv_bfloat16>(pr.n);
  pr.dk = device_zeros<__nv_bfloat16>(pr.n);
  pr.dv = device_zeros<__nv_bfloat16>(pr.n);
  Params& p = pr.p;
  p.q = rows_of(pr.q, pr), p.k = rows_of(pr.k, pr), p.v = rows_of(pr.v, pr), p.dout = rows_of(pr.dout, pr);
  p.o = rows_of(pr.out, pr), p.dq = rows_of(pr.dq, pr), p.dk = rows_of(pr.dk, pr), p.dv = rows_of(pr.dv, pr);
  p.lse = device_zeros<float>(size_t(B) * H * T);
  p.delta = device_zeros<float>(size_t(B) * H * T);
  p.B = B, p.H = H, p.Hkv = H, p.L = T, p.S = T;
  p.scale = 1.f / std::sqrt(float(hd));
  p.scale_log2 = p.scale * 1.4426950408889634f;
  p.causal = true;
  return pr;
}

template <class Kernel>
bool launch(Kernel kernel, dim3 grid, size_t smem, const Params& p) {
  if (smem > 227 * 1024) return false;
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid, kThreads, smem>>>(p);
  CUDA_CHECK(cudaGetLastError());
  return true;
}

template <int HD>
size_t tile_bytes(int rows) {
  return size_t(rows) * kLd<HD> * sizeof(__nv_bfloat16);
}

// One variant: runs it (a no-op when it does not fit), checks `outputs` against the reference's,
// prints its time and its speed against the first variant of the group.
struct Group {
  const char* name;
  double first_us = 0;
  std::vector<std::vector<float>> reference;
  template <class Run>
  void variant(const char* label, const Problem& pr, const std::vector<__nv_bfloat16*>& outputs, Run&& run) {
    for (__nv_bfloat16* o : outputs) CUDA_CHECK(cudaMemset(o, 0, pr.n * 2));
    if (!run()) {
      std::printf("  %-8s %-16s does not fit\n", name, label);
      return;
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    bool ok = true;
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::vector<float> got = to_host(outputs[i], pr.n);
      if (reference.size() <= i) reference.push_back(got);
      else ok = check(label, got, reference[i], 2e-2f, 2e-2f) && ok;
    }
    const double us = median_us([&] { run(); }, 50);
    if (first_us == 0) first_us = us;
    std::printf("  %-8s %-16s %9.1f us  %5.2fx%s\n", name, label, us, first_us / us, ok ? "" : "  MISMATCH");
  }
};

template <int HD, int MT, int BN>
bool forward(const Problem& pr) {
  const dim3 grid = flash_grid((pr.T + kBlock * MT - 1) / (kBlock * MT), pr.H, pr.B);
  return launch(flash_forward<HD, MT, BN>, grid, tile_bytes<HD>(kBlock * MT + 4 * BN), pr.p);
}
template <int HD, int BQ, int MT>
bool dkdv(const Problem& pr) {
  const dim3 grid = flash_grid((pr.T + kBlock * MT - 1) / (kBlock * MT), pr.H, pr.B);
  return launch(flash_backward_dkdv<HD, BQ, MT, true, true>, grid,
                tile_bytes<HD>(2 * kBlock * MT + 4 * BQ) + 4 * BQ * sizeof(float), pr.p);
}
template <int HD, int BQ>
bool dkdv_pairs(const Problem& pr) {
  return launch(flash_backward_dkdv_pairs<HD, BQ, true, true>, flash_grid((pr.T + kBlock - 1) / kBlock, pr.H, pr.B),
                kPairsSmem<HD, BQ>, pr.p);
}
template <int HD, int BN, int MT>
bool dq(const Problem& pr) {
  const dim3 grid = flash_grid((pr.T + kBlock * MT - 1) / (kBlock * MT), pr.H, pr.B);
  return launch(flash_backward_dq<HD, BN, MT>, grid, tile_bytes<HD>(2 * kBlock * MT + 4 * BN), pr.p);
}

#define FWD(MT, BN) g.variant("MT " #MT " BN " #BN, pr, {pr.out}, [&] { return forward<HD, MT, BN>(pr); })
#define DKDV(BQ, MT) g.variant("BQ " #BQ " MT " #MT, pr, {pr.dk, pr.dv}, [&] { return dkdv<HD, BQ, MT>(pr); })
#define PAIRS(BQ) g.variant("pairs BQ " #BQ, pr, {pr.dk, pr.dv}, [&] { return dkdv_pairs<HD, BQ>(pr); })
#define DQ(BN, MT) g.variant("BN " #BN " MT " #MT, pr, {pr.dq}, [&] { return dq<HD, BN, MT>(pr); })

// The library's shapes first (ops/cuda/attention.cu, Tiles), then the candidates.
void run64(const Problem& pr) {
  constexpr int HD = 64;
  {
    Group g{"forward"};
    FWD(2, 128), FWD(2, 64), FWD(1, 64), FWD(1, 128), FWD(1, 32), FWD(2, 32);
    forward<HD, 2, 128>(pr);  // the reference's out and lse for the backward
  }
  const int64_t rows = int64_t(pr.B) * pr.H * pr.T;
  attention_delta<HD><<<unsigned((rows + 63) / 64), 256>>>(pr.p);
  CUDA_CHECK(cudaGetLastError());
  {
    Group g{"dk dv"};
    DKDV(64, 1), DKDV(32, 1), DKDV(128, 1), DKDV(64, 2), DKDV(32, 2), PAIRS(64), PAIRS(32);
  }
  {
    Group g{"dq"};
    DQ(32, 1), DQ(64, 2), DQ(64, 1), DQ(128, 1), DQ(32, 2);
  }
}

void run128(const Problem& pr) {
  constexpr int HD = 128;
  {
    Group g{"forward"};
    FWD(2, 64), FWD(1, 64), FWD(2, 32), FWD(1, 32), FWD(1, 128);
    forward<HD, 2, 64>(pr);
  }
  const int64_t rows = int64_t(pr.B) * pr.H * pr.T;
  attention_delta<HD><<<unsigned((rows + 63) / 64), 256>>>(pr.p);
  CUDA_CHECK(cudaGetLastError());
  {
    Group g{"dk dv"};
    DKDV(64, 1), DKDV(32, 1), DKDV(16, 1), DKDV(32, 2), PAIRS(64), PAIRS(32);
  }
  {
    Group g{"dq"};
    DQ(32, 2), DQ(32, 1), DQ(64, 1), DQ(16, 1);
  }
}

}  // namespace

int main() {
  std::printf("8x12x1024x64 causal (bench-135m's layer)\n");
  run64(make_problem(8, 12, 1024, 64));
  std::printf("4x32x2048x128 causal\n");
  run128(make_problem(4, 32, 2048, 128));
  return 0;
}
