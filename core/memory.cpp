#include "core/memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

#include "core/detail/block_cache.h"

#include "core/error.h"

#ifdef TG_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace tg {
namespace {

// The host allocator: 64-byte aligned blocks (a cache line; any vector load) kept in a
// BlockCache when freed, so the steady state of a training loop costs no malloc and no page
// faults.
std::mutex cpu_mu;
MemoryStats cpu_stats;

// The cached blocks go back to the system at exit (so LeakSanitizer sees none). Tensors that
// outlive it (other static objects) then free straight to the system.
bool cpu_cache_closed = false;
struct HostCache {
  BlockCache blocks;
  ~HostCache() {
    std::lock_guard<std::mutex> lock(cpu_mu);
    blocks.release_all([](void* p, size_t) { std::free(p); });
    cpu_cache_closed = true;
  }
} cpu_cache_at_exit;
BlockCache& cpu_cache = cpu_cache_at_exit.blocks;

void check_cuda_built(const char* op, Device d) {
#ifndef TG_WITH_CUDA
  TG_CHECK(!d.is_cuda(), op, "device ", d, " requested, but tapegrad was built without CUDA "
           "(configure with -DTG_CUDA=ON on a machine with the CUDA toolkit)");
#else
  (void)op, (void)d;
#endif
}

}  // namespace

bool cuda_is_available() { return cuda_device_count() > 0; }

int cuda_device_count() {
#ifdef TG_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

Device default_device() { return cuda_is_available() ? Device::cuda(0) : Device::cpu(); }

void* allocate(Device device, size_t nbytes) {
  check_cuda_built("allocate", device);
#ifdef TG_WITH_CUDA
  if (device.is_cuda()) return cuda::allocate(device.index, nbytes);
#endif
  if (nbytes == 0) return nullptr;
  const size_t cls = BlockCache::size_class(nbytes);
  std::lock_guard<std::mutex> lock(cpu_mu);
  void* p = cpu_cache_closed ? nullptr : cpu_cache.take(cls);
  if (!p) {
    p = std::aligned_alloc(64, cls);
    if (!p && !cpu_cache_closed) {  // give the cache back to the system and try once more
      cpu_cache.release_all([](void* q, size_t c) { std::free(q), cpu_stats.bytes_reserved -= c; });
      p = std::aligned_alloc(64, cls);
    }
    TG_CHECK(p, "allocate", "out of host memory allocating ", nbytes, " bytes (", cpu_stats.bytes_in_use,
             " bytes in use by tensors)");
    cpu_stats.bytes_reserved += cls;
    ++cpu_stats.device_allocations;
  }
  cpu_stats.bytes_in_use += nbytes;
  cpu_stats.peak_bytes = std::max(cpu_stats.peak_bytes, cpu_stats.bytes_in_use);
  ++cpu_stats.allocations;
  return p;
}

void deallocate(Device device, void* ptr, size_t nbytes) noexcept {
  if (!ptr) return;
#ifdef TG_WITH_CUDA
  if (device.is_cuda()) {
    try {
      cuda::deallocate(device.index, ptr, nbytes);
    } catch (...) {  // storage is freed in destructors, also while unwinding: the block is lost, not the process
    }
    return;
  }
#else
  (void)device;
#endif
  std::lock_guard<std::mutex> lock(cpu_mu);
  cpu_stats.bytes_in_use -= nbytes;
  if (cpu_cache_closed) return std::free(ptr);
  try {
    cpu_cache.put(ptr, BlockCache::size_class(nbytes));
  } catch (const std::bad_alloc&) {  // no memory to remember the block in: give it back instead
    std::free(ptr);
  }
}

MemoryStats memory_stats(Device device) {
  check_cuda_built("memory_stats", device);
#ifdef TG_WITH_CUDA
  if (device.is_cuda()) return cuda::memory_stats(device.index);
#endif
  return cpu_stats;
}

void reset_peak_memory_stats(Device device) {
  check_cuda_built("reset_peak_memory_stats", device);
#ifdef TG_WITH_CUDA
  if (device.is_cuda()) return cuda::reset_peak_memory_stats(device.index);
#endif
  std::lock_guard<std::mutex> lock(cpu_mu);
  cpu_stats.peak_bytes = cpu_stats.bytes_in_use;
  cpu_stats.allocations = 0;
  cpu_stats.device_allocations = 0;
}

size_t available_memory(Device device) {
  check_cuda_built("available_memory", device);
#ifdef TG_WITH_CUDA
  if (device.is_cuda()) return cuda::free_memory(device.index);
#endif
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);)
    if (line.rfind("MemAvailable:", 0) == 0) return static_cast<size_t>(std::stoull(line.substr(13))) * 1024;  // kB
  return 0;
}

void empty_cache(Device device) {
  check_cuda_built("empty_cache", device);
#ifdef TG_WITH_CUDA
  if (device.is_cuda()) return cuda::empty_cache(device.index);
#endif
  std::lock_guard<std::mutex> lock(cpu_mu);
  cpu_cache.release_all([](void* p, size_t cls) { std::free(p), cpu_stats.bytes_reserved -= cls; });
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n) {
  check_cuda_built("copy", dst_device);
  check_cuda_built("copy", src_device);
  if (n == 0) return;
#ifdef TG_WITH_CUDA
  if (dst_device.is_cuda() || src_device.is_cuda()) return cuda::copy_bytes(dst, dst_device, src, src_device, n);
#endif
  std::memcpy(dst, src, n);
}

void synchronize(Device device) {
  check_cuda_built("synchronize", device);
#ifdef TG_WITH_CUDA
  if (device.is_cuda()) cuda::synchronize(device.index);
#endif
}

HostToDevice::HostToDevice(Device device, size_t buffer_bytes) : device_(device), bytes_(buffer_bytes) {
  check_cuda_built("HostToDevice", device);
  TG_CHECK(device.is_cuda() && buffer_bytes > 0, "HostToDevice", "streams to a GPU through buffers of some bytes, got ",
           device, " and ", buffer_bytes, " bytes");
#ifdef TG_WITH_CUDA
  buffers_[0] = cuda::allocate_pinned(buffer_bytes);
  try {
    buffers_[1] = cuda::allocate_pinned(buffer_bytes);
  } catch (...) {
    cuda::free_pinned(buffers_[0]);
    throw;
  }
#endif
}

HostToDevice::~HostToDevice() {
#ifdef TG_WITH_CUDA
  for (int i = 0; i < 2; ++i) {
    if (copied_[i]) {
      try {
        cuda::wait_and_destroy_event(copied_[i]);
      } catch (...) {  // a failed copy was reported by the device's next call; the buffer must outlive it
      }
    }
    cuda::free_pinned(buffers_[i]);
  }
#endif
}

void* HostToDevice::buffer() {
#ifdef TG_WITH_CUDA
  if (copied_[next_]) {
    void* e = copied_[next_];
    copied_[next_] = nullptr;
    cuda::wait_and_destroy_event(e);
  }
#endif
  return buffers_[next_];
}

void HostToDevice::send(void* dst, size_t n) {
  TG_CHECK(n <= bytes_, "HostToDevice", "send of ", n, " bytes from a buffer of ", bytes_);
  TG_CHECK(!copied_[next_], "HostToDevice", "send() without buffer() first");
#ifdef TG_WITH_CUDA
  if (n > 0) copied_[next_] = cuda::copy_pinned_async(dst, device_.index, buffers_[next_], n);
#else
  (void)dst;
#endif
  next_ = 1 - next_;
}

}  // namespace tg
