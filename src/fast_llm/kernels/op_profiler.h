// Time per kernel variant, for `profiling: {cuda: true}` / `{cpu: true}`: where a training step's time goes.
//
// Every op runs through `dispatch` (registry.h), so timing there covers every kernel the model launches, named by
// its variant id (`gemm:cuda:cublaslt`, ...). While recording, a CUDA dispatch is bracketed by two events on the
// op's stream (no host synchronisation until `collect`, which runs once per recorded step), a CPU dispatch by the
// host clock (CPU kernels run synchronously). Off, the cost in `dispatch` is one relaxed atomic load.
//
// Times are of the device work between the two events, so they add up to the step's device time only when nothing
// else runs on the stream concurrently (one stream per device, as the trainer does). Bracketing adds two event
// records per dispatch, a few microseconds of host time: fine for finding where time goes, not for the headline
// tokens/s (the trainer logs profiled steps like any other, so do not benchmark with profiling on). Kernels are
// dispatched from the training thread only, so the profiler takes no lock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fast_llm/core/device.h"
#include "fast_llm/tensor/stream.h"

namespace fast_llm::kernels {

struct KernelInfo;

struct OpTiming {
  std::string id;  // variant id, "op:device:variant"
  int64_t calls = 0;
  double total_ms = 0.0;
};

class OpProfiler {
 public:
  static OpProfiler& instance();

  // Which devices are timed once recording starts.
  void configure(bool cpu, bool cuda);
  bool recording() const { return recording_.load(std::memory_order_relaxed); }
  void start_recording();
  // Stops recording and folds the recorded dispatches into the totals (synchronises the events' streams).
  void stop_recording();

  // Around one dispatch (called by `dispatch` only while recording).
  struct Scope {
    int64_t slot = -1;  // CUDA: index of the event pair; CPU: 0. -1 when this device is not timed
    const KernelInfo* info = nullptr;
    std::chrono::steady_clock::time_point host_start = {};
  };
  Scope begin(const KernelInfo& info, Device device, Stream stream);
  void end(const Scope& scope, Device device, Stream stream);

  // Totals since the last reset, longest first; `recorded_steps` is how many start/stop windows they cover.
  std::vector<OpTiming> totals() const;
  int64_t recorded_steps() const { return recorded_steps_; }
  void reset();

  // A table of the totals: per variant, calls per step, ms per step, share of the total. `width` >= 40.
  std::string table(int width) const;

 private:
  OpProfiler() = default;
  struct Pending;
  void add(const std::string& id, double ms);

  std::atomic<bool> recording_{false};
  bool time_cpu_ = false, time_cuda_ = false;
  std::vector<std::unique_ptr<Pending>> pending_;  // event pairs of the current window, reused across windows
  int64_t pending_used_ = 0;
  std::vector<OpTiming> totals_;
  int64_t recorded_steps_ = 0;
};

}  // namespace fast_llm::kernels
