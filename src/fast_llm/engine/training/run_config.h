// Run-wide settings (`run`, Fast-LLM's RunConfig: experiment directory, logging, debug tensor logs) and the optional
// profiler (`profiling`, Fast-LLM's ProfilingConfig).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "fast_llm/config/config.h"

namespace fast_llm::engine {

struct TensorLogsConfig : config::Config {
  bool save = false;
  bool show = true;
  int max_elements = 8;
  bool full_tensors = false;
  void visit(config::Visitor& v) override;
};

struct RunConfig : config::Config {
  TensorLogsConfig tensor_logs;
  bool structured_logs = true;
  std::optional<std::filesystem::path> experiment_dir;
  bool enable_all_loggers = false;
  bool log_timestamps = true;
  std::optional<std::string> experiment_name;
  bool torch_dynamo_enable = true;
  bool enable_triton_kernels = true;
  bool triton_linear_kernels = false;
  int model_debug_level = 0;
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

// Profiling cycles: after `skip` steps, repeat {wait, warmup, cycles} steps, recording the `cycles` ones.
struct ProfilingConfig : config::Config {
  bool cpu = false;
  bool cuda = false;
  int skip = 1;
  int wait = 0;
  int warmup = 1;
  int cycles = 1;
  bool averages = false;
  bool trace = false;
  int table_width = 80;
  std::vector<int> ranks;  // a set: empty means every rank
  bool log = false;
  bool export_ = false;  // YAML `export` (a C++ keyword)
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

}  // namespace fast_llm::engine
