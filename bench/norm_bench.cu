// RMSNorm / LayerNorm backward on the GPU, every gradient-mask variant, against the device's
// copy bandwidth measured in the same run.
//
// Each timed call is the autograd node's backward (what loss.backward() runs for the op: the
// allocations from the caching allocator, the pruned kernel variant, the dW/dB reduction when
// one is asked), captured once in a CUDA graph and replayed between CUDA events, after a 256 MB
// memset that flushes the L2, so host overhead is not counted; the median of --reps replays
// (default 100) is reported in microseconds. --no-graph times direct calls instead (events
// around the call; host time counts where it exceeds the flush). --flush kernel flushes with a
// fill kernel, as PyTorch's `fill_` in bench/torch_norm_ref.py does; --flush clean follows the
// memset with a read of another 256 MB, so the timed call starts from an L2 of clean lines
// (nothing of the flush left to write back); bench/torch_norm_ref.py takes the same flag.
//
// "min bytes" is the traffic no implementation can avoid: read x (when dx or dW is computed),
// dy, w (dx), the saved statistics (dx or dW); write dx, and dW / dB when computed.
// "copy" is that over the time, as a fraction of cudaMemcpy device-to-device bandwidth (bytes
// read + written). "vs full" is the mode's time over the full backward of the same problem.
//
//   norm_bench [--reps N] [--csv out.csv] [--json out.json] [--quick] [--only rms|ln]
//              [--dtype bf16|fp32] [--shape ROWSxDIM] [--mode NAME] [--no-graph]
//              [--flush memset|kernel|clean] [--dot DIR]
// (--shape times one problem of any size instead of the list, --mode one mask mode: for a
// profiler or a sweep.) --dot DIR writes each captured graph there as DOT (what one timed call
// launched: a frozen backward is one kernel node). The CSV has one row per case;
// bench/torch_norm_ref.py --ours out.csv prints PyTorch's times for the same cases beside ours
// (scripts/gpu/bench.sh norm runs both); --json writes the rows of bench/results/norm.json.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "bench/bench_args.h"
#include "bench/bench_json.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/memory.h"
#include "core/tensor.h"
#include "ops/layer_norm.h"
#include "ops/rms_norm.h"

using namespace tg;

namespace {

// Roughly normal values from a counter hash (sum of 4 uniforms), generated on the device.
template <class T>
__global__ void fill_random(T* p, int64_t n, uint32_t seed, float scale, float shift) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9E3779B1u ^ seed ^ uint32_t(i >> 32) * 0x85EBCA77u;
    float s = 0.f;
    for (int k = 0; k < 4; ++k) {
      h ^= h >> 15;
      h *= 0x2C1B3C6Du;
      h ^= h >> 12;
      h *= 0x297A2D39u;
      h ^= h >> 15;
      s += (h >> 8) * (1.0f / 16777216.0f);
    }
    const float v = (s - 2.f) * 1.7320508f * scale + shift;
    if constexpr (std::is_same_v<T, float>) p[i] = v;
    else p[i] = bf16(v);
  }
}

Tensor random_tensor(const Shape& shape, DType dt, uint32_t seed, float scale = 1.f, float shift = 0.f) {
  Tensor t = Tensor::empty(shape, {dt, Device::cuda(0)});
  const int64_t n = t.numel();
  if (dt == kFloat32) fill_random<float><<<1024, 256>>>(t.data_ptr<float>(), n, seed, scale, shift);
  else fill_random<bf16><<<1024, 256>>>(t.data_ptr<bf16>(), n, seed, scale, shift);
  TG_CUDA_CHECK(cudaGetLastError());
  return t;
}

// The flush as a kernel (what PyTorch's `flush.fill_(v)` runs in bench/torch_norm_ref.py):
// --flush kernel uses it instead of cudaMemsetAsync, to compare the two harnesses.
__global__ void fill_words(uint4* p, size_t n, unsigned v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = make_uint4(v, v, v, v);
}

