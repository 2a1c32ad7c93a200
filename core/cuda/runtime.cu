// Devices, streams, the caching allocator and byte copies.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/detail/block_cache.h"
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/runtime.h"
#include "core/cuda_settings.h"

namespace tg::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw Error(detail::cat("cuda: ", call, " failed with ", cudaGetErrorName(err), " (",
                          cudaGetErrorString(err), ") at ", file, ":", line));
}

namespace {

struct DeviceState {
  std::mutex mu;
  cudaStream_t stream = nullptr;
  cudaStream_t copy_stream = nullptr;  // activation offload's copies (side_copy_async)
  int sm_count = 0;
  int l2_bytes = -1;
  PooledBlockCache cache;  // with the pools of CUDA graphs (core/detail/block_cache.h)
  MemoryStats stats;
};

std::vector<std::unique_ptr<DeviceState>>& states() {
  static std::vector<std::unique_ptr<DeviceState>> s = [] {
    std::vector<std::unique_ptr<DeviceState>> v;
    for (int i = 0, n = device_count(); i < n; ++i) v.push_back(std::make_unique<DeviceState>());
    return v;
  }();
  return s;
}

DeviceState& state(int device) {
  auto& s = states();
  TG_CHECK(device >= 0 && device < static_cast<int>(s.size()), "cuda", "device cuda:", device,
           " does not exist (", s.size(), " CUDA devices visible)");
  return *s[static_cast<size_t>(device)];
}

// cudaMalloc is not a stream operation, so a capture in the default mode refuses it; the pool's
// blocks are ours to track (PyTorch's allocator does the same).
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { TG_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode_)); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }  // restores; cannot throw here
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

void check_not_capturing(const DeviceState& st, int device, const char* what) {
  TG_CHECK(st.cache.capture_pool() == 0, what, "cuda:", device,
           " is capturing a CUDA graph: a host wait or host copy cannot be part of a graph (read results "
           "after replay(); copy inputs into the tensors the graph reads before replay())");
}

void release_cached(DeviceState& st) {
  st.cache.release_shared([&](void* p, size_t cls) {
    TG_CUDA_CHECK(cudaFree(p));
    st.stats.bytes_reserved -= cls;
  });
}

}  // namespace

int device_count() {
  static int n = [] {
    int count = 0;
    // No driver or no device: CUDA tensors are unavailable, not an error at start-up.
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return count;
  }();
  return n;
}

cudaStream_t stream(int device) {
  DeviceState& st = state(device);
  TG_CUDA_CHECK(cudaSetDevice(device));
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.stream) TG_CUDA_CHECK(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
  return st.stream;
}

cudaStream_t stream_for(const Tensor& t) {
  TG_CHECK(t.device().is_cuda(), "cuda", "kernel got a tensor on ", t.device());
  return stream(t.device().index);
}

StridedIndex strided_index(const Shape& shape, const Shape& strides) {
  TG_CHECK(shape.size() <= StridedIndex::kMaxDims, "cuda", "tensors of more than ",
           StridedIndex::kMaxDims, " dims are not supported on the GPU, got ", shape);
  StridedIndex idx;
  idx.ndim = static_cast<int>(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) idx.sizes[d] = shape[d], idx.strides[d] = strides[d];
  return idx;
}

int sm_count(int device) {
  DeviceState& st = state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.sm_count == 0)
    TG_CUDA_CHECK(cudaDeviceGetAttribute(&st.sm_count, cudaDevAttrMultiProcessorCount, device));
  return st.sm_count;
}

void allow_smem(const void* fn, size_t smem, int device) {
  if (smem <= 48 * 1024) return;
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> done;
  std::lock_guard<std::mutex> lock(mu);
  size_t& have = done[{fn, device}];
  if (have >= smem) return;
  TG_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  have = smem;
}

bool compiled_for_sm90(const void* fn, int device) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, bool> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find({fn, device});
  if (it != known.end()) return it->second;
  cudaFuncAttributes attr;
  TG_CUDA_CHECK(cudaFuncGetAttributes(&attr, fn));
  return known[{fn, device}] = attr.ptxVersion >= 90;
}

int64_t l2_bytes(int device) {
  DeviceState& st = state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.l2_bytes < 0) TG_CUDA_CHECK(cudaDeviceGetAttribute(&st.l2_bytes, cudaDevAttrL2CacheSize, device));
  return st.l2_bytes;
}

