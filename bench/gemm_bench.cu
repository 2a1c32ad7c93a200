// GEMM benchmark: our gemm (cuBLAS underneath) on training shapes, against the matrix rate of
// this machine measured first through the same path (an 8192^3 bfloat16 product; 8192^3 float32
// for the float32 rows). Usage: gemm_bench [out.csv] [--json out.json]
#include <cstdio>

#include "bench/bench_common.cuh"
#include "core/cuda_settings.h"
#include "ops/gemm_kernels.h"
#include "ops/shape.h"

using namespace tg;

namespace {

struct Case {
  const char* name;
  DType dtype;
  int64_t B, M, N, K;
  bool ta, tb;  // operand stored transposed (unit stride along its rows), as in linear's backward
  bool tf32;
};

// a [B, M, K] (or its transposed storage), b [B, K, N] likewise, c [B, M, N].
double time_gemm(const Case& c, Tensor* out = nullptr) {
  Tensor a = c.ta ? transpose(bench::random_tensor({c.B, c.K, c.M}, c.dtype, 1), 1, 2)
                  : bench::random_tensor({c.B, c.M, c.K}, c.dtype, 1);
  Tensor b = c.tb ? transpose(bench::random_tensor({c.B, c.N, c.K}, c.dtype, 2), 1, 2)
                  : bench::random_tensor({c.B, c.K, c.N}, c.dtype, 2);
  Tensor d = Tensor::empty({c.B, c.M, c.N}, {c.dtype, Device::cuda(0)});
  set_allow_tf32(c.tf32);
  double ms = bench::median_ms([&] { cuda::gemm(d, a, b, 1.0, 0.0); });
  set_allow_tf32(false);
  if (out) *out = d;
  return ms;
}

double tflops(const Case& c, double ms) { return 2.0 * c.B * c.M * c.N * c.K / (ms * 1e-3) / 1e12; }

}  // namespace

int main(int argc, char** argv) {
  return bench::run_main(argc, argv, "gemm_bench", [](const bench::Outputs& outputs) {
    const Case peak_bf16{"peak_bf16", kBFloat16, 1, 8192, 8192, 8192, false, false, false};
    const Case peak_f32{"peak_f32", kFloat32, 1, 8192, 8192, 8192, false, false, false};
    const double bf16_rate = tflops(peak_bf16, time_gemm(peak_bf16));
    const double f32_rate = tflops(peak_f32, time_gemm(peak_f32));
    std::printf("ceilings (measured now, through our gemm): bf16 8192^3 %.1f TFLOP/s, f32 8192^3 %.1f TFLOP/s\n\n",
                bf16_rate, f32_rate);

    const Case cases[] = {
        {"square_8192", kBFloat16, 1, 8192, 8192, 8192, false, false, false},
        {"square_4096", kBFloat16, 1, 4096, 4096, 4096, false, false, false},
        {"square_4096", kFloat32, 1, 4096, 4096, 4096, false, false, false},
        {"square_4096_tf32", kFloat32, 1, 4096, 4096, 4096, false, false, true},
        {"linear_fwd", kBFloat16, 1, 8192, 3072, 768, false, true, false},   // x @ W^T
        {"linear_dx", kBFloat16, 1, 8192, 768, 3072, false, false, false},   // dY @ W
        {"linear_dw", kBFloat16, 1, 3072, 768, 8192, true, false, false},    // dY^T @ X
        {"linear_fwd", kFloat32, 1, 8192, 3072, 768, false, true, false},
        {"attn_scores", kBFloat16, 96, 1024, 1024, 64, false, true, false},  // Q @ K^T per head
        {"attn_values", kBFloat16, 96, 1024, 64, 1024, false, false, false}, // P @ V per head
        {"large_k", kBFloat16, 1, 256, 256, 65536, false, false, false},
        {"odd_67x129x33", kBFloat16, 1, 67, 129, 33, false, false, false},
        {"odd_67x129x33", kFloat32, 1, 67, 129, 33, false, false, false},
        {"odd_1001x999x1003", kBFloat16, 1, 1001, 999, 1003, false, false, false},
    };
    std::vector<bench::Row> rows;
    std::printf("%-20s %-9s %-26s %10s %10s %9s\n", "case", "dtype", "B x M x N x K (ta,tb)", "ours ms", "TFLOP/s",
                "% ceiling");
    for (const Case& c : cases) {
      const double ms = time_gemm(c), rate = tflops(c, ms);
      const double ceiling = (c.dtype == kBFloat16 || c.tf32) ? bf16_rate : f32_rate;
      char shape[96];
      std::snprintf(shape, sizeof shape, "%ldx%ldx%ldx%ld_%c%c", long(c.B), long(c.M), long(c.N), long(c.K),
                    c.ta ? 't' : 'n', c.tb ? 't' : 'n');
      std::printf("%-20s %-9s %-26s %10.4f %10.1f %8.1f%%\n", c.name, dtype_name(c.dtype), shape, ms, rate,
                  100.0 * rate / ceiling);
      rows.push_back({"gemm", c.name, dtype_name(c.dtype), shape, 2.0 * c.B * c.M * c.N * c.K, ms, ceiling});
    }
    std::printf("\n%% ceiling: of the bf16 rate for bf16/tf32 rows, of the f32 rate for f32 rows\n");
    bench::write_csv(outputs.csv, rows);
    bench::write_json(outputs.json, "gemm_bench", rows, "tflops", 1e12, "ceiling_tflops");
  });
}
