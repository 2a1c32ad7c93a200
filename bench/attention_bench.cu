// scaled_dot_product_attention on the GPU, causal, bf16: forward, backward (all of dq, dk, dv)
// and forward + backward, for the shapes the issue names (bench-135m's 8x12x1024x64, two hd-128
// shapes, a grouped-query one, hd 64 at the hd-128 shape's size), once per path the op can take:
// "tapegrad_cudnn" (the default: cuDNN, deterministic backward), "tapegrad_cudnn_nondet" (cuDNN's
// atomic-dq backward) and "tapegrad_flash" (cuDNN off: tapegrad's kernels). Each row names the
// kernels that ran (the trace) and the memory a forward + backward adds at its peak. q, k, v are
// the [B, H, T, hd] views of [B, T, H, hd] projections the model passes, and so is dout (as the
// backward of the merge of heads gives it). Each call is bracketed by CUDA events after a 256 MB
// L2 flush; median of --reps. TFLOP/s counts causal FLOPs halved: forward 4 B H T^2 hd / 2,
// backward 2.5x forward (the work FlashAttention-2 does).
//   attention_bench [--reps N] [--json path] [--split] [--only SHAPE] [--impls a,b,...]
// bench/torch_attention_ref.py times PyTorch's SDPA backends on the same shapes in the same call
// (scripts/gpu/bench.sh attention runs the two; rows to bench/results/{attention,torch_attention}.json).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_args.h"
#include "bench/bench_json.h"
#include "core/autograd.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda_settings.h"
#include "core/factory.h"
#include "core/memory.h"
#include "core/tensor.h"
#include "core/trace.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/shape.h"

using namespace tg;

