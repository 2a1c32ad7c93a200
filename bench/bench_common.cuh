// Shared by the benchmarks: event timing on our stream (median of many runs after warm-up),
// device-side random fill (no host generation for 8192^2 matrices), the copy-bandwidth ceiling
// and the output table / CSV.
#pragma once

#include <cstdint>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "core/cuda/runtime.h"
#include "core/tensor.h"
#include "core/detail/type_dispatch.h"

namespace tg::bench {

constexpr int kIters = 50, kWarmup = 5;

// Median of `iters` timings of f() (ms), each between two events on device 0's stream, after
// a warm-up of at least `warmup` calls and 200 ms: a large bf16 GEMM runs faster for its first
// tens of milliseconds than under sustained load (clocks under the power limit), and training
// is sustained load. torch_ref_gemm_elementwise.py warms up the same way.
inline double median_ms(const std::function<void()>& f, int iters = kIters, int warmup = kWarmup) {
  cudaStream_t s = cuda::stream(0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int done = 0; done < warmup || std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(200);
       done += warmup) {
    for (int i = 0; i < warmup; ++i) f();
    TG_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto& e : ev) TG_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    TG_CUDA_CHECK(cudaEventRecord(ev[2 * i], s));
    f();
    TG_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], s));
  }
  TG_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<float> ms(iters);
  for (int i = 0; i < iters; ++i) TG_CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (auto& e : ev) TG_CUDA_CHECK(cudaEventDestroy(e));
  std::sort(ms.begin(), ms.end());
  return ms[iters / 2];
}

// x[i] = uniform in [-1, 1) from a hash of (seed, i): one write per element.
template <class T>
__global__ void random_fill_kernel(T* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32) * 40503u;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    x[i] = cuda::cvt<T>(static_cast<float>(h) * 4.656612873e-10f - 1.0f);
  }
}

inline Tensor random_tensor(const Shape& shape, DType dt, uint32_t seed) {
  Tensor t = Tensor::empty(shape, {dt, Device::cuda(0)});
  dispatch_floating(dt, "random_tensor", [&](auto tag) {
    using T = typename decltype(tag)::type;
    random_fill_kernel<T><<<cuda::blocks_for(t.numel(), 256, 4096), 256, 0, cuda::stream(0)>>>(t.data_ptr<T>(), t.numel(), seed);
    TG_CUDA_CHECK_LAUNCH("random_fill");
  });
  return t;
}

// Device-to-device copy bandwidth (GB/s, bytes read + bytes written) of a 2 GiB cudaMemcpyAsync.
inline double copy_bandwidth_gbs() {
  const size_t n = size_t(2) << 30;
  void *a = nullptr, *b = nullptr;
  TG_CUDA_CHECK(cudaMalloc(&a, n));
  TG_CUDA_CHECK(cudaMalloc(&b, n));
  TG_CUDA_CHECK(cudaMemset(a, 1, n));
  double ms = median_ms([&] { TG_CUDA_CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, cuda::stream(0))); }, 20, 3);
  TG_CUDA_CHECK(cudaFree(a));
  TG_CUDA_CHECK(cudaFree(b));
  return 2.0 * double(n) / (ms * 1e-3) / 1e9;
}

// One result row: printed to stdout and, when a CSV file is open, written as
//   kind,name,dtype,shape,work,ms   (work = FLOPs for gemm, bytes moved for the others)
// `ceiling` is the rate the row is compared with (TFLOP/s or GB/s, measured in the same run).
struct Row {
  std::string kind, name, dtype, shape;
  double work = 0, ms = 0, ceiling = 0;
};

// Where the rows go: `bench [out.csv] [--json out.json]`.
struct Outputs {
  std::string csv, json;
};
inline Outputs parse_outputs(int argc, char** argv) {
  Outputs o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) o.json = argv[++i];
    else if (a[0] != '-' && o.csv.empty()) o.csv = a;
    else throw Error(std::string("usage: ") + argv[0] + " [out.csv] [--json out.json], got " + a);
  }
  return o;
}

// A benchmark's main: body(outputs) with the command line's outputs; no CUDA device or a
// tg::Error is exit status 1 with a message naming the benchmark.
inline int run_main(int argc, char** argv, const char* name, const std::function<void(const Outputs&)>& body) {
  try {
    const Outputs outputs = parse_outputs(argc, argv);
    if (cuda_device_count() == 0) {
      std::fprintf(stderr, "%s: no CUDA device\n", name);
      return 1;
    }
    body(outputs);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

inline std::string gpu_name() {
  cudaDeviceProp p;
  TG_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  return p.name;
}

// The rows as bench/results/<name>.json rows: the CSV's fields, the rate (work / ms, in
// `rate_key`'s unit: 1e12 FLOP/s for gemm, 1e9 B/s for the others) and the row's ceiling.
inline void write_json(const std::string& path, const char* bench, const std::vector<Row>& rows, const char* rate_key,
                       double rate_unit, const char* ceiling_key) {
  if (path.empty()) return;
  JsonRows out(bench, gpu_name());
  for (const Row& r : rows)
    out.add()
        .str("kind", r.kind)
        .str("name", r.name)
        .str("dtype", r.dtype)
        .str("shape", r.shape)
        .num("ms", r.ms, 5)
        .num(rate_key, r.work / (r.ms * 1e-3) / rate_unit, 4)
        .num(ceiling_key, r.ceiling, 4);
  out.write(path);
}

inline void write_csv(const std::string& path, const std::vector<Row>& rows) {
  if (path.empty()) return;
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path);
    return;
  }
  std::fprintf(f, "kind,name,dtype,shape,work,ms\n");
  for (const Row& r : rows)
    std::fprintf(f, "%s,%s,%s,%s,%.0f,%.6f\n", r.kind.c_str(), r.name.c_str(), r.dtype.c_str(), r.shape.c_str(), r.work, r.ms);
  std::fclose(f);
}

}  // namespace tg::bench