// Reads n words (for --flush clean); the store, never taken, keeps the reads.
__global__ void read_words(const uint4* p, size_t n, unsigned* never) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u && threadIdx.x == 0) *never = acc;
}

struct Timer {
  std::string flush_mode;  // memset, kernel or clean (--flush)
  const bool kernel_flush = flush_mode == "kernel";
  const bool clean_flush = flush_mode == "clean";
  std::string dot_dir;  // --dot: each captured graph written there
  void* flush = nullptr;
  void* clean = nullptr;  // clean_flush: read after the memset
  size_t flush_bytes = size_t(256) << 20;
  cudaEvent_t a, b;
  cudaStream_t s;
  Timer(std::string flush, std::string dot) : flush_mode(std::move(flush)), dot_dir(std::move(dot)) {
    TG_CUDA_CHECK(cudaMalloc(&this->flush, flush_bytes));
    if (clean_flush) {
      TG_CUDA_CHECK(cudaMalloc(&clean, flush_bytes + 16));
      TG_CUDA_CHECK(cudaMemset(clean, 0, flush_bytes + 16));
    }
    TG_CUDA_CHECK(cudaEventCreate(&a));
    TG_CUDA_CHECK(cudaEventCreate(&b));
    s = cuda::stream(0);
  }
  bool use_graph = true;
  // Median microseconds of `reps` calls of f, each after an L2 flush. With use_graph, f is
  // captured once (after the warm-up, so every allocation it makes is served from the caching
  // allocator's free lists, and the addresses it captures stay unused by anything else here)
  // and the graph is replayed.
  template <class F>
  double median_us(F&& f, int reps, int warmup = 5) {
    for (int i = 0; i < warmup; ++i) f();
    cudaGraphExec_t exec = nullptr;
    if (use_graph) {
      TG_CUDA_CHECK(cudaStreamSynchronize(s));
      cudaGraph_t graph;
      TG_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
      f();
      TG_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
      if (!dot_dir.empty()) {
        static int k = 0;
        const std::string path = dot_dir + "/g" + std::to_string(k++) + ".dot";
        TG_CUDA_CHECK(cudaGraphDebugDotPrint(graph, path.c_str(), 0));
      }
      TG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      TG_CUDA_CHECK(cudaGraphDestroy(graph));
      TG_CUDA_CHECK(cudaGraphLaunch(exec, s));
    }
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
      if (kernel_flush) {
        fill_words<<<cuda::sm_count(0) * 8, 256, 0, s>>>(static_cast<uint4*>(flush), flush_bytes / 16, (i & 0xff) * 0x01010101u);
        TG_CUDA_CHECK(cudaGetLastError());
      } else {
        TG_CUDA_CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes, s));
      }
      if (clean_flush) {
        auto* base = static_cast<unsigned char*>(clean);
        read_words<<<cuda::sm_count(0) * 8, 256, 0, s>>>(reinterpret_cast<const uint4*>(base), flush_bytes / 16,
                                                        reinterpret_cast<unsigned*>(base + flush_bytes));
        TG_CUDA_CHECK(cudaGetLastError());
      }
      TG_CUDA_CHECK(cudaEventRecord(a, s));
      if (exec) TG_CUDA_CHECK(cudaGraphLaunch(exec, s));
      else f();
      TG_CUDA_CHECK(cudaEventRecord(b, s));
      TG_CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      TG_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      t.push_back(ms * 1000.f);
    }
    if (exec) TG_CUDA_CHECK(cudaGraphExecDestroy(exec));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

// Device-to-device copy bandwidth, bytes read + written per second.
double copy_bandwidth(Timer& timer) {
  const size_t n = size_t(1) << 30;
  void *src, *dst;
  TG_CUDA_CHECK(cudaMalloc(&src, n));
  TG_CUDA_CHECK(cudaMalloc(&dst, n));
  TG_CUDA_CHECK(cudaMemset(src, 1, n));
  const double us = timer.median_us([&] { TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, timer.s)); }, 30);
  TG_CUDA_CHECK(cudaFree(src));
  TG_CUDA_CHECK(cudaFree(dst));
  return 2.0 * n / (us * 1e-6);
}

