// The CUDA runtime as core sees it (plain C++: no CUDA headers, so .cpp files can include it).
// One compute stream per device; every op is queued on it, so freed memory can be reused at
// once in stream order and nothing but a host read (item, to_vector, copies to the host)
// waits for the device.
#pragma once

#include <cstddef>
#include <cstdint>
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
size_t free_memory(int device);  // cudaMemGetInfo's free bytes

// CUDA graphs (the API is core/cuda_graph.h). While a capture runs on a device, its allocations
// come from the graph's private pool, blocks freed join that pool, and host copies and waits
// are tg::Errors. The graph handles are cudaGraphExec_t behind void*.
uint64_t create_graph_pool(int device);
// Hands the pool's free blocks back to the device's cache (its blocks still held by tensors follow
// when they are freed); call once no replay of its graph will be queued again.
void release_graph_pool(int device, uint64_t pool);
void begin_capture(int device, uint64_t pool);
// Ends the capture and instantiates its graph; tg::Error when the capture was invalidated.
void* end_capture(int device);
// Ends a capture whose function threw, discarding what it recorded.
void abort_capture(int device);
bool is_capturing(int device);
void launch_graph(int device, void* exec);
void destroy_graph(int device, void* exec);

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n);
void synchronize(int device);

// Pinned (page-locked) host memory and asynchronous uploads from it (tg::HostToDevice's parts):
// copy_pinned_async queues n bytes from pinned `src` to `dst` on the device's stream and returns
// an event that completes with the copy; wait_and_destroy_event blocks the host until it has.
void* allocate_pinned(size_t nbytes);
void free_pinned(void* ptr) noexcept;
void* copy_pinned_async(void* dst, int device, const void* src, size_t n);
void wait_and_destroy_event(void* event);

// The device's copy stream, beside the compute stream (activation offload): side_copy_async queues
// n bytes (device <-> pinned host, either way) after the compute stream's work queued so far and
// returns an event that completes with the copy; compute_wait makes the compute stream's later
// work wait for such an event, without blocking the host. Events are cudaEvent_t behind void*.
void* side_copy_async(void* dst, const void* src, size_t n, int device, bool to_device);
void compute_wait(int device, void* event);
void destroy_event(void* event) noexcept;

// TF32 for float32 GEMMs (off by default, as in PyTorch's "highest" precision).
void set_allow_tf32(bool allow);
bool allow_tf32();

// core primitives on the device (core/cuda/primitives.cu)
void copy_strided(const Tensor& dst, const Tensor& src);
void fill(const Tensor& dst, double value);
void accumulate(const Tensor& dst, const Tensor& src);

}  // namespace tg::cuda