size_t free_memory(int device) {
  state(device);  // checks the device exists
  TG_CUDA_CHECK(cudaSetDevice(device));
  size_t free = 0, total = 0;
  TG_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

std::string device_name(int device) {
  state(device);  // checks the device exists
  cudaDeviceProp prop;
  TG_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

void* allocate(int device, size_t nbytes) {
  DeviceState& st = state(device);  // a missing device is an error even for an empty tensor
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(st.mu);
  size_t cls = BlockCache::size_class(nbytes);
  const bool capturing = st.cache.capture_pool() != 0;
  void* p = st.cache.take(cls);
  if (!p) {
    TG_CUDA_CHECK(cudaSetDevice(device));
    RelaxedCaptureMode relaxed;
    cudaError_t err = cudaMalloc(&p, cls);
    // Give back what the cache holds, then retry once (not during a capture: cudaFree waits).
    if (err == cudaErrorMemoryAllocation && !capturing) {
      cudaGetLastError();
      release_cached(st);
      err = cudaMalloc(&p, cls);
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      fail("allocate", "CUDA out of memory on cuda:", device, " allocating ", nbytes, " bytes (",
           st.stats.bytes_in_use, " bytes in use by tensors, ", st.stats.bytes_reserved, " reserved)");
    }
    st.stats.bytes_reserved += cls;
    ++st.stats.device_allocations;
  }
  st.cache.hold(p, cls);
  st.stats.bytes_in_use += nbytes;
  st.stats.peak_bytes = std::max(st.stats.peak_bytes, st.stats.bytes_in_use);
  ++st.stats.allocations;
  return p;
}

void deallocate(int device, void* ptr, size_t nbytes) {
  DeviceState& st = state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  // All work is ordered on the one stream, so a later kernel that reuses this block runs after
  // every kernel that used it: no synchronisation needed.
  if (st.cache.put(ptr) == 0) return;
  st.stats.bytes_in_use -= nbytes;
}

MemoryStats memory_stats(int device) {
  DeviceState& st = state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  return st.stats;
}

void reset_peak_memory_stats(int device) {
  DeviceState& st = state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  st.stats.peak_bytes = st.stats.bytes_in_use;
  st.stats.allocations = 0;
  st.stats.device_allocations = 0;
}

void empty_cache(int device) {
  DeviceState& st = state(device);
  synchronize(device);  // refuses during a capture (cudaFree would wait)
  std::lock_guard<std::mutex> lock(st.mu);
  release_cached(st);
}

uint64_t create_graph_pool(int device) {
  DeviceState& st = state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  return st.cache.create_pool();
}

void release_graph_pool(int device, uint64_t pool) {
  DeviceState& st = state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  // Work queued after this on the stream runs after the graph's last replay: its free blocks can
  // serve others at once.
  st.cache.release_pool(pool);
}

void begin_capture(int device, uint64_t pool) {
  DeviceState& st = state(device);
  cudaStream_t s = stream(device);
  {
    std::lock_guard<std::mutex> lock(st.mu);
    TG_CHECK(st.cache.capture_pool() == 0, "CUDAGraph", "cuda:", device,
             " is already capturing a graph (captures do not nest)");
    TG_CHECK(st.cache.has_pool(pool), "CUDAGraph", "memory pool ", pool, " of cuda:", device, " does not exist");
    st.cache.set_capture_pool(pool);
  }
  // Thread-local: a potentially unsafe call (a host wait, cudaMalloc outside the allocator) on this
  // thread invalidates the capture; other threads are not bound by it.
  const cudaError_t err = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    std::lock_guard<std::mutex> lock(st.mu);
    st.cache.set_capture_pool(0);
    TG_CUDA_CHECK(err);
  }
}

void* end_capture(int device) {
  DeviceState& st = state(device);
  cudaStream_t s = stream(device);
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(s, &graph);
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.cache.set_capture_pool(0);
  }
  if (err != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // the capture's error is reported here, not left for the next call
    fail("CUDAGraph", "the capture on cuda:", device, " failed with ", cudaGetErrorName(err), " (",
         cudaGetErrorString(err), "): a call in it cannot be captured (a host wait, a host copy, another stream)");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  TG_CUDA_CHECK(cudaGraphDestroy(graph));
  TG_CUDA_CHECK(inst);
  return exec;
}

void abort_capture(int device) {
  DeviceState& st = state(device);
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream(device), &graph);  // invalidated or not: it is discarded
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
  std::lock_guard<std::mutex> lock(st.mu);
  st.cache.set_capture_pool(0);
}

bool is_capturing(int device) {
  DeviceState& st = state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  return st.cache.capture_pool() != 0;
}

void launch_graph(int device, void* exec) {
  TG_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), stream(device)));
}

