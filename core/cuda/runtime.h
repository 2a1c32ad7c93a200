// The CUDA runtime as core sees it (plain C++: no CUDA headers, so .cpp files can include it).
// One compute stream per device; every op is queued on it, so freed memory can be reused at
// once in stream order and nothing but a host read (item, to_vector, copies to the host)
// waits for the device.
#pragma once

#include <cstddef>
#include <string>

#include "core/device.h"
#include "core/memory.h"
#include "core/tensor.h"

namespace tg::cuda {

int device_count();
// The device's product name, e.g. "NVIDIA H200".
std::string device_name(int device);

// Caching allocator: freed blocks go to per-size-class free lists and are handed out again
// without cudaMalloc, so a training step reaches a steady state with no device allocations.
void* allocate(int device, size_t nbytes);
void deallocate(int device, void* ptr, size_t nbytes);
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);
void empty_cache(int device);

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n);
void synchronize(int device);

// TF32 for float32 GEMMs (off by default, as in PyTorch's "highest" precision).
void set_allow_tf32(bool allow);
bool allow_tf32();

// core primitives on the device (core/cuda/primitives.cu)
void copy_strided(const Tensor& dst, const Tensor& src);
void fill(const Tensor& dst, double value);
void accumulate(const Tensor& dst, const Tensor& src);

}  // namespace tg::cuda
