// Device memory: allocation with statistics, and raw byte copies between devices.
// Both the host and CUDA allocators cache freed blocks by size class (core/detail/block_cache.h).
// Tests and benchmarks read the statistics to prove what a kernel variant did not allocate.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace tg {

struct MemoryStats {
  size_t bytes_in_use = 0;    // bytes held by live tensors (requested sizes)
  size_t peak_bytes = 0;      // maximum of bytes_in_use since the last reset
  uint64_t allocations = 0;   // allocate() calls since the last reset
  uint64_t device_allocations = 0;  // blocks taken from the system (cudaMalloc / aligned_alloc)
  size_t bytes_reserved = 0;  // bytes held from the system, cached blocks included
};

MemoryStats memory_stats(Device device = Device::cpu());
void reset_peak_memory_stats(Device device = Device::cpu());
// Returns the cached free blocks to the system (cudaFree / free).
void empty_cache(Device device = Device::cpu());
// What the system can still give: the host's MemAvailable (/proc/meminfo; 0 where unknown), a
// GPU's free memory (cudaMemGetInfo), the caching allocator's free blocks not counted.
size_t available_memory(Device device = Device::cpu());

void* allocate(Device device, size_t nbytes);
void deallocate(Device device, void* ptr, size_t nbytes) noexcept;  // never throws: called while unwinding
// Copies n bytes; either side may be host or device. Host<->device copies wait for the
// device's stream; device->device copies are ordered on it without blocking the host.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n);
// Waits until all queued device work is done (no-op on the CPU).
void synchronize(Device device);

// Streams host bytes to a GPU through two pinned host buffers used in turn, so that filling one
// (from_pretrained's file reads) overlaps the device's copy of the other: fill buffer(), then
// send() its first bytes; the next buffer() waits only for the copy made from it two sends ago.
class HostToDevice {
 public:
  HostToDevice(Device device, size_t buffer_bytes);
  ~HostToDevice();  // waits for the queued copies
  HostToDevice(const HostToDevice&) = delete;
  HostToDevice& operator=(const HostToDevice&) = delete;

  Device device() const { return device_; }
  size_t buffer_bytes() const { return bytes_; }
  void* buffer();
  // Queues the copy of n <= buffer_bytes() bytes of the last buffer() to device memory dst.
  void send(void* dst, size_t n);

 private:
  Device device_;
  size_t bytes_;
  void* buffers_[2] = {nullptr, nullptr};
  void* copied_[2] = {nullptr, nullptr};  // the event of each buffer's last copy
  int next_ = 0;
};

}  // namespace tg
