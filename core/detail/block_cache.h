// Size-class free lists for the allocators. A training step asks for the same sizes every
// step, so once the first step has run every request finds a cached block of its class: no
// cudaMalloc (a step can be captured in a CUDA graph), no page faults on the host.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tg {

class BlockCache {
 public:
  // Multiples of 512 B below 1 MiB; above, multiples of an eighth of the next power of two
  // (at most 12.5% slack).
  static size_t size_class(size_t n) {
    if (n < (1u << 20)) return std::max<size_t>(512, (n + 511) / 512 * 512);
    size_t p = 1;
    while (p < n) p <<= 1;
    size_t step = p / 8;
    return (n + step - 1) / step * step;
  }

  // A cached block of this class, or nullptr.
  void* take(size_t cls) {
    auto it = free_.find(cls);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    return p;
  }
  void put(void* p, size_t cls) { free_[cls].push_back(p); }

  // Hands every cached block to release(p, cls) and forgets them.
  template <class Release>
  void release_all(Release&& release) {
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) release(p, cls);
    free_.clear();
  }

 private:
  std::unordered_map<size_t, std::vector<void*>> free_;
};

// The CUDA allocator's cache (core/cuda/runtime.cu) with the private pools of CUDA graphs. While
// a graph captures, blocks come from its pool and every block freed goes to it (the graph may
// read a block allocated before the capture and freed during it): a graph keeps the addresses it
// recorded, so no block of its pool is handed to anyone else while it lives. A released pool's
// blocks rejoin the shared cache, the ones still held by tensors when those are freed. Host
// bookkeeping only, so tests run it without a GPU.
class PooledBlockCache {
 public:
  uint64_t create_pool() {
    const uint64_t id = next_pool_++;
    pools_[id];
    return id;
  }
  bool has_pool(uint64_t pool) const {
    auto it = pools_.find(pool);
    return it != pools_.end() && !it->second.released;
  }
  // The pool allocations come from and frees go to (0: none, the shared cache).
  void set_capture_pool(uint64_t pool) { capture_ = pool; }
  uint64_t capture_pool() const { return capture_; }

  // A cached block of class cls for an allocation, or nullptr (the caller then makes one).
  void* take(size_t cls) { return capture_ ? pools_.at(capture_).blocks.take(cls) : shared_.take(cls); }
  // p (taken or made) is now held by a tensor.
  void hold(void* p, size_t cls) {
    live_[p] = {cls, capture_};
    if (capture_) ++pools_.at(capture_).live;
  }
  // p is freed: cached again; returns its class, 0 for a block never held.
  size_t put(void* p) {
    auto it = live_.find(p);
    if (it == live_.end()) return 0;
    auto [cls, pool] = it->second;
    live_.erase(it);
    if (pool) {
      Pool& owner = pools_.at(pool);
      --owner.live;
      if (owner.released) {  // its graph is gone
        if (owner.live == 0) pools_.erase(pool);
        pool = 0;
      }
    }
    if (capture_) pool = capture_;
    (pool ? pools_.at(pool).blocks : shared_).put(p, cls);
    return cls;
  }
  // The pool's graph is gone (no replay will be queued again): its cached blocks go to the shared cache.
  void release_pool(uint64_t pool) {
    auto it = pools_.find(pool);
    if (it == pools_.end()) return;
    it->second.blocks.release_all([&](void* p, size_t cls) { shared_.put(p, cls); });
    if (it->second.live == 0) pools_.erase(it);
    else it->second.released = true;
  }
  // Hands the shared cache's blocks to release(p, cls) (pools keep theirs: their graphs use them).
  template <class Release>
  void release_shared(Release&& release) {
    shared_.release_all(std::forward<Release>(release));
  }

 private:
  struct Pool {
    BlockCache blocks;
    size_t live = 0;  // blocks of the pool held by tensors
    bool released = false;
  };
  struct Held {
    size_t cls;
    uint64_t pool;  // 0: the shared cache
  };
  BlockCache shared_;
  std::unordered_map<void*, Held> live_;
  std::unordered_map<uint64_t, Pool> pools_;
  uint64_t next_pool_ = 1, capture_ = 0;
};

}  // namespace tg
