// The per-device index-error flag of index_check.cuh.
#include <mutex>
#include <vector>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/runtime.h"
#include "core/cuda_graph.h"
#include "ops/cuda/index_check.cuh"

namespace tg::cuda::index_check {
namespace {

constexpr size_t kWords = 4;

struct State {
  std::mutex mu;
  long long* dev = nullptr;   // kWords on the device
  long long* host = nullptr;  // kWords of pinned host memory the flag is copied into
  cudaEvent_t copied = nullptr;
  bool pending = false;       // a copy was queued and not yet looked at
};

State& state(int device) {
  static std::vector<State> states(static_cast<size_t>(device_count()));
  TG_CHECK(device >= 0 && device < static_cast<int>(states.size()), "cuda", "device cuda:", device,
           " does not exist");
  State& s = states[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.dev) {
    // 32 bytes for the life of the process, made once: allocated outside the caching allocator
    // so they never show up as an op's memory in its statistics.
    TG_CUDA_CHECK(cudaSetDevice(device));
    TG_CUDA_CHECK(cudaMalloc(&s.dev, kWords * sizeof(long long)));
    TG_CUDA_CHECK(cudaMemset(s.dev, 0, kWords * sizeof(long long)));
    TG_CUDA_CHECK(cudaHostAlloc(&s.host, kWords * sizeof(long long), cudaHostAllocDefault));
    for (size_t i = 0; i < kWords; ++i) s.host[i] = 0;
    TG_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
  }
  return s;
}

}  // namespace

long long* flag(int device) { return state(device).dev; }

void raise_pending(int device) {
  if (is_capturing(device)) return;  // no event can be queried now: the replays check (watch)
  State& s = state(device);
  long long what, index, bound;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.pending) return;
    cudaError_t ready = cudaEventQuery(s.copied);
    if (ready == cudaErrorNotReady) return;  // not landed yet: look again next call
    TG_CUDA_CHECK(ready);
    s.pending = false;
    what = s.host[0], index = s.host[1], bound = s.host[2];
    if (what == 0) return;
    // Report once: clear both copies before throwing.
    TG_CUDA_CHECK(cudaMemsetAsync(s.dev, 0, kWords * sizeof(long long), stream(device)));
    for (size_t i = 0; i < kWords; ++i) s.host[i] = 0;
  }
  if (what == kIndexCopy)
    fail("index_copy_", "index ", index, " is out of range for a dim of size ", bound, " (wants 0 <= index < ", bound,
         "); found on cuda:", device, " by an earlier call, which did not write that slice");
  if (what == kMoeExpert)
    fail("sort_by_expert", "expert id ", index, " is out of range for ", bound, " experts (wants 0 <= id < ", bound,
         "); found on cuda:", device, " by an earlier call, which left that choice out");
  if (what == kCrossEntropy)
    fail("cross_entropy", "target ", index, " is out of range for ", bound, " classes (wants 0 <= target < ",
         bound, " or ignore_index); found on cuda:", device, " by an earlier call, whose loss is nan");
  fail("embedding", "index ", index, " is out of range for a weight of ", bound, " rows (wants 0 <= index < ",
       bound, "); found on cuda:", device, " by an earlier call, whose output rows for it are zeros");
}

void watch(int device, cudaStream_t stream) {
  if (is_capturing(device)) {
    // The graph's kernels report into the flag at every replay: look before each replay, copy after it.
    at_each_replay(Device::cuda(device), "index_check", [device] { raise_pending(device); },
                   [device] { watch(device, cuda::stream(device)); });
    return;
  }
  State& s = state(device);
  std::lock_guard<std::mutex> lock(s.mu);
  TG_CUDA_CHECK(cudaMemcpyAsync(s.host, s.dev, kWords * sizeof(long long), cudaMemcpyDeviceToHost, stream));
  TG_CUDA_CHECK(cudaEventRecord(s.copied, stream));
  s.pending = true;
}

}  // namespace tg::cuda::index_check
