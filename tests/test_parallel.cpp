// The CPU thread pool behind parallel_for (core/parallel.h): every index exactly once, chunk
// boundaries independent of scheduling, nesting, exceptions, and callers on several threads.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/parallel.h"

namespace tg {
namespace {

// Restores the thread count a test changes.
struct ThreadCount {
  int saved = get_num_threads();
  ~ThreadCount() { set_num_threads(saved); }
};

TEST(Parallel, EveryIndexExactlyOnceInRepeatedCalls) {
  ThreadCount keep;
  for (int threads : {1, 2, 3, 5}) {
    set_num_threads(threads);
    for (int rep = 0; rep < 300; ++rep) {
      const int64_t n = 1 + (rep * 7919) % 5000, grain = 1 + rep % 97;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      parallel_for(0, n, grain, [&](int64_t b, int64_t e) {
        ASSERT_LE(0, b);
        ASSERT_LT(b, e);
        ASSERT_LE(e, n);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n " << n << " i " << i;
    }
  }
}

TEST(Parallel, ChunkBoundariesDependOnlyOnRangeGrainAndThreads) {
  ThreadCount keep;
  set_num_threads(3);
  std::vector<std::pair<int64_t, int64_t>> first;
  for (int rep = 0; rep < 50; ++rep) {
    std::vector<std::pair<int64_t, int64_t>> chunks(3, {-1, -1});
    std::atomic<int> count{0};
    parallel_for(10, 1000, 100, [&](int64_t b, int64_t e) {
      chunks[static_cast<size_t>((b - 10) / 330)] = {b, e};
      count.fetch_add(1);
    });
    ASSERT_EQ(count.load(), 3);
    if (rep == 0) first = chunks;
    EXPECT_EQ(chunks, first);
  }
  EXPECT_EQ(first[0], std::make_pair(int64_t{10}, int64_t{340}));
  EXPECT_EQ(first[2], std::make_pair(int64_t{670}, int64_t{1000}));
}

TEST(Parallel, NestedCallsRunSeriallyInsideAChunk) {
  ThreadCount keep;
  set_num_threads(2);
  std::atomic<int64_t> total{0};
  parallel_for(0, 4, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      parallel_for(0, 1000, 1, [&](int64_t b2, int64_t e2) {
        EXPECT_EQ(b2, 0);  // one serial call covering the whole inner range
        EXPECT_EQ(e2, 1000);
        total.fetch_add(e2 - b2);
      });
  });
  EXPECT_EQ(total.load(), 4000);
}

TEST(Parallel, AnExceptionInAChunkReachesTheCallerAndThePoolGoesOn) {
  ThreadCount keep;
  set_num_threads(2);
  EXPECT_THROW(parallel_for(0, 100, 1,
                            [&](int64_t b, int64_t) {
                              if (b > 0) throw std::runtime_error("chunk failed");
                            }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  parallel_for(0, 100, 1, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
  EXPECT_EQ(sum.load(), 100);
}

TEST(Parallel, CallersOnSeveralThreadsEachGetTheirWholeRange) {
  ThreadCount keep;
  set_num_threads(2);
  auto caller = [](int64_t n, std::atomic<int64_t>* out) {
    for (int rep = 0; rep < 200; ++rep)
      parallel_for(0, n, 16, [&](int64_t b, int64_t e) { out->fetch_add(e - b); });
  };
  std::atomic<int64_t> a{0}, b{0};
  std::thread t1(caller, 1000, &a), t2(caller, 777, &b);
  t1.join();
  t2.join();
  EXPECT_EQ(a.load(), 200 * 1000);
  EXPECT_EQ(b.load(), 200 * 777);
}

TEST(Parallel, RejectsZeroThreads) { EXPECT_ANY_THROW(set_num_threads(0)); }

}  // namespace
}  // namespace tg
