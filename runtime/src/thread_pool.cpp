// Persistent thread pool: workers spin briefly, then sleep on an atomic generation counter.
#include "tessel/rt/thread_pool.h"

#include <algorithm>

namespace tessel::rt {
namespace {

// Set while a thread executes a parallel_for body: nested parallel_for calls then run inline
// instead of deadlocking on a pool whose workers are all busy.
thread_local bool tls_inside_parallel_region = false;

}  // namespace

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(std::max(1, num_threads)), ranges_(std::make_unique<OwnedRange[]>(num_threads_)) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {

constexpr uint64_t pack_range(int64_t front, int64_t end) {
  return static_cast<uint64_t>(front) | (static_cast<uint64_t>(end) << 32);
}
constexpr int64_t range_front(uint64_t r) { return static_cast<int64_t>(r & 0xffffffffu); }
constexpr int64_t range_end(uint64_t r) { return static_cast<int64_t>(r >> 32); }

}  // namespace

// Thread `self`: its own range front to back, then chunks from the back of the others' (the thread after it
// first). Chunks are a kChunksPerThread-th of an owned range (at least 1 item), so a slowed thread leaves
// most of its range to the others.
void ThreadPool::run_owned_chunks(int self) {
  const int64_t chunk = std::max<int64_t>(1, job_n_ / (int64_t{kChunksPerThread} * num_threads_));
  OwnedRange& own = ranges_[self];
  for (uint64_t r = own.front_end.load(std::memory_order_relaxed);;) {
    const int64_t f = range_front(r), e = range_end(r);
    if (f >= e) break;
    const int64_t take = std::min(chunk, e - f);
    if (!own.front_end.compare_exchange_weak(r, pack_range(f + take, e), std::memory_order_relaxed)) continue;
    (*job_fn_)(f, f + take);
    r = own.front_end.load(std::memory_order_relaxed);
  }
  for (int k = 1; k < num_threads_; ++k) {
    OwnedRange& other = ranges_[(self + k) % num_threads_];
    for (uint64_t r = other.front_end.load(std::memory_order_relaxed);;) {
      const int64_t f = range_front(r), e = range_end(r);
      if (f >= e) break;
      const int64_t take = std::min(chunk, e - f);
      if (!other.front_end.compare_exchange_weak(r, pack_range(f, e - take), std::memory_order_relaxed)) continue;
      (*job_fn_)(e - take, e);
      r = other.front_end.load(std::memory_order_relaxed);
    }
  }
}

namespace {

constexpr uint64_t kPerThreadBit = uint64_t{1} << 30, kClosedBit = uint64_t{1} << 31, kActiveMask = kPerThreadBit - 1;
constexpr uint64_t job_generation(uint64_t s) { return s >> 32; }

// Waits until pred() holds: spins (the other threads finish within microseconds on balanced work), then yields.
template <class Pred>
void spin_until(const Pred& pred) {
  for (int spins = 0; !pred(); ++spins)
    if (spins > 2000) std::this_thread::yield();
}

}  // namespace

void ThreadPool::publish(bool per_thread) {
  const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
  job_state_.store((gen << 32) | (per_thread ? kPerThreadBit : 0), std::memory_order_release);
  generation_.store(gen, std::memory_order_release);
  generation_.notify_all();
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn) {
  if (n <= 0) return;
  if (num_threads_ <= 1 || n <= 1 || tls_inside_parallel_region) {
    fn(0, n);
    return;
  }
  if (n >= (int64_t{1} << 31)) {  // beyond the 32-bit halves of a range: one part per thread
    const int threads = num_threads_;
    run_per_thread([&](int t) {
      if (t * n / threads < (t + 1) * n / threads) fn(t * n / threads, (t + 1) * n / threads);
    });
    return;
  }
  job_fn_ = &fn;
  job_n_ = n;
  for (int t = 0; t < num_threads_; ++t)
    ranges_[t].front_end.store(pack_range(t * n / num_threads_, (t + 1) * n / num_threads_), std::memory_order_relaxed);
  publish(false);
  tls_inside_parallel_region = true;
  run_owned_chunks(0);  // its own part, then whatever the workers have not taken
  tls_inside_parallel_region = false;
  // Every chunk is taken: close the job to late workers and wait for those that joined to finish theirs.
  job_state_.fetch_or(kClosedBit, std::memory_order_acq_rel);
  spin_until([&] { return (job_state_.load(std::memory_order_acquire) & kActiveMask) == 0; });
}

void ThreadPool::run_per_thread(const std::function<void(int)>& fn) {
  if (num_threads_ <= 1 || tls_inside_parallel_region) {
    for (int t = 0; t < num_threads_; ++t) fn(t);
    return;
  }
  job_per_thread_ = &fn;
  // Every worker runs its part of every such job (each index on its own thread), so the caller waits for all.
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  publish(true);
  tls_inside_parallel_region = true;
  fn(0);
  tls_inside_parallel_region = false;
  spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
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
    if (stopping_.load(std::memory_order_acquire)) return;
    uint64_t s = job_state_.load(std::memory_order_acquire);
    seen = job_generation(s);  // the newest job (an older parallel_for this worker slept through is closed)
    if (s & kPerThreadBit) {  // the caller waits for every worker: this is the job it woke for
      (*job_per_thread_)(index);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
      continue;
    }
    // Join the parallel_for unless its caller has closed it (then every chunk is taken: skip it).
    bool joined = false;
    while (!(s & kClosedBit) && job_generation(s) == seen) {
      if (job_state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;
    run_owned_chunks(index);
    job_state_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace tessel::rt
