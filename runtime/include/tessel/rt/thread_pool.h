// Persistent thread pool whose parallel_for hands out contiguous chunks on demand; the caller is one of
// the N threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace tessel::rt {

/// A pool of N-1 persistent workers plus the calling thread. In parallel_for thread t (the caller is thread 0)
/// owns the t-th of N equal contiguous parts of [0, n) and runs it front to back in chunks; a thread that has
/// finished its own part takes chunks from the back of another's ("owner first"). On balanced work every
/// thread runs exactly its own part, so consecutive layers split along the same index (pixels, rows) are
/// computed by the same thread and each thread reads mostly what it wrote itself: a line another core just
/// wrote costs 50-900 ns to read on a VM whose two vCPUs do not share a cache (docs/performance.md). Against
/// the guided chunks this replaced (each chunk a 1/(2N) share of what was left, to whichever thread came
/// first), 2 threads on a Zen 5 VM, median of 8 paired runs: MobileNetV2 0.94x the time, SqueezeNet 0.92x,
/// DenseNet-121 0.97x, ResNet-50 0.98x, ResNet-18 and GoogLeNet unchanged. A thread slowed down by something
/// else on its core (another process, the hypervisor) still leaves the rest of its part to the others. There
/// is never oversubscription. With N == 1 (or n <= 1, or when called from inside a parallel region) the body
/// runs inline.
class ThreadPool {
 public:
  /// Body of a parallel loop: processes indices [begin, end).
  using RangeFn = std::function<void(int64_t begin, int64_t end)>;

  /// Creates a pool running on `num_threads` threads in total (the caller included; >= 1).
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Total threads, caller included.
  int num_threads() const { return num_threads_; }

  /// How many work items per thread a kernel should offer when it can cut its work finer at some cost
  /// (per-call packing, scratch rows): parallel_for's chunks are a kChunksPerThread-th of a thread's part.
  static constexpr int kChunksPerThread = 4;

  /// Runs fn over [0, n) in contiguous chunks, owner first (each fn call gets one chunk; a thread may get
  /// several); returns when all are done.
  void parallel_for(int64_t n, const RangeFn& fn);

  /// Runs fn(t) once on each thread t in [0, num_threads) -- the caller is thread 0, worker i thread i --
  /// and returns when all are done. For kernels that cut their work into one part per thread so that
  /// the same thread computes the same part of consecutive layers and reads what it wrote itself: a
  /// cache line another core just wrote costs 50-900 ns to read (a VM's two vCPUs need not share a
  /// last-level cache); parallel_for gets there on balanced work only.
  void run_per_thread(const std::function<void(int thread)>& fn);

 private:
  void worker_loop(int index);
  void run_owned_chunks(int self);
  /// Publishes a job (the caller has set its fields) and wakes the workers.
  void publish(bool per_thread);

  int num_threads_;
  std::vector<std::thread> workers_;
  // A new job is published by bumping generation_; workers wait on it (C++20 atomic wait = futex).
  std::atomic<uint64_t> generation_{0};
  // The current job: its generation (high 32 bits), whether it is run_per_thread's (bit 30), whether the caller
  // has closed it (bit 31: a parallel_for whose caller has finished its share), and how many workers have joined
  // it and not yet left (low 30 bits). A parallel_for waits only for the workers that joined before it closed: a
  // worker descheduled by the host (another process on its core, a VM's steal time) no longer holds up every
  // layer until it runs again -- the caller takes its chunks -- and one that wakes after the close skips the job
  // without reading its fields. run_per_thread jobs wait for every worker (pending_).
  std::atomic<uint64_t> job_state_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stopping_{false};
  const RangeFn* job_fn_ = nullptr;
  const std::function<void(int)>* job_per_thread_ = nullptr;  // set: the job is run_per_thread's
  int64_t job_n_ = 0;
  // Owner-first scheduling (parallel_for when n < 2^31): thread t owns [t n / N, (t+1) n / N) and takes it front
  // to back; a thread that has finished its own takes chunks from the back of another's. Each range is one
  // atomic word, the front in the low and the end in the high 32 bits, on a cache line of its own.
  struct alignas(64) OwnedRange {
    std::atomic<uint64_t> front_end{0};
  };
  std::unique_ptr<OwnedRange[]> ranges_;
};

/// Runs fn over [0, n) on `pool`, or inline (fn(0, n)) when pool is null.
template <typename Fn>
inline void parallel_for(ThreadPool* pool, int64_t n, Fn&& fn) {
  if (n <= 0) return;
  if (pool == nullptr || pool->num_threads() <= 1 || n == 1) {
    fn(int64_t{0}, n);
    return;
  }
  pool->parallel_for(n, ThreadPool::RangeFn(fn));
}

/// Runs fn(t) for every part t of [0, parts), part t on thread t % threads of `pool` (inline when null):
/// a static split, the same part on the same thread in every call (see ThreadPool::run_per_thread).
template <typename Fn>
inline void parallel_per_thread(ThreadPool* pool, int parts, Fn&& fn) {
  if (parts <= 0) return;
  if (pool == nullptr || pool->num_threads() <= 1 || parts == 1) {
    for (int t = 0; t < parts; ++t) fn(t);
    return;
  }
  const int threads = pool->num_threads();
  pool->run_per_thread([&](int thread) {
    for (int t = thread; t < parts; t += threads) fn(t);
  });
}

/// Number of threads `pool` provides (1 when null).
inline int thread_count(const ThreadPool* pool) { return pool == nullptr ? 1 : pool->num_threads(); }

}  // namespace tessel::rt
