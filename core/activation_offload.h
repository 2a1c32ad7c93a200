// Activation offload: a tensor kept in host memory between the forward that saved it and the
// backward that reads it (tg::checkpoint's offloaded inputs, gradient checkpointing's
// offload_activations). On a GPU it goes to pinned host memory on the device's copy stream, ordered
// by events after the compute stream's work, and comes back the same way, ideally prefetched while
// the layer above runs its backward; nothing waits on the host. On the CPU it is a plain copy.
#pragma once

#include <memory>

#include "core/memory.h"
#include "core/tensor.h"

namespace tg {

// Host memory the offloaded tensors hold (bytes_in_use, peak_bytes) and the pinned buffers kept for
// reuse (bytes_reserved): what an offloaded run takes beside its GPU memory.
MemoryStats offload_memory_stats();
void reset_offload_peak_memory_stats();

class OffloadedTensor {
 public:
  // Starts the copy of t to the host; t's device memory is released once the next offload on this
  // thread starts (the layer above has read it by then). tg::Error when no host memory can be pinned.
  explicit OffloadedTensor(const Tensor& t);
  ~OffloadedTensor();
  OffloadedTensor(const OffloadedTensor&) = delete;
  OffloadedTensor& operator=(const OffloadedTensor&) = delete;

  // Starts the copy back to the tensor's device (done once).
  void prefetch();
  // The tensor on its device, bit for bit what was offloaded; later work is ordered after the copy.
  // The caller holds the device copy: a second get() brings it back again.
  Tensor get();
  // The tensor offloaded just before this one on this thread, if it still lives (the layer below,
  // whose backward comes next).
  std::shared_ptr<OffloadedTensor> previous() const { return previous_.lock(); }

 private:
  friend std::shared_ptr<OffloadedTensor> offload(const Tensor& t);
  void release_source();

  Tensor source_;    // held until the copy to the host is ordered before later work
  Tensor on_host_;   // the CPU's copy
  Tensor back_;      // the copy back on the device
  Shape shape_;
  TensorOptions options_;
  void* host_ = nullptr;  // the pinned buffer
  size_t bytes_ = 0;
  void* to_host_ = nullptr;  // events of the two copies
  void* to_device_ = nullptr;
  std::weak_ptr<OffloadedTensor> previous_;
};

// t offloaded, linked to the previous offload on this thread.
std::shared_ptr<OffloadedTensor> offload(const Tensor& t);

}  // namespace tg
