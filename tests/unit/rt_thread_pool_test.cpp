// Tests of the runtime thread pool: coverage of every index exactly once, inline mode, nesting.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "tessel/rt/thread_pool.h"

namespace tessel::rt {
namespace {

TEST(RtThreadPool, CoversEveryIndexOnceForManySizes) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 3, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      for (int rep = 0; rep < 20; ++rep)
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
          ASSERT_LE(b, e);
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 20) << "threads " << threads << " n " << n;
    }
  }
}

TEST(RtThreadPool, SingleThreadRunsInlineOnCaller) {
  ThreadPool pool(1);
  std::thread::id seen;
  int calls = 0;
  pool.parallel_for(50, [&](int64_t b, int64_t e) {
    seen = std::this_thread::get_id();
    ++calls;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 50);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, std::this_thread::get_id());
}

TEST(RtThreadPool, TwoThreadsUseTheCallerAndOneWorker) {
  ThreadPool pool(2);
  std::vector<std::thread::id> ids(2);
  pool.parallel_for(2, [&](int64_t b, int64_t) { ids[b] = std::this_thread::get_id(); });
  EXPECT_EQ(ids[0], std::this_thread::get_id());
  EXPECT_NE(ids[1], std::this_thread::get_id());
}

TEST(RtThreadPool, NestedParallelForRunsInline) {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  pool.parallel_for(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallel_for(10, [&](int64_t b2, int64_t e2) { total.fetch_add(static_cast<int>(e2 - b2)); });
  });
  EXPECT_EQ(total.load(), 40);
}

TEST(RtThreadPool, NullPoolHelperRunsInline) {
  int64_t sum = 0;
  parallel_for(nullptr, 10, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum, 10);
}

}  // namespace
}  // namespace tessel::rt
