#include "fast_llm/engine/training/profiling.h"

#include <fmt/format.h>

#include <algorithm>

#include "fast_llm/core/file_writer.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/kernels/op_profiler.h"

namespace fast_llm::engine {

StepProfiler::StepProfiler(const ProfilingConfig& config, int rank,
                           std::optional<std::filesystem::path> run_directory)
    : config_(config), run_directory_(std::move(run_directory)) {
  const bool this_rank =
      config.ranks.empty() || std::find(config.ranks.begin(), config.ranks.end(), rank) != config.ranks.end();
  enabled_ = (config.cpu || config.cuda) && this_rank;
  if (!enabled_) return;
  kernels::OpProfiler& profiler = kernels::OpProfiler::instance();
  profiler.configure(config.cpu, config.cuda);
  profiler.reset();
  log_main("Profiling kernels ({}{}{}) from step {}: {} steps per cycle, {} recorded", config.cpu ? "cpu" : "",
           config.cpu && config.cuda ? ", " : "", config.cuda ? "cuda" : "", config.skip + 1,
           config.wait + config.warmup + config.cycles, config.cycles);
}

bool StepProfiler::records(int64_t step) const {
  if (!enabled_ || step <= config_.skip) return false;
  const int64_t position = (step - config_.skip - 1) % int64_t(config_.wait + config_.warmup + config_.cycles);
  return position >= config_.wait + config_.warmup;
}

bool StepProfiler::ends_cycle(int64_t step) const {
  if (!enabled_ || step <= config_.skip) return false;
  const int64_t length = config_.wait + config_.warmup + config_.cycles;
  return (step - config_.skip) % length == 0;
}

void StepProfiler::before_step(int64_t step) {
  if (records(step)) kernels::OpProfiler::instance().start_recording();
}

void StepProfiler::after_step(int64_t step) {
  if (!records(step)) return;
  kernels::OpProfiler& profiler = kernels::OpProfiler::instance();
  profiler.stop_recording();
  if (!ends_cycle(step)) return;
  const std::string table = fmt::format("Kernel time per step, average of steps {} to {}:\n{}",
                                        step - profiler.recorded_steps() + 1, step,
                                        profiler.table(config_.table_width));
  if (run_directory_) {
    const std::filesystem::path path = *run_directory_ / "profile" / fmt::format("step_{}.txt", step);
    write_file(path, table, {.component = "training"});
    if (!config_.log) log_main("Kernel profile of steps up to {}: {}", step, path.string());
  }
  if (config_.log || !run_directory_) log_main("{}", table);
  profiler.reset();
}

}  // namespace fast_llm::engine