namespace {

struct Shape4 {
  int64_t B, H, Hkv, T, hd;
  std::string name() const {
    std::string s = std::to_string(B) + "x" + std::to_string(H) + "x" + std::to_string(T) + "x" + std::to_string(hd);
    return Hkv == H ? s : s + "-kv" + std::to_string(Hkv);
  }
  double fwd_flops() const { return 4.0 * B * H * double(T) * T * hd / 2; }
};

struct Timer {
  void* flush = nullptr;
  size_t flush_bytes = size_t(256) << 20;
  cudaEvent_t a, b;
  Timer() {
    TG_CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
    TG_CUDA_CHECK(cudaEventCreate(&a));
    TG_CUDA_CHECK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaFree(flush);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  // Median ms of first() and of then() when run back to back (an event between them), each pair
  // after an L2 flush: which half of a fwd + bwd call costs more than it does alone.
  template <class F, class G>
  std::pair<double, double> split_ms(F&& first, G&& then, int reps) {
    cudaStream_t s = cuda::stream(0);
    cudaEvent_t m;
    TG_CUDA_CHECK(cudaEventCreate(&m));
    std::vector<float> t1, t2;
    for (int i = 0; i < reps + 3; ++i) {
      TG_CUDA_CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes, s));
      TG_CUDA_CHECK(cudaEventRecord(a, s));
      auto y = first();
      TG_CUDA_CHECK(cudaEventRecord(m, s));
      then(y);
      TG_CUDA_CHECK(cudaEventRecord(b, s));
      TG_CUDA_CHECK(cudaEventSynchronize(b));
      float x1 = 0, x2 = 0;
      TG_CUDA_CHECK(cudaEventElapsedTime(&x1, a, m));
      TG_CUDA_CHECK(cudaEventElapsedTime(&x2, m, b));
      if (i >= 3) t1.push_back(x1), t2.push_back(x2);
    }
    TG_CUDA_CHECK(cudaEventDestroy(m));
    return {median(t1), median(t2)};
  }
  // Median ms of f() over reps, each after an L2 flush (a 256 MB memset), after 3 warm-up calls.
  template <class F>
  double median_ms(F&& f, int reps) {
    cudaStream_t s = cuda::stream(0);
    for (int i = 0; i < 3; ++i) f();
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
      TG_CUDA_CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes, s));
      TG_CUDA_CHECK(cudaEventRecord(a, s));
      f();
      TG_CUDA_CHECK(cudaEventRecord(b, s));
      TG_CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      TG_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      t.push_back(ms);
    }
    return median(t);
  }
  static double median(std::vector<float> t) {
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

// One way the op runs: the cuDNN switches it sets.
struct Impl {
  const char* name;
  bool cudnn, deterministic;
};
constexpr Impl kImpls[] = {
    {"tapegrad_cudnn", true, true}, {"tapegrad_cudnn_nondet", true, false}, {"tapegrad_flash", false, true}};

// The distinct kernel names a trace holds, joined by "+".
std::string kernels_of(const KernelTrace& trace) {
  std::vector<std::string> seen;
  for (const std::string& e : trace.events())
    if (std::find(seen.begin(), seen.end(), e) == seen.end()) seen.push_back(e);
  std::string s;
  for (const std::string& e : seen) s += (s.empty() ? "" : "+") + e;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 50;
  std::string json;
  bool split = false;
  std::string only, impls = "tapegrad_cudnn,tapegrad_cudnn_nondet,tapegrad_flash";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = bench::positive_arg("--reps", argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!std::strcmp(argv[i], "--split")) split = true;
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--impls") && i + 1 < argc) impls = argv[++i];
    else return std::fprintf(stderr, "usage: attention_bench [--reps N] [--json path] [--split] [--only SHAPE] "
                                     "[--impls tapegrad_cudnn,tapegrad_cudnn_nondet,tapegrad_flash]\n"), 2;
  }
  if (!cuda_is_available()) return std::fprintf(stderr, "attention_bench: no CUDA device\n"), 1;
  cudaDeviceProp prop;
  TG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const Device dev = Device::cuda(0);
  const std::vector<Shape4> shapes = {{8, 12, 12, 1024, 64},  {4, 32, 32, 2048, 128}, {1, 16, 16, 8192, 128},
                                      {4, 32, 8, 2048, 128}, {4, 32, 32, 2048, 64}};
  for (size_t at = 0; at < impls.size();) {
    const size_t end = std::min(impls.find(',', at), impls.size());
    const std::string name = impls.substr(at, end - at);
    if (std::none_of(std::begin(kImpls), std::end(kImpls), [&](const Impl& m) { return name == m.name; }))
      return std::fprintf(stderr, "attention_bench: --impls wants tapegrad_cudnn, tapegrad_cudnn_nondet or "
                                  "tapegrad_flash, got '%s'\n", name.c_str()), 2;
    at = end + 1;
  }
  Timer timer;
  bench::JsonRows rows("attention_bench", prop.name);
  std::printf("%-22s %-22s %9s %9s %11s %9s %9s  %s\n", "shape (BxHxTxhd)", "impl", "fwd ms", "bwd ms", "fwd+bwd ms",
              "TFLOP/s", "+MiB", "kernels");
  if (!only.empty() && std::none_of(shapes.begin(), shapes.end(), [&](const Shape4& s) { return s.name() == only; }))
    return std::fprintf(stderr, "attention_bench: --only wants one of the bench's shapes, got %s\n", only.c_str()), 2;
  for (const Shape4& s : shapes) {
    if (!only.empty() && s.name() != only) continue;
    Generator gen(1);
    auto projection = [&](int64_t heads) {
      return to(randn({s.B, s.T, heads, s.hd}, gen), kBFloat16, dev).requires_grad_(true);
    };
    Tensor pq = projection(s.H), pk = projection(s.Hkv), pv = projection(s.Hkv);
    Tensor dout = transpose(to(randn({s.B, s.T, s.H, s.hd}, gen), kBFloat16, dev), 1, 2);
    const bool gqa = s.H != s.Hkv;
    auto forward = [&] {
      return scaled_dot_product_attention(transpose(pq, 1, 2), transpose(pk, 1, 2), transpose(pv, 1, 2), true,
                                          std::nullopt, 0.0, default_generator(), gqa);
    };
    const GradMask all = {true, true, true};
    auto both = [&] {
      Tensor y = forward();
      NoGradGuard g;
      y.grad_fn()->backward({dout}, all);
    };
    for (const Impl& impl : kImpls) {
      if (("," + impls + ",").find("," + std::string(impl.name) + ",") == std::string::npos) continue;
      enable_cudnn_sdp(impl.cudnn);
      set_cudnn_sdp_deterministic(impl.deterministic);
      KernelTrace trace;
      both();  // builds cuDNN's plans; the trace says which kernels serve
      const std::string kernels = kernels_of(trace);
      synchronize(dev);
      reset_peak_memory_stats(dev);
      const size_t before = memory_stats(dev).bytes_in_use;
      both();
      synchronize(dev);
      const double extra_mib = double(memory_stats(dev).peak_bytes - before) / (1 << 20);
      Tensor o = forward();
      auto node = o.grad_fn();
      auto backward = [&] {
        NoGradGuard g;
        node->backward({dout}, all);
      };
      const double fwd = timer.median_ms([&] { forward(); }, reps);
      const double bwd = timer.median_ms(backward, reps);
      const double fb = timer.median_ms(both, reps);
      const double tflops = 3.5 * s.fwd_flops() / (fb * 1e-3) / 1e12;
      std::printf("%-22s %-22s %9.3f %9.3f %11.3f %9.1f %9.0f  %s\n", s.name().c_str(), impl.name, fwd, bwd, fb, tflops,
                  extra_mib, kernels.c_str());
      if (split) {
        const auto [f, g] = timer.split_ms(forward, [&](const Tensor& y) {
          NoGradGuard ng;
          y.grad_fn()->backward({dout}, all);
        }, reps);
        std::printf("%-22s   fwd + bwd in one call: forward half %.3f, backward half %.3f\n", "", f, g);
      }
      rows.add()
          .str("shape", s.name())
          .str("impl", impl.name)
          .str("kernels", kernels)
          .str("dout", "out_layout")
          .num("fwd_ms", fwd, 4)
          .num("bwd_ms", bwd, 4)
          .num("fwdbwd_ms", fb, 4)
          .num("tflops", tflops, 4)
          .num("extra_mib", extra_mib, 4);
    }
  }
  rows.write(json);
  return 0;
}
