// Size-class free lists for the allocators. A training step asks for the same sizes every
// step, so once the first step has run every request finds a cached block of its class: no
// cudaMalloc (a step can be captured in a CUDA graph), no page faults on the host.
#pragma once

#include <algorithm>
#include <cstddef>
#include <unordered_map>
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

}  // namespace tg
