// FP8 against bfloat16 at Llama-3.1-8B's projection shapes (4 x 2048 tokens): the frozen weight's
// forward (y = x W^T) and forward + dx (dx = dy W), as a LoRA step runs them: bfloat16 through
// linear, FP8 through linear_fp8 (x and dy quantised per 1x128 tile, W^T made for dx, all counted),
// and the bare FP8 GEMMs (forward; dx on a W^T made once) on operands quantised beforehand. The ceiling column is the bfloat16 row's
// rate (the speed-up is the rate over it). Usage: fp8_bench [out.csv] [--json out.json]
#include <cstdio>

#include "bench/bench_common.cuh"
#include "core/autograd.h"
#include "ops/cast.h"
#include "ops/fp8.h"
#include "ops/fp8_kernels.h"
#include "ops/linear.h"
#include "ops/matmul.h"
#include "ops/shape.h"

using namespace tg;

int main(int argc, char** argv) {
  return bench::run_main(argc, argv, "fp8_bench", [](const bench::Outputs& outputs) {
    TG_CHECK(cuda::fp8_gemm_supported(0), "fp8_bench", "the FP8 block-scaled GEMM wants an sm_90 GPU");
    const int64_t M = 8192;
    std::vector<bench::Row> rows;
    std::printf("%-16s %-14s %10s %10s %10s %8s\n", "case", "shape", "bf16 ms", "fp8 ms", "fp8 TF/s", "speedup");
    for (const auto& [name, N, K] : {std::tuple<const char*, int64_t, int64_t>{"q_o_proj", 4096, 4096},
                                     {"k_v_proj", 1024, 4096},
                                     {"gate_up_proj", 14336, 4096},
                                     {"down_proj", 4096, 14336}}) {
      const Tensor w = bench::random_tensor({N, K}, kBFloat16, 3);
      const Fp8Weight q = quantize_fp8(w);
      const Tensor x = bench::random_tensor({M, K}, kBFloat16, 4).requires_grad_(true);
      const Tensor dy = bench::random_tensor({M, N}, kBFloat16, 5);
      char shape[64];
      std::snprintf(shape, sizeof shape, "%ldx%ldx%ld", long(M), long(N), long(K));
      const double flops = 2.0 * double(M) * double(N) * double(K);
      auto timed = [&](const char* what, double work, const std::function<void()>& bf16, const std::function<void()>& fp8) {
        const double b = bench::median_ms(bf16), f = bench::median_ms(fp8);
        const double ceiling = work / (b * 1e-3) / 1e12;
        std::printf("%-16s %-14s %10.4f %10.4f %10.0f %7.2fx  %s\n", name, shape, b, f, work / (f * 1e-3) / 1e12, b / f,
                    what);
        rows.push_back({"fp8", std::string(name) + "." + what, "bf16", shape, work, b, ceiling});
        rows.push_back({"fp8", std::string(name) + "." + what, "fp8", shape, work, f, ceiling});
      };
      {
        NoGradGuard no_grad;
        timed("forward", flops, [&] { linear(x, w); }, [&] { linear_fp8(x, q); });
      }
      timed("forward+dx", 2 * flops, [&] { linear(x, w).backward(dy); }, [&] { linear_fp8(x, q).backward(dy); });
      // The bare GEMM, its operands quantised once outside the timing.
      const Fp8Activation xq = quantize_fp8_activation(x.detach(), 128);
      Tensor out = Tensor::empty({M, N}, {kBFloat16, Device::cuda(0)});
      const Tensor x_scale = transpose(xq.scale, 0, 1);
      NoGradGuard no_grad;
      timed("gemm_only", flops, [&] { linear(x, w); }, [&] { cuda::fp8_gemm(out, xq.data, x_scale, q.data, q.scale_inv); });
      // dx's bare GEMM on a W^T made once (what keeping a transposed copy would cost per step).
      Tensor wt = Tensor::empty({K, N}, {kUInt8, Device::cuda(0)});
      Tensor wt_scale = Tensor::empty({K / 128, N / 128}, {kFloat32, Device::cuda(0)});
      cuda::transpose_2d(wt, q.data);
      cuda::transpose_2d(wt_scale, q.scale_inv);
      const Fp8Activation dyq = quantize_fp8_activation(dy, 128);
      Tensor dx = Tensor::empty({M, K}, {kBFloat16, Device::cuda(0)});
      const Tensor dy_scale = transpose(dyq.scale, 0, 1);
      timed("dx_gemm_only", flops, [&] { matmul(dy, w); }, [&] { cuda::fp8_gemm(dx, dyq.data, dy_scale, wt, wt_scale); });
    }
    bench::write_csv(outputs.csv, rows);
    bench::write_json(outputs.json, "fp8_bench", rows, "tflops", 1e12, "bf16_tflops");
  });
}
