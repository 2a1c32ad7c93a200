// NF4 dequantisation (QLoRA's frozen weights, ops/nf4.h) against the device-to-device copy
// bandwidth measured in the same run. Bytes counted: the packed codes and the absmax read once,
// the dequantised weight written once (issue 37's target: >= 80% of copy bandwidth).
// Usage: nf4_bench [out.csv] [--json out.json]
#include <cstdio>

#include "bench/bench_common.cuh"
#include "ops/cast.h"
#include "ops/nf4.h"

using namespace tg;

int main(int argc, char** argv) {
  return bench::run_main(argc, argv, "nf4_bench", [](const bench::Outputs& outputs) {
    const double bw = bench::copy_bandwidth_gbs();
    std::printf("ceiling (measured now): device-to-device copy %.0f GB/s (read + write)\n\n", bw);
    std::printf("%-20s %-6s %-12s %10s %9s %9s\n", "case", "out", "shape", "ours ms", "GB/s", "% copy");
    std::vector<bench::Row> rows;
    // Llama-3.1-8B's MLP and attention projections.
    for (const auto& [rows_n, cols_n] : {std::pair<int64_t, int64_t>{14336, 4096}, {4096, 4096}, {1024, 4096}}) {
      const Tensor w = to(bench::random_tensor({rows_n, cols_n}, kBFloat16, 7), Device::cpu());
      for (bool nested : {false, true}) {
        const QuantState4bit q = quantize_4bit(w, "nf4", nested).to(Device::cuda(0));
        for (DType dt : {kBFloat16, kFloat32}) {
          Tensor out = Tensor::empty({rows_n, cols_n}, {dt, Device::cuda(0)});
          const double n = double(rows_n * cols_n), blocks = n / 64;
          const double bytes = n / 2 + blocks * (nested ? 1 : 4) + n * double(element_size(dt));
          const double ms = bench::median_ms([&] { dequantize_4bit_(out, q); });
          const double gbs = bytes / (ms * 1e-3) / 1e9;
          char shape[64];
          std::snprintf(shape, sizeof shape, "%ldx%ld", long(rows_n), long(cols_n));
          const char* name = nested ? "dequant_nf4_nested" : "dequant_nf4";
          std::printf("%-20s %-6s %-12s %10.4f %9.0f %8.1f%%\n", name, dtype_name(dt), shape, ms, gbs, 100 * gbs / bw);
          rows.push_back({"nf4", name, dtype_name(dt), shape, bytes, ms, bw});
        }
      }
    }
    bench::write_csv(outputs.csv, rows);
    bench::write_json(outputs.json, "nf4_bench", rows, "gbs", 1e9, "copy_gbs");
  });
}
