// Memory-bound kernels: elementwise, conversions, reductions, the primitives. Each row's rate
// counts the bytes that must move (inputs read once, outputs written once) over the median
// time, against the device-to-device copy bandwidth measured first in the same run.
// Usage: elementwise_bench [out.csv] [--json out.json]
#include <cstdio>

#include "bench/bench_common.cuh"
#include "ops/binary_kernels.h"
#include "ops/reduce_kernels.h"
#include "ops/shape.h"
#include "ops/unary_kernels.h"

using namespace tg;

namespace {

constexpr int64_t kRows = 16384, kCols = 4096;  // 64M elements: 128 MiB in bf16, 256 MiB in f32

struct Result {
  const char* name;
  double bytes, ms;
};

std::vector<Result> run_dtype(DType dt) {
  const Device dev = Device::cuda(0);
  const double e = double(element_size(dt)), n = double(kRows * kCols);
  Tensor a = bench::random_tensor({kRows, kCols}, dt, 1), b = bench::random_tensor({kRows, kCols}, dt, 2);
  Tensor bt = bench::random_tensor({kCols, kRows}, dt, 3), bias = bench::random_tensor({kCols}, dt, 4);
  Tensor out = Tensor::empty({kRows, kCols}, {dt, dev});
  Tensor f32 = Tensor::empty({kRows, kCols}, {kFloat32, dev});
  Tensor row_out = Tensor::empty({kRows, 1}, {dt, dev}), col_out = Tensor::empty({1, kCols}, {dt, dev});
  Tensor all_out = Tensor::empty({1, 1}, {dt, dev}), idx = Tensor::empty({kRows, 1}, {kInt64, dev});
  Tensor bias_b = bias.as_strided({kRows, kCols}, {0, 1}, 0);
  std::vector<Result> r;
  auto time = [&](const char* name, double bytes, auto f) { r.push_back({name, bytes, bench::median_ms(f)}); };
  time("gelu_fwd", 2 * n * e, [&] { cuda::unary(UnaryOp::Gelu, 0, out, a); });
  time("gelu_bwd", 3 * n * e, [&] { cuda::unary_backward(UnaryOp::Gelu, 0, out, b, a); });
  time("add", 3 * n * e, [&] { cuda::binary(BinaryOp::Add, out, a, b); });
  time("add_bias", 2 * n * e + kCols * e, [&] { cuda::binary(BinaryOp::Add, out, a, bias_b); });
  time("add_transposed", 3 * n * e, [&] { cuda::binary(BinaryOp::Add, out, a, transpose(bt, 0, 1)); });
  time("sum_rows", n * e + kRows * e, [&] { cuda::sum(row_out, a, {1}); });
  time("sum_cols", n * e + kCols * e, [&] { cuda::sum(col_out, a, {0}); });
  time("sum_all", n * e + e, [&] { cuda::sum(all_out, a, {0, 1}); });
  time("max_rows", n * e + kRows * (e + 8), [&] { cuda::max(row_out, idx, a, 1); });
  time("to_f32", n * (e + 4), [&] { cuda::copy_strided(f32, a); });
  time("copy_transposed", 2 * n * e, [&] { cuda::copy_strided(out, transpose(bt, 0, 1)); });
  time("accumulate", 3 * n * e, [&] { cuda::accumulate(out, a); });
  time("fill", n * e, [&] { cuda::fill(out, 1.5); });
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_main(argc, argv, "elementwise_bench", [](const bench::Outputs& outputs) {
    const double bw = bench::copy_bandwidth_gbs();
    std::printf("ceiling (measured now): device-to-device copy %.0f GB/s (read + write)\n\n", bw);
    std::printf("%-16s %-9s %-12s %10s %9s %9s\n", "case", "dtype", "shape", "ours ms", "GB/s", "% copy");
    std::vector<bench::Row> rows;
    char shape[64];
    std::snprintf(shape, sizeof shape, "%ldx%ld", long(kRows), long(kCols));
    for (DType dt : {kBFloat16, kFloat32}) {
      for (const Result& x : run_dtype(dt)) {
        const double gbs = x.bytes / (x.ms * 1e-3) / 1e9;
        std::printf("%-16s %-9s %-12s %10.4f %9.0f %8.1f%%\n", x.name, dtype_name(dt), shape, x.ms, gbs, 100 * gbs / bw);
        rows.push_back({"ew", x.name, dtype_name(dt), shape, x.bytes, x.ms, bw});
      }
    }
    bench::write_csv(outputs.csv, rows);
    bench::write_json(outputs.json, "elementwise_bench", rows, "gbs", 1e9, "copy_gbs");
  });
}
