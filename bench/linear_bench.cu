// Linear backward on the GPU: y = x @ W^T with x [8192, 4096], W [4096, 4096] (bf16 and fp32),
// full (dX and dW GEMMs) against a frozen weight (the dX GEMM only, what LoRA's base layer
// runs). Each call is the autograd node's backward, bracketed by CUDA events after a 256 MB L2
// flush; median of --reps (default 100) in microseconds, and TFLOP/s (2 * M * N * K per GEMM).
//   linear_bench [--reps N] [--json out.json]      (--json: the rows of bench/results/linear.json)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/bench_json.h"
#include "core/autograd.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/factory.h"
#include "core/tensor.h"
#include "ops/linear.h"

using namespace tg;

int main(int argc, char** argv) {
  int reps = 100;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = bench::positive_arg("--reps", argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--reps N] [--json out.json]\n", argv[0]);
      return 2;
    }
  }
  if (!cuda_is_available()) {
    std::fprintf(stderr, "linear_bench: no CUDA device\n");
    return 1;
  }
  const int64_t M = 8192, K = 4096, N = 4096;
  void* flush;
  const size_t flush_bytes = size_t(256) << 20;
  TG_CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
  cudaEvent_t a, b;
  TG_CUDA_CHECK(cudaEventCreate(&a));
  TG_CUDA_CHECK(cudaEventCreate(&b));
  cudaStream_t s = cuda::stream(0);
  cudaDeviceProp prop;
  TG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  bench::JsonRows rows("linear_bench", prop.name);
  std::printf("%-6s %-22s %-13s %10s %9s %8s\n", "dtype", "shape", "mode", "time us", "TFLOP/s", "vs full");
  for (DType dt : {kBFloat16, kFloat32}) {
    Generator gen(1);
    double full_us = 0;
    for (bool frozen : {false, true}) {
      Tensor x = randn({M, K}, gen, {dt, Device::cuda(0)});
      Tensor w = randn({N, K}, gen, {dt, Device::cuda(0)});
      Tensor dy = randn({M, N}, gen, {dt, Device::cuda(0)});
      x.requires_grad_(true);
      w.requires_grad_(!frozen);
      Tensor y = linear(x, w);
      auto node = y.grad_fn();
      GradMask mask = {true, !frozen, false};
      std::vector<Tensor> grads = {dy};
      auto call = [&] {
        NoGradGuard g;
        auto out = node->backward(grads, mask);
      };
      for (int i = 0; i < 5; ++i) call();
      std::vector<float> t;
      for (int i = 0; i < reps; ++i) {
        TG_CUDA_CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes, s));
        TG_CUDA_CHECK(cudaEventRecord(a, s));
        call();
        TG_CUDA_CHECK(cudaEventRecord(b, s));
        TG_CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        TG_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.f);
      }
      std::sort(t.begin(), t.end());
      const double us = t[t.size() / 2];
      if (!frozen) full_us = us;
      const double flop = 2.0 * M * N * K * (frozen ? 1 : 2);
      std::printf("%-6s x[%lld,%lld] W[%lld,%lld] %-13s %10.1f %9.1f %8.3f\n", dt == kBFloat16 ? "bf16" : "fp32",
                  (long long)M, (long long)K, (long long)N, (long long)K, frozen ? "frozen_weight" : "full", us,
                  flop / (us * 1e-6) / 1e12, us / full_us);
      rows.add()
          .str("dtype", dt == kBFloat16 ? "bf16" : "fp32")
          .num("m", double(M))
          .num("k", double(K))
          .num("n", double(N))
          .str("mode", frozen ? "frozen_weight" : "full")
          .num("us", us, 5)
          .num("tflops", flop / (us * 1e-6) / 1e12, 4);
    }
  }
  rows.write(json);
  return 0;
}