void destroy_graph(int device, void* exec) {
  synchronize(device);  // the last replay may still run
  TG_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)));
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n) {
  if (dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index) {
    // Between two devices: the copy runs on the source's stream after the destination's queued
    // work (which may still read the old bytes), and the destination's stream waits for it.
    cudaStream_t ss = stream(src_device.index), ds = stream(dst_device.index);
    cudaEvent_t dst_ready, copied;
    TG_CUDA_CHECK(cudaEventCreateWithFlags(&dst_ready, cudaEventDisableTiming));
    TG_CUDA_CHECK(cudaEventRecord(dst_ready, ds));
    TG_CUDA_CHECK(cudaSetDevice(src_device.index));
    TG_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    TG_CUDA_CHECK(cudaStreamWaitEvent(ss, dst_ready, 0));
    TG_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, n, ss));
    TG_CUDA_CHECK(cudaEventRecord(copied, ss));
    TG_CUDA_CHECK(cudaStreamWaitEvent(ds, copied, 0));
    TG_CUDA_CHECK(cudaEventDestroy(dst_ready));  // released once the events have completed
    TG_CUDA_CHECK(cudaEventDestroy(copied));
    return;
  }
  int device = dst_device.is_cuda() ? dst_device.index : src_device.index;
  cudaStream_t s = stream(device);
  if (!(dst_device.is_cuda() && src_device.is_cuda())) {
    DeviceState& st = state(device);
    std::lock_guard<std::mutex> lock(st.mu);
    check_not_capturing(st, device, dst_device.is_cuda() ? "copy to the GPU" : "copy to the host");
  }
  if (dst_device.is_cuda() && src_device.is_cuda()) {
    TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s));
  } else if (dst_device.is_cuda()) {
    // From pageable host memory the data is staged before this returns; the host buffer may go.
    TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s));
  } else {
    TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s));
    TG_CUDA_CHECK(cudaStreamSynchronize(s));  // the host reads it next
  }
}

void synchronize(int device) {
  {
    DeviceState& st = state(device);
    std::lock_guard<std::mutex> lock(st.mu);
    check_not_capturing(st, device, "synchronize");
  }
  TG_CUDA_CHECK(cudaStreamSynchronize(stream(device)));
}

void* allocate_pinned(size_t nbytes) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, nbytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail("allocate_pinned", "cannot pin ", nbytes, " bytes of host memory: ", cudaGetErrorString(err));
  }
  return p;
}

void free_pinned(void* ptr) noexcept {
  if (ptr) cudaFreeHost(ptr);  // a destructor's call: nothing to report to
}

void* copy_pinned_async(void* dst, int device, const void* src, size_t n) {
  {
    DeviceState& st = state(device);
    std::lock_guard<std::mutex> lock(st.mu);
    check_not_capturing(st, device, "copy to the GPU");
  }
  cudaStream_t s = stream(device);
  TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s));
  cudaEvent_t done;
  TG_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  TG_CUDA_CHECK(cudaEventRecord(done, s));
  return done;
}

void wait_and_destroy_event(void* event) {
  auto e = static_cast<cudaEvent_t>(event);
  const cudaError_t err = cudaEventSynchronize(e);
  cudaEventDestroy(e);
  TG_CUDA_CHECK(err);
}

namespace {
cudaStream_t copy_stream(int device) {
  DeviceState& st = state(device);
  stream(device);  // sets the device, creates the compute stream first
  std::lock_guard<std::mutex> lock(st.mu);
  check_not_capturing(st, device, "an activation offload copy");
  if (!st.copy_stream) TG_CUDA_CHECK(cudaStreamCreateWithFlags(&st.copy_stream, cudaStreamNonBlocking));
  return st.copy_stream;
}
}  // namespace

void* side_copy_async(void* dst, const void* src, size_t n, int device, bool to_device) {
  cudaStream_t side = copy_stream(device), compute = stream(device);
  // After what the compute stream queued: the source's writes, and the last use of the destination
  // block (the caching allocator reuses freed blocks in the compute stream's order).
  cudaEvent_t queued, done;
  TG_CUDA_CHECK(cudaEventCreateWithFlags(&queued, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(queued, compute);
  const cudaError_t waited = recorded == cudaSuccess ? cudaStreamWaitEvent(side, queued, 0) : recorded;
  cudaEventDestroy(queued);  // the wait keeps what it needs
  TG_CUDA_CHECK(waited);
  TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, side));
  TG_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  const cudaError_t err = cudaEventRecord(done, side);
  if (err != cudaSuccess) {
    cudaEventDestroy(done);
    TG_CUDA_CHECK(err);
  }
  return done;
}

void compute_wait(int device, void* event) {
  TG_CUDA_CHECK(cudaStreamWaitEvent(stream(device), static_cast<cudaEvent_t>(event), 0));
}

void destroy_event(void* event) noexcept {
  if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));  // a destructor's call: nothing to report to
}

// One switch for the whole process (core/cuda_settings.h), also visible in CPU-only builds.
void set_allow_tf32(bool allow) { tg::set_allow_tf32(allow); }
bool allow_tf32() { return tg::allow_tf32(); }

}  // namespace tg::cuda
