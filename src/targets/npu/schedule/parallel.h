// Independent pricing tasks of the schedule passes spread over the cores.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace tessel::npu {

/// Runs task(k) for every k in [0, count) on all cores, the calling thread among them. The tasks must be independent
/// (each writes only its own results), so what they compute does not depend on the order or the core count.
template <typename Task>
void forEachInParallel(size_t count, const Task& task) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k; (k = next++) < count;) task(k);
  };
  std::vector<std::thread> threads;
  const size_t jobs = std::max(1u, std::thread::hardware_concurrency());
  for (size_t j = 1; j < std::min(jobs, count); ++j) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
}

}  // namespace tessel::npu
