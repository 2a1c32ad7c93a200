// The allocators' block cache and the CUDA graph pools' bookkeeping (core/detail/block_cache.h), on the
// CPU with made-up addresses: which blocks a capture draws from and keeps, and when they rejoin
// the shared cache.
#include <gtest/gtest.h>

#include <vector>

#include "core/detail/block_cache.h"

namespace tg {
namespace {

// Distinct fake addresses (never dereferenced).
void* block(int i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(4096 * (i + 1))); }
constexpr size_t kCls = 512;

TEST(PooledBlockCache, OutsideACaptureBlocksComeBackToTheSharedCache) {
  PooledBlockCache c;
  c.hold(block(0), kCls);
  EXPECT_EQ(c.put(block(0)), kCls);
  EXPECT_EQ(c.put(block(0)), 0u) << "a block not held is not cached twice";
  EXPECT_EQ(c.take(kCls), block(0));
  EXPECT_EQ(c.take(kCls), nullptr);
}

TEST(PooledBlockCache, ACaptureKeepsWhatItTouchesFromOthers) {
  PooledBlockCache c;
  c.hold(block(0), kCls);  // an eager tensor the captured step frees (a previous step's grad)
  c.hold(block(1), kCls);  // an eager tensor that stays
  const uint64_t pool = c.create_pool();
  c.set_capture_pool(pool);
  EXPECT_EQ(c.take(kCls), nullptr) << "the shared cache is not drawn from during a capture";
  c.hold(block(2), kCls);  // made during the capture: a temporary
  c.put(block(0));
  c.put(block(2));
  EXPECT_EQ(c.take(kCls), block(2)) << "the capture reuses its own freed blocks";
  c.hold(block(2), kCls);  // the graph's output
  c.set_capture_pool(0);

  EXPECT_EQ(c.take(kCls), nullptr) << "block 0 was freed during the capture: the graph's, not the cache's";
  c.put(block(2));  // the output freed after the capture: still the graph's
  EXPECT_EQ(c.take(kCls), nullptr);
  c.put(block(1));
  EXPECT_EQ(c.take(kCls), block(1)) << "an eager block freed after the capture is the cache's";

  c.set_capture_pool(pool);  // a second capture into the pool finds both
  std::vector<void*> got = {c.take(kCls), c.take(kCls)};
  c.set_capture_pool(0);
  EXPECT_TRUE((got == std::vector<void*>{block(2), block(0)}) || (got == std::vector<void*>{block(0), block(2)}));
}

TEST(PooledBlockCache, AReleasedPoolRejoinsTheCacheAsItsBlocksAreFreed) {
  PooledBlockCache c;
  const uint64_t pool = c.create_pool();
  c.set_capture_pool(pool);
  c.hold(block(0), kCls);
  c.hold(block(1), kCls);
  c.put(block(0));
  c.set_capture_pool(0);
  EXPECT_TRUE(c.has_pool(pool));
  c.release_pool(pool);
  EXPECT_FALSE(c.has_pool(pool));
  EXPECT_EQ(c.take(kCls), block(0)) << "the pool's free block, at release";
  EXPECT_EQ(c.take(kCls), nullptr);
  c.put(block(1));  // held past the release (a graph output kept by the user)
  EXPECT_EQ(c.take(kCls), block(1));
  int released = 0;
  c.hold(block(3), kCls);
  c.put(block(3));
  c.release_shared([&](void*, size_t cls) { released += cls == kCls; });
  EXPECT_EQ(released, 1);
}

}  // namespace
}  // namespace tg
