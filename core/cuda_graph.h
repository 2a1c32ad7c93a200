// CUDA graphs, as torch.cuda.CUDAGraph: a function's GPU work recorded once and replayed as one
// launch. Inputs go into the tensors the function read, outputs are the tensors it left behind,
// overwritten by every replay; what a capture refuses: docs/api.md.
//
//   step();                                  // one eager step first: cuBLAS, cuDNN's plans, optimizer state
//   tg::cuda::CUDAGraph graph;
//   Tensor loss;
//   graph.capture([&] { opt.zero_grad(); loss = model->loss(ids, ids); loss.backward(); opt.step(); });
//   for (...) { copy_(ids, next_batch); graph.replay(); sched.step(); }  // loss: this replay's
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/device.h"

namespace tg::cuda {

class CUDAGraph {
 public:
  // tg::Error for a CPU device or a build without CUDA.
  explicit CUDAGraph(Device device = Device::cuda(0));
  ~CUDAGraph();
  CUDAGraph(const CUDAGraph&) = delete;
  CUDAGraph& operator=(const CUDAGraph&) = delete;

  // Runs fn with the device's stream recording instead of executing. tg::Error when the graph
  // already holds a capture, another capture runs on the device, or fn does something a graph
  // cannot hold (the capture is then discarded and fn's error rethrown).
  void capture(const std::function<void()>& fn);
  // Queues the recorded work once more (asynchronous, like the eager step).
  void replay();
  // Drops the recorded graph and its pool (a new capture may follow).
  void reset();
  bool captured() const { return exec_ != nullptr; }
  Device device() const { return device_; }

 private:
  struct Hook {
    std::string key;
    std::function<void()> before, after;
  };
  friend void at_each_replay(Device, const std::string&, std::function<void()>, std::function<void()>);

  Device device_;
  [[maybe_unused]] uint64_t pool_ = 0;  // the capture's memory pool: CUDA builds only
  void* exec_ = nullptr;
  std::vector<Hook> hooks_;
};

// torch.cuda.is_current_stream_capturing: whether a CUDAGraph captures on `device` (false for the CPU).
bool is_current_stream_capturing(Device device);

// For library code whose host side must run at every replay of the graph now capturing on
// `device`: `before` runs on the host before each replay is queued, `after` after it (what they
// queue is ordered with the graph). A second call with the same key keeps the first hooks.
// tg::Error when no capture runs on the device.
void at_each_replay(Device device, const std::string& key, std::function<void()> before,
                    std::function<void()> after = {});

}  // namespace tg::cuda
