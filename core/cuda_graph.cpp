#include "core/cuda_graph.h"

#include <map>
#include <mutex>

#include "core/error.h"

#ifdef TG_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace tg::cuda {
namespace {

constexpr const char* kOp = "CUDAGraph";

// The graph capturing on each device (at most one: captures do not nest).
std::mutex capturing_mu;
std::map<int, CUDAGraph*> capturing;

}  // namespace

CUDAGraph::CUDAGraph(Device device) : device_(device) {
  TG_CHECK(device.is_cuda(), kOp, "wants a CUDA device, got ", device,
           " (a graph records GPU work; run a CPU step eagerly)");
#ifndef TG_WITH_CUDA
  fail(kOp, "device ", device, " requested, but tapegrad was built without CUDA (configure with -DTG_CUDA=ON)");
#else
  TG_CHECK(device.index >= 0 && device.index < device_count(), kOp, "device ", device, " does not exist (",
           device_count(), " CUDA devices visible)");
#endif
}

CUDAGraph::~CUDAGraph() {
  try {
    reset();
  } catch (const Error&) {
    // Destroyed while another capture runs on the device (reset cannot wait then): the graph
    // and its pool stay allocated rather than be freed under a running replay.
  }
}

void CUDAGraph::reset() {
#ifdef TG_WITH_CUDA
  if (exec_) {
    destroy_graph(device_.index, exec_);
    exec_ = nullptr;
  }
  if (pool_) {
    release_graph_pool(device_.index, pool_);
    pool_ = 0;
  }
#endif
  hooks_.clear();
}

void CUDAGraph::capture(const std::function<void()>& fn) {
  TG_CHECK(!captured(), kOp, "already holds a capture (reset() it, or make another CUDAGraph)");
#ifdef TG_WITH_CUDA
  const int d = device_.index;
  {
    std::lock_guard<std::mutex> lock(capturing_mu);
    TG_CHECK(!capturing.count(d), kOp, device_, " is already capturing a graph (captures do not nest)");
    capturing[d] = this;
  }
  auto done = [&] {
    std::lock_guard<std::mutex> lock(capturing_mu);
    capturing.erase(d);
  };
  try {
    if (!pool_) pool_ = create_graph_pool(d);
    begin_capture(d, pool_);
  } catch (...) {
    done();
    throw;
  }
  try {
    fn();
  } catch (...) {
    abort_capture(d);
    done();
    reset();  // what was allocated for the discarded graph goes back to the cache
    throw;
  }
  try {
    exec_ = end_capture(d);
  } catch (...) {
    done();
    reset();
    throw;
  }
  done();
#else
  (void)fn;
#endif
}

void CUDAGraph::replay() {
  TG_CHECK(captured(), kOp, "replay() before capture(): nothing was recorded");
  TG_CHECK(!is_current_stream_capturing(device_), kOp, "replay() while a capture runs on ", device_,
           " (a graph cannot be replayed inside another's capture)");
  for (const Hook& h : hooks_)
    if (h.before) h.before();
#ifdef TG_WITH_CUDA
  launch_graph(device_.index, exec_);
#endif
  for (const Hook& h : hooks_)
    if (h.after) h.after();
}

bool is_current_stream_capturing(Device device) {
  if (!device.is_cuda()) return false;
  std::lock_guard<std::mutex> lock(capturing_mu);
  return capturing.count(device.index) > 0;
}

void at_each_replay(Device device, const std::string& key, std::function<void()> before,
                    std::function<void()> after) {
  std::lock_guard<std::mutex> lock(capturing_mu);
  auto it = device.is_cuda() ? capturing.find(device.index) : capturing.end();
  TG_CHECK(it != capturing.end(), "at_each_replay", "no CUDA graph is capturing on ", device, " (hook '", key, "')");
  std::vector<CUDAGraph::Hook>& hooks = it->second->hooks_;
  for (const auto& h : hooks)
    if (h.key == key) return;
  hooks.push_back({key, std::move(before), std::move(after)});
}

}  // namespace tg::cuda
