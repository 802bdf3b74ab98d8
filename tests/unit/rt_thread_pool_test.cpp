// Tests of the runtime thread pool: coverage of every index exactly once, inline mode, nesting.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
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
  // Each of the two chunks waits (up to 10 s) until both threads are inside the loop: passes only if
  // the caller and a worker run concurrently.
  std::atomic<int> inside{0};
  std::vector<std::thread::id> ids(2);
  pool.parallel_for(2, [&](int64_t b, int64_t) {
    ids[b] = std::this_thread::get_id();
    inside.fetch_add(1);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (inside.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  });
  EXPECT_EQ(inside.load(), 2);
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_TRUE(ids[0] == std::this_thread::get_id() || ids[1] == std::this_thread::get_id());
}

// Owner first: with both threads in the loop, the caller runs [0, n/2) and the worker [n/2, n), front to back in
// chunks of n / (kChunksPerThread * 2), in every call (so consecutive loops over the same index space keep each
// index on one thread). Each chunk waits (up to 10 s) until both threads have started one, so neither can run
// out its own part and take the other's before the other wakes up.
TEST(RtThreadPool, EachThreadRunsItsOwnPartFrontToBack) {
  ThreadPool pool(2);
  const int64_t n = 1000, chunk = n / (2 * ThreadPool::kChunksPerThread);
  const auto caller = std::this_thread::get_id();
  for (int rep = 0; rep < 20; ++rep) {
    std::atomic<int> started{0};
    std::mutex m;
    std::vector<std::pair<int64_t, int64_t>> mine, theirs;
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      {
        std::lock_guard<std::mutex> lock(m);
        (std::this_thread::get_id() == caller ? mine : theirs).push_back({b, e});
      }
      started.fetch_add(1);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (started.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    });
    ASSERT_FALSE(mine.empty());
    ASSERT_FALSE(theirs.empty());
    EXPECT_EQ(mine.front(), std::make_pair(int64_t{0}, chunk)) << "rep " << rep;
    EXPECT_EQ(theirs.front(), std::make_pair(n / 2, n / 2 + chunk)) << "rep " << rep;
    // Own chunks in order: each starts where the thread's previous own chunk ended.
    for (const auto* runs : {&mine, &theirs}) {
      const int64_t base = runs == &mine ? 0 : n / 2;
      int64_t next = base;
      for (auto [b, e] : *runs) {
        if (b < base || b >= base + n / 2) continue;  // taken from the back of the other's part
        EXPECT_EQ(b, next) << "rep " << rep;
        EXPECT_LE(e - b, chunk);
        next = e;
      }
    }
    std::vector<std::pair<int64_t, int64_t>> all(mine);
    all.insert(all.end(), theirs.begin(), theirs.end());
    std::sort(all.begin(), all.end());
    int64_t covered = 0;
    for (auto [b, e] : all) {
      EXPECT_EQ(b, covered);
      covered = e;
    }
    EXPECT_EQ(covered, n);
  }
}

// A thread held up inside one chunk (here the caller, sleeping in its first) does not hold up the rest:
// the worker takes the remaining items meanwhile.
TEST(RtThreadPool, SlowThreadTakesFewerChunks) {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  std::atomic<int64_t> caller_items{0}, worker_items{0};
  std::atomic<bool> slept{false};
  pool.parallel_for(64, [&](int64_t b, int64_t e) {
    if (std::this_thread::get_id() == caller) {
      caller_items.fetch_add(e - b);
      if (!slept.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    } else {
      worker_items.fetch_add(e - b);
    }
  });
  EXPECT_EQ(caller_items.load() + worker_items.load(), 64);
  EXPECT_GE(worker_items.load(), 48) << "the worker should have run the items the sleeping caller could not";
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

// run_per_thread: every thread index once per call, the caller as thread 0, and each index on the same
// thread in every call (what lets a kernel's thread read the part it wrote in the previous layer).
TEST(RtThreadPool, PerThreadPartsStayOnTheirThreads) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<std::thread::id> first(threads);
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<std::thread::id> ids(threads);
      std::vector<int> runs(threads, 0);
      pool.run_per_thread([&](int t) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, threads);
        ids[t] = std::this_thread::get_id();
        ++runs[t];
      });
      for (int t = 0; t < threads; ++t) EXPECT_EQ(runs[t], 1) << "threads " << threads << " part " << t;
      EXPECT_EQ(ids[0], std::this_thread::get_id());
      if (rep == 0) first = ids;
      EXPECT_EQ(ids, first) << "threads " << threads << ": a part moved to another thread";
      std::vector<std::thread::id> distinct = ids;
      std::sort(distinct.begin(), distinct.end());
      EXPECT_EQ(std::unique(distinct.begin(), distinct.end()), distinct.end()) << "two parts on one thread";
    }
  }
  // More parts than threads: part t on thread t % threads; inside a parallel region, inline.
  ThreadPool pool(2);
  std::vector<std::thread::id> ids(5);
  parallel_per_thread(&pool, 5, [&](int t) { ids[t] = std::this_thread::get_id(); });
  EXPECT_EQ(ids[0], std::this_thread::get_id());
  EXPECT_EQ(ids[2], ids[0]);
  EXPECT_EQ(ids[4], ids[0]);
  EXPECT_EQ(ids[3], ids[1]);
  EXPECT_NE(ids[1], ids[0]);
  std::atomic<int> nested{0};
  pool.parallel_for(2, [&](int64_t, int64_t) {
    const std::thread::id outer = std::this_thread::get_id();
    parallel_per_thread(&pool, 2, [&](int) {
      EXPECT_EQ(std::this_thread::get_id(), outer);
      nested.fetch_add(1);
    });
  });
  EXPECT_EQ(nested.load(), 4);
}

TEST(RtThreadPool, NullPoolHelperRunsInline) {
  int64_t sum = 0;
  parallel_for(nullptr, 10, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum, 10);
}

// A parallel_for waits only for the workers that joined it before its caller took the last chunk; a worker that
// wakes later skips the job. Under preemption (more runnable threads than cores: two busy threads beside a
// 3-thread pool) thousands of short jobs, some run_per_thread jobs between them, each cover every index exactly
// once and see their own body (a late worker that ran an old job's body, or the new job's with old fields, would
// count in the wrong job's array).
TEST(RtThreadPool, ShortJobsUnderPreemptionCoverEveryIndexOnce) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int i = 0; i < 2; ++i)
    busy.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  ThreadPool pool(3);
  int bad = 0;
  for (int job = 0; job < 3000; ++job) {
    const int64_t n = 1 + job % 13;
    std::vector<std::atomic<int>> hits(n);
    const int tag = job;
    std::atomic<int> wrong{0};
    pool.parallel_for(n, [&, tag](int64_t b, int64_t e) {
      if (tag != job) wrong.fetch_add(1);
      for (int64_t i = b; i < e; ++i) {
        for (volatile int spin = 0; spin < 300; spin = spin + 1) {
        }
        hits[i].fetch_add(1);
      }
    });
    for (int64_t i = 0; i < n; ++i) bad += hits[i].load() != 1;
    bad += wrong.load();
    if (job % 100 == 0) {
      std::vector<std::atomic<int>> parts(3);
      pool.run_per_thread([&](int t) { parts[t].fetch_add(1); });
      for (auto& p : parts) bad += p.load() != 1;
    }
  }
  stop = true;
  for (auto& t : busy) t.join();
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace tessel::rt
