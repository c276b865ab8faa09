// `profiling`: which training steps the kernel profiler (kernels/op_profiler.h) records, and where its tables go.
//
// After `skip` steps, cycles repeat: `wait` steps off, `warmup` steps off (kept for Fast-LLM's schema: our profiler
// has no warm-up cost, so they only delay recording), then `cycles` recorded steps. At the end of each cycle the table
// of time per kernel variant, averaged over the cycle's recorded steps, is written to
// `<run directory>/profile/step_<N>.txt` and, with `log: true` (or without a run directory), logged.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "fast_llm/engine/training/run_config.h"

namespace fast_llm::engine {

class StepProfiler {
 public:
  // Off unless `profiling.cpu` or `profiling.cuda` is set and `rank` is one of `profiling.ranks` (empty: all).
  StepProfiler(const ProfilingConfig& config, int rank, std::optional<std::filesystem::path> run_directory);

  bool enabled() const { return enabled_; }
  // Whether step `step` (1-based) is recorded.
  bool records(int64_t step) const;
  // Around a training step: starts / stops recording, and writes the table when `step` ends a cycle.
  void before_step(int64_t step);
  void after_step(int64_t step);

 private:
  bool ends_cycle(int64_t step) const;

  const ProfilingConfig& config_;
  bool enabled_ = false;
  std::optional<std::filesystem::path> run_directory_;
};

}  // namespace fast_llm::engine
