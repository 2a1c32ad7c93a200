#include "core/activation_offload.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "core/error.h"
#include "core/primitives.h"

#ifdef TG_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace tg {
namespace {

constexpr const char* kOp = "activation offload";

// Pinned buffers by size, kept for the next step (pinning costs far more than a copy). Each step
// offloads the same sizes, so the pool reaches a steady state after the first.
struct PinnedPool {
  std::mutex mu;
  std::multimap<size_t, void*> free;
  MemoryStats stats;
  ~PinnedPool() {
#ifdef TG_WITH_CUDA
    for (auto& [bytes, p] : free) cuda::free_pinned(p);
#endif
  }
};
PinnedPool& pool() {
  static PinnedPool p;
  return p;
}

void count_in_use(int64_t delta) {
  PinnedPool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  p.stats.bytes_in_use = static_cast<size_t>(static_cast<int64_t>(p.stats.bytes_in_use) + delta);
  p.stats.peak_bytes = std::max(p.stats.peak_bytes, p.stats.bytes_in_use);
  if (delta > 0) ++p.stats.allocations;
}

// The CUDA runtime's parts (core/cuda/runtime.h). Without CUDA no tensor reaches them: the CPU's
// offload is a copy in host memory.
void* take_pinned(size_t bytes) {
#ifdef TG_WITH_CUDA
  PinnedPool& p = pool();
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (auto it = p.free.find(bytes); it != p.free.end()) {
      void* ptr = it->second;
      p.free.erase(it);
      return ptr;
    }
  }
  void* ptr = nullptr;
  try {
    ptr = cuda::allocate_pinned(bytes);
  } catch (const Error& e) {
    TG_CHECK(false, kOp, "cannot keep a checkpointed activation of ", bytes, " bytes in host memory (",
             pool().stats.bytes_in_use, " bytes held already): ", e.what(),
             "; shorten the sequence, or train without offload_activations");
  }
  std::lock_guard<std::mutex> lock(p.mu);
  p.stats.bytes_reserved += bytes;
  ++p.stats.device_allocations;
  return ptr;
#else
  fail(kOp, "pinned host memory for ", bytes, " bytes without CUDA");
#endif
}

void give_back_pinned(void* ptr, size_t bytes) {
  PinnedPool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  p.free.emplace(bytes, ptr);
}

void* copy_async(void* dst, const void* src, size_t n, int device, bool to_device) {
#ifdef TG_WITH_CUDA
  return cuda::side_copy_async(dst, src, n, device, to_device);
#else
  (void)dst, (void)src, (void)n, (void)device, (void)to_device;
  return nullptr;
#endif
}

void compute_waits_for(int device, void* event) {
#ifdef TG_WITH_CUDA
  if (event) cuda::compute_wait(device, event);
#else
  (void)device, (void)event;
#endif
}

void forget(void*& event) noexcept {
#ifdef TG_WITH_CUDA
  cuda::destroy_event(event);
#endif
  event = nullptr;
}

thread_local std::weak_ptr<OffloadedTensor> last_offloaded;

}  // namespace

MemoryStats offload_memory_stats() {
  std::lock_guard<std::mutex> lock(pool().mu);
  return pool().stats;
}

void reset_offload_peak_memory_stats() {
  std::lock_guard<std::mutex> lock(pool().mu);
  pool().stats.peak_bytes = pool().stats.bytes_in_use;
  pool().stats.allocations = 0;
}

OffloadedTensor::OffloadedTensor(const Tensor& t) : shape_(t.shape()), options_(t.options()), bytes_(t.nbytes()) {
  TG_CHECK(t.defined(), kOp, "got an undefined tensor");
  if (!t.device().is_cuda()) {
    on_host_ = clone_data(t);
    count_in_use(static_cast<int64_t>(bytes_));
    return;
  }
  source_ = t.is_contiguous() ? t.detach() : clone_data(t);
  if (bytes_ == 0) return;
  host_ = take_pinned(bytes_);
  count_in_use(static_cast<int64_t>(bytes_));
  to_host_ = copy_async(host_, source_.data_ptr(), bytes_, options_.device.index, false);
}

OffloadedTensor::~OffloadedTensor() {
  // A copy back never taken (its checkpoint's backward did not run): the compute stream reuses its
  // block only after the copy wrote it.
  if (to_device_ && back_.defined()) {
    try {
      compute_waits_for(options_.device.index, to_device_);
    } catch (...) {  // the device's next call reports the failure; a destructor cannot
    }
  }
  // A pending copy is ordered before any later use of the pinned buffer: the copy stream runs the
  // next offload into it after this one's copies.
  forget(to_host_);
  forget(to_device_);
  if (host_) give_back_pinned(host_, bytes_);
  if (host_ || on_host_.defined()) count_in_use(-static_cast<int64_t>(bytes_));
}

void OffloadedTensor::release_source() {
  if (!source_.defined()) return;
  // The compute stream reuses the block only after the copy to the host has read it.
  compute_waits_for(options_.device.index, to_host_);
  source_ = Tensor();
}

void OffloadedTensor::prefetch() {
  if (on_host_.defined() || source_.defined() || back_.defined()) return;
  back_ = Tensor::empty(shape_, options_);
  if (bytes_ > 0) to_device_ = copy_async(back_.data_ptr(), host_, bytes_, options_.device.index, true);
}

Tensor OffloadedTensor::get() {
  if (on_host_.defined()) return on_host_;
  if (source_.defined()) return source_;  // never left: nothing offloaded after it
  prefetch();
  compute_waits_for(options_.device.index, to_device_);
  forget(to_device_);  // the wait keeps what it needs
  return std::move(back_);
}

std::shared_ptr<OffloadedTensor> offload(const Tensor& t) {
  auto o = std::make_shared<OffloadedTensor>(t);
  if (auto before = last_offloaded.lock()) {
    before->release_source();
    o->previous_ = before;
  }
  last_offloaded = o;
  return o;
}

}  // namespace tg
