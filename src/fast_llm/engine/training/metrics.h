// The trainer's metric lines and records, in Fast-LLM's format (reference/fast-llm.md §6.7, fast_llm/logging.py):
//
//   training @ iteration     10/   100 | consumed samples:           80 | consumed tokens:          163,840 | batch
//   size:   8 | step time: 123.45 ms | throughput: 12.34 tflop/s (model) | 12.34 tflop/s (hardware) | 1234.56
//   tokens/s/gpu | Memory allocated 1.00 MiB | max allocated ... | reserved ... | max reserved ... | global max
//   reserved ... MiB | learning rate: 1.000e-04 | loss scale:     1 | grad norm: 0.1234 | skipped iterations:   0 | nan
//   iterations:   0 | average step time 123.45 ms | data wait: 1.23 ms | remaining 0:00:11  | completion 2026-11-29
//   08:04:34 (10.00 %) | language_model_loss: 2.34567
//
// (one line; validation lines are `validation/<dataset> @ iteration ...` and stop after the memory fields). The same
// values go to `metrics.jsonl` as one JSON object per line.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fast_llm/core/device.h"

namespace fast_llm::engine {

struct MemoryUsage {
  double allocated_mib = 0, max_allocated_mib = 0, reserved_mib = 0, max_reserved_mib = 0,
         global_max_reserved_mib = 0;
};

// The device allocator's statistics; `reset_peak` restarts the peaks (Fast-LLM resets them at each log).
MemoryUsage memory_usage(Device device, bool reset_peak);

// Fields shared by training and validation lines.
struct StepMetrics {
  int64_t iteration = 0;
  int64_t train_iters = 0;
  int64_t consumed_samples = 0;
  int64_t consumed_tokens = 0;
  int64_t batch_size = 0;  // samples per step
  double step_time_ms = 0;
  double model_tflops = 0;
  double hardware_tflops = 0;
  double tokens_per_sec_per_gpu = 0;
  MemoryUsage memory;
  std::vector<std::pair<std::string, double>> losses;  // in the order they are printed
};

struct TrainingMetrics : StepMetrics {
  double learning_rate = 0;
  double loss_scale = 1;
  double grad_norm = 0;
  int64_t skipped_iters = 0;
  int64_t nan_iters = 0;
  double step_time_average_ms = 0;
  double data_wait_ms = 0;
  double remaining_time_s = 0;
  double completion_time = 0;  // seconds since the epoch
  double percent_done = 0;
};

std::string format_training_metrics(const TrainingMetrics& metrics);
std::string format_validation_metrics(const StepMetrics& metrics, const std::string& dataset_name);
nlohmann::json training_metrics_json(const TrainingMetrics& metrics);
nlohmann::json validation_metrics_json(const StepMetrics& metrics, const std::string& dataset_name);

// Python's `{:,.{precision}f}`: thousands separated by commas.
std::string format_with_commas(double value, int precision);
// Python's str(timedelta(seconds=round(seconds))): "H:MM:SS", "N day(s), H:MM:SS".
std::string format_duration(double seconds);
// Python's str(datetime.fromtimestamp(round(seconds))): local "YYYY-MM-DD HH:MM:SS".
std::string format_timestamp(double seconds);

}  // namespace fast_llm::engine