struct Mode {
  const char* name;
  bool x, w, b;  // which inputs require grad (b: LayerNorm only)
};

struct Result {
  std::string op, dtype, mode;
  int64_t rows, dim;
  double us, bytes;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 100;
  const char* csv = nullptr;
  std::string json, flush_mode = "memset", dot_dir;
  bool quick = false, graph = true;
  std::string only, only_dtype, only_shape, only_mode;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = bench::positive_arg("--reps", argv[++i]);
    else if (!std::strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc) only_dtype = argv[++i];
    else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) only_shape = argv[++i];
    else if (!std::strcmp(argv[i], "--mode") && i + 1 < argc) only_mode = argv[++i];
    else if (!std::strcmp(argv[i], "--no-graph")) graph = false;
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!std::strcmp(argv[i], "--flush") && i + 1 < argc) flush_mode = argv[++i];
    else if (!std::strcmp(argv[i], "--dot") && i + 1 < argc) dot_dir = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--reps N] [--csv out.csv] [--json out.json] [--quick] [--only rms|ln] "
                   "[--dtype bf16|fp32] [--shape ROWSxDIM] [--mode NAME] [--no-graph] "
                   "[--flush memset|kernel|clean] [--dot DIR]\n",
                   argv[0]);
      return 2;
    }
  }
  if (flush_mode != "memset" && flush_mode != "kernel" && flush_mode != "clean") {
    std::fprintf(stderr, "norm_bench: --flush wants memset, kernel or clean, got %s\n", flush_mode.c_str());
    return 2;
  }
  if (!cuda_is_available()) {
    std::fprintf(stderr, "norm_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop;
  TG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  Timer timer(flush_mode, dot_dir);
  timer.use_graph = false;  // the copy is one call
  const double copy_bw = copy_bandwidth(timer);
  timer.use_graph = graph;
  std::printf("device: %s, %d SMs, L2 %.0f MB; copy bandwidth (read + write): %.0f GB/s; timing: %s; flush: %s\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6, copy_bw / 1e9,
              graph ? "CUDA graph replay" : "direct calls", timer.flush_mode.c_str());

  std::vector<std::pair<int64_t, int64_t>> shapes = {{2048, 4096}, {4096, 4096}, {4096, 8192}, {8192, 4096},
                                                     {8192, 8192}, {16384, 8192}, {8192, 1500}, {8192, 3584},
                                                     {262144, 128}};
  if (quick) shapes = {{8192, 8192}, {8192, 1500}, {262144, 128}};
  if (!only_shape.empty()) {
    const std::optional<std::vector<int64_t>> rd = io::parse_integers<int64_t>(only_shape, 'x');
    if (!rd || rd->size() != 2 || (*rd)[0] < 1 || (*rd)[1] < 1 || (*rd)[0] > INT32_MAX || (*rd)[1] > INT32_MAX) {
      std::fprintf(stderr, "norm_bench: --shape wants ROWSxDIM with sizes in [1, 2^31), got %s\n", only_shape.c_str());
      return 2;
    }
    shapes = {{(*rd)[0], (*rd)[1]}};
  }
  const std::vector<Mode> rms_modes = {{"full", true, true, false}, {"frozen", true, false, false}, {"dw_only", false, true, false}};
  const std::vector<Mode> ln_modes = {{"full", true, true, true},     {"w_frozen", true, false, true},
                                      {"b_frozen", true, true, false}, {"both_frozen", true, false, false},
                                      {"dw_only", false, true, true}};
  std::vector<Result> results;
  std::printf("\n%-10s %-5s %-13s %-11s %10s %12s %8s %6s %8s\n", "op", "dtype", "shape", "mode", "time us",
              "min bytes", "GB/s", "copy", "vs full");
  for (const char* op : {"rms_norm", "layer_norm"}) {
    const bool ln = !std::strcmp(op, "layer_norm");
    if (!only.empty() && only != (ln ? "ln" : "rms")) continue;
    for (DType dt : {kBFloat16, kFloat32}) {
      const std::string dname = dt == kBFloat16 ? "bf16" : "fp32";
      if (!only_dtype.empty() && only_dtype != dname) continue;
      const double es = dt == kBFloat16 ? 2 : 4;
      for (auto [rows, dim] : shapes) {
        char shape[32];
        std::snprintf(shape, sizeof shape, "%lldx%lld", (long long)rows, (long long)dim);
        double full_us = 0;
        for (const Mode& m : ln ? ln_modes : rms_modes) {
          if (!only_mode.empty() && only_mode != m.name) continue;
          Tensor x = random_tensor({rows, dim}, dt, 1);
          Tensor w = random_tensor({dim}, dt, 2, 0.2f, 1.f);
          Tensor b = ln ? random_tensor({dim}, dt, 3, 0.1f) : Tensor();
          Tensor dy = random_tensor({rows, dim}, dt, 4);
          x.requires_grad_(m.x);
          w.requires_grad_(m.w);
          if (ln) b.requires_grad_(m.b);
          Tensor y = ln ? layer_norm(x, w, b, 1e-5) : rms_norm(x, w, 1e-5);
          std::shared_ptr<Node> node = y.grad_fn();
          GradMask mask = ln ? GradMask{m.x, m.w, m.b} : GradMask{m.x, m.w};
          std::vector<Tensor> grads = {dy};
          const double us = timer.median_us(
              [&] {
                NoGradGuard g;
                auto out = node->backward(grads, mask);
              },
              reps);
          TG_CUDA_CHECK(cudaGetLastError());
          const bool need_x = m.x || m.w;
          double bytes = double(rows) * dim * es;               // dy
          if (need_x) bytes += double(rows) * dim * es;         // x
          if (need_x) bytes += double(rows) * (ln ? 8 : 4);     // statistics
          if (m.x) bytes += double(dim) * es + double(rows) * dim * es;  // w, dx
          if (m.w) bytes += double(dim) * es;                   // dw
          if (ln && m.b) bytes += double(dim) * es;             // db
          if (!std::strcmp(m.name, "full")) full_us = us;
          results.push_back({op, dname, m.name, rows, dim, us, bytes});
          std::printf("%-10s %-5s %-13s %-11s %10.1f %12.0f %8.0f %6.2f %8.3f\n", op, dname.c_str(), shape, m.name, us,
                      bytes, bytes / (us * 1e-6) / 1e9, bytes / (us * 1e-6) / copy_bw, full_us > 0 ? us / full_us : 0.0);
          std::fflush(stdout);
        }
      }
    }
  }
  if (csv) {
    FILE* f = std::fopen(csv, "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", csv);
      return 1;
    }
    std::fprintf(f, "op,dtype,rows,dim,mode,us,min_bytes,copy_bw\n");
    for (const auto& r : results)
      std::fprintf(f, "%s,%s,%lld,%lld,%s,%.2f,%.0f,%.0f\n", r.op.c_str(), r.dtype.c_str(), (long long)r.rows,
                   (long long)r.dim, r.mode.c_str(), r.us, r.bytes, copy_bw);
    std::fclose(f);
    std::printf("\nwrote %s\n", csv);
  }
  if (!json.empty()) {
    bench::JsonRows out("norm_bench", prop.name);
    for (const auto& r : results)
      out.add()
          .str("op", r.op)
          .str("dtype", r.dtype)
          .num("rows", double(r.rows))
          .num("dim", double(r.dim))
          .str("mode", r.mode)
          .num("us", r.us, 5)
          .num("min_bytes", r.bytes, 10)
          .num("copy_gbs", copy_bw / 1e9, 5)
          .str("flush", timer.flush_mode);
    out.write(json);
    std::printf("wrote %s\n", json.c_str());
  }
  return 0;
}
