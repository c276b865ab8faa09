// The training loop's settings (`training`), as Fast-LLM's TrainingConfig: number of steps, metric logs, checkpoints,
// exports, automated shutdown, evaluators, Weights & Biases, and data-loader workers.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "fast_llm/config/config.h"
#include "fast_llm/engine/checkpoint/config.h"
#include "fast_llm/engine/evaluation/config.h"

namespace fast_llm::engine {

// The per-interval metric log line.
struct MetricsLogsConfig : IntervalConfig {
  MetricsLogsConfig() { interval = 100; }
  void visit(config::Visitor& v) override;
};

// Fields shared by checkpoints and exports: how many saves to keep.
struct TrainingCheckpointBaseConfig : IntervalConfig {
  std::optional<int> keep;
  std::optional<int> keep_every;

  // What prune_checkpoints keeps of these saves.
  CheckpointRetention retention() const {
    return {.keep = keep, .keep_every = keep_every, .interval = interval, .offset = offset};
  }

 protected:
  void visit_keep(config::Visitor& v);
};

// Full training checkpoints (distributed format, weights and optimizer state) under <experiment_dir>/checkpoint.
struct TrainingCheckpointConfig : TrainingCheckpointBaseConfig {
  TrainingCheckpointConfig() { keep = 5; }
  void visit(config::Visitor& v) override;
};

// Exports in a chosen format under <experiment_dir>/export/<format>.
struct TrainingExportConfig : TrainingCheckpointBaseConfig, CheckpointStateSaveOptions {
  void visit(config::Visitor& v) override;

 protected:
  void derive() override;
  void check() const override;
};

// Stop the run after a checkpoint (for preemptible jobs).
struct ShutdownConfig : IntervalConfig {
  void visit(config::Visitor& v) override;
};

struct WandbAlertConfig : IntervalConfig {
  std::optional<bool> status_updates;  // unset: when alerts are enabled
  void visit(config::Visitor& v) override;
};

struct WandbConfig : config::Config {
  WandbAlertConfig alert;
  std::string group_name = "default";
  std::string project_name = "fast_llm";
  std::optional<std::string> entity_name;  // W&B is on iff set
  void visit(config::Visitor& v) override;
};

struct TrainingConfig : config::Config {
  std::map<std::string, config::Dynamic<EvaluatorConfig>> evaluators;
  MetricsLogsConfig logs;
  TrainingCheckpointConfig checkpoint;
  TrainingExportConfig export_;  // YAML `export` (a C++ keyword)
  ShutdownConfig shutdown;
  WandbConfig wandb;
  int64_t train_iters = 0;
  int num_workers = 2;
  std::optional<int> prefetch_factor;
  std::optional<double> timeout = 3600.0;
  std::optional<int64_t> max_consecutive_skipped_iterations = 100;
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

}  // namespace fast_llm::engine
