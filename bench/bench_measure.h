// What the benchmarks of one op or layer (linear_ce_bench, moe_bench) measure: the median time of
// calls (on the GPU between CUDA events after a 256 MB write that evicts the inputs from L2, on the
// CPU the host clock), the allocator's peak above what is live before a call, and how far one
// implementation's result is from another's.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "tapegrad.h"
#ifdef TG_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include "core/cuda/cuda_utils.cuh"
#endif

namespace tg::bench {

// f() between cudaProfilerStart / Stop on a GPU: the window `ncu --profile-from-start off` and
// bench/cupti_timeline.cpp's traces (bench/timeline_census.py --window) take.
inline void profiled(Device device, const std::function<void()>& f) {
  synchronize(device);
#ifdef TG_WITH_CUDA
  if (device.is_cuda()) TG_CUDA_CHECK(cudaProfilerStart());
#endif
  f();
  synchronize(device);
#ifdef TG_WITH_CUDA
  if (device.is_cuda()) TG_CUDA_CHECK(cudaProfilerStop());
#endif
}

// Median ms of f() over `reps` calls after 3 warm-up calls.
class Timer {
 public:
  explicit Timer(Device device) : device_(device) {
#ifdef TG_WITH_CUDA
    if (device.is_cuda()) {
      flush_ = Tensor::empty({kFlushBytes / 4}, {kFloat32, device});
      TG_CUDA_CHECK(cudaEventCreate(&start_));
      TG_CUDA_CHECK(cudaEventCreate(&stop_));
    }
#endif
  }
  ~Timer() {
#ifdef TG_WITH_CUDA
    if (device_.is_cuda()) cudaEventDestroy(start_), cudaEventDestroy(stop_);
#endif
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  double median_ms(const std::function<void()>& f, int reps) {
    for (int i = 0; i < 3; ++i) f();
    synchronize(device_);
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) ms.push_back(device_.is_cuda() ? gpu_ms(f, i) : host_ms(f));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

 private:
  double host_ms(const std::function<void()>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    synchronize(device_);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  // Between two events on the device's stream, after a memset that evicts the inputs from L2.
  double gpu_ms([[maybe_unused]] const std::function<void()>& f, [[maybe_unused]] int rep) {
#ifdef TG_WITH_CUDA
    cudaStream_t s = cuda::stream(device_.index);
    TG_CUDA_CHECK(cudaMemsetAsync(flush_.data_ptr<float>(), rep & 0xff, kFlushBytes, s));
    TG_CUDA_CHECK(cudaEventRecord(start_, s));
    f();
    TG_CUDA_CHECK(cudaEventRecord(stop_, s));
    TG_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    TG_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
#else
    throw Error("bench::Timer: built without CUDA");
#endif
  }
  static constexpr int64_t kFlushBytes = int64_t{256} << 20;
  Device device_;
#ifdef TG_WITH_CUDA
  Tensor flush_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
#endif
};

// MiB that f() holds at its peak beyond what is live before it (inputs, gradients).
inline double peak_mib_above(Device device, const std::function<void()>& f) {
  synchronize(device);
  reset_peak_memory_stats(device);
  const size_t before = memory_stats(device).bytes_in_use;
  f();
  synchronize(device);
  return static_cast<double>(memory_stats(device).peak_bytes - before) / 1048576.0;
}

// ||a - b|| / ||b||, the sums of squares in float32.
inline double relative_error(const Tensor& a, const Tensor& b) {
  const Tensor a32 = to(a, kFloat32), b32 = to(b, kFloat32), d = sub(a32, b32);
  return std::sqrt(sum(mul(d, d)).item() / std::max(sum(mul(b32, b32)).item(), 1e-30));
}

}  // namespace tg::bench
