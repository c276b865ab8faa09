// Median device time of a piece of GPU work, for the benchmarks: CUDA events around each run on cuda:0's compute
// stream, after `warmup` untimed runs.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "fast_llm/tensor/stream.h"

namespace fast_llm::benchmarks {

inline double median_ms(const std::function<void()>& run, int warmup, int iterations) {
  const Device device = Device::cuda(0);
  const Stream stream = compute_stream(device);
  for (int i = 0; i < warmup; ++i) run();
  std::vector<double> times;
  Event start(device), stop(device);
  for (int i = 0; i < iterations; ++i) {
    start.record(stream);
    run();
    stop.record(stream);
    stop.synchronize();
    times.push_back(start.elapsed_ms(stop));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace fast_llm::benchmarks
