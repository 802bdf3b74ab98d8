// Persistent thread pool: workers spin briefly, then sleep on an atomic generation counter.
#include "tessel/rt/thread_pool.h"

#include <algorithm>

namespace tessel::rt {
namespace {

// Set while a thread executes a parallel_for body: nested parallel_for calls then run inline
// instead of deadlocking on a pool whose workers are all busy.
thread_local bool tls_inside_parallel_region = false;

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

// Takes chunks of the current job until none is left: each a 1/(2N) share of what remains, at least
// job_min_chunk_ items.
void ThreadPool::run_chunks() {
  const int64_t n = job_n_, share = 2 * int64_t{num_threads_};
  int64_t begin = next_index_.load(std::memory_order_relaxed);
  while (begin < n) {
    const int64_t left = n - begin;
    const int64_t take = std::min(left, std::max(job_min_chunk_, left / share));
    if (!next_index_.compare_exchange_weak(begin, begin + take, std::memory_order_relaxed)) continue;
    (*job_fn_)(begin, begin + take);
    begin = next_index_.load(std::memory_order_relaxed);
  }
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn) {
  if (n <= 0) return;
  if (num_threads_ <= 1 || n <= 1 || tls_inside_parallel_region) {
    fn(0, n);
    return;
  }
  job_fn_ = &fn;
  job_n_ = n;
  job_min_chunk_ = std::max<int64_t>(1, n / (int64_t{kMaxChunksPerThread} * num_threads_));
  next_index_.store(0, std::memory_order_relaxed);
  run_job([this] { run_chunks(); });
}

// Publishes the job whose fields the caller has set, runs the caller's share, then waits for every worker.
template <class Share>
void ThreadPool::run_job(const Share& caller_share) {
  // Every worker acknowledges every job (even when it finds no chunk left), so none can lag a job
  // behind and mistake the next job's fields for the one it woke up for.
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();

  tls_inside_parallel_region = true;
  caller_share();
  tls_inside_parallel_region = false;
  // Workers finish within microseconds of the caller on balanced work: spin, then yield.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins > 2000) std::this_thread::yield();
  }
}

void ThreadPool::run_per_thread(const std::function<void(int)>& fn) {
  if (num_threads_ <= 1 || tls_inside_parallel_region) {
    for (int t = 0; t < num_threads_; ++t) fn(t);
    return;
  }
  job_per_thread_ = &fn;
  run_job([&] { fn(0); });
  job_per_thread_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  tls_inside_parallel_region = true;
  while (true) {
    // Spin a little for back-to-back layers before sleeping in the kernel.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spins = 0; gen == seen && spins < 20000; ++spins) {
      __builtin_ia32_pause();
      gen = generation_.load(std::memory_order_acquire);
    }
    while (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stopping_.load(std::memory_order_acquire)) return;
    if (job_per_thread_ != nullptr)
      (*job_per_thread_)(index);
    else
      run_chunks();
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace tessel::rt
