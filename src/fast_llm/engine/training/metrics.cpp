// Metric lines and records.
#include "fast_llm/engine/training/metrics.h"

#include <fmt/format.h>

#include <cmath>
#include <ctime>

#include "fast_llm/tensor/allocator.h"

namespace fast_llm::engine {
namespace {

constexpr double kMebibyte = 1024.0 * 1024.0;

std::string format_step_fields(const StepMetrics& m) {
  return fmt::format(
      " @ iteration {:6.0f}/{:6.0f} | consumed samples: {:>12} | consumed tokens: {:>16} | batch size: {:3.0f} | step "
      "time: {:.2f} ms | throughput: {:.2f} tflop/s (model) | {:.2f} tflop/s (hardware) | {:.2f} tokens/s/gpu | Memory "
      "allocated {} MiB | max allocated {} MiB | reserved {} MiB | max reserved {} MiB | global max reserved {} MiB",
      double(m.iteration), double(m.train_iters), format_with_commas(double(m.consumed_samples), 0),
      format_with_commas(double(m.consumed_tokens), 0), double(m.batch_size), m.step_time_ms, m.model_tflops,
      m.hardware_tflops, m.tokens_per_sec_per_gpu, format_with_commas(m.memory.allocated_mib, 2),
      format_with_commas(m.memory.max_allocated_mib, 2), format_with_commas(m.memory.reserved_mib, 2),
      format_with_commas(m.memory.max_reserved_mib, 2), format_with_commas(m.memory.global_max_reserved_mib, 2));
}

std::string format_losses(const StepMetrics& m) {
  std::string text;
  for (const auto& [name, value] : m.losses) text += fmt::format(" | {}: {:.5f}", name, value);
  return text;
}

nlohmann::json step_json(const StepMetrics& m) {
  nlohmann::json record = {
      {"iteration", m.iteration},
      {"train_iters", m.train_iters},
      {"consumed_samples", m.consumed_samples},
      {"consumed_tokens", m.consumed_tokens},
      {"batch_size", m.batch_size},
      {"step_time_ms", m.step_time_ms},
      {"model_tflops", m.model_tflops},
      {"hardware_tflops", m.hardware_tflops},
      {"tokens_per_sec_per_gpu", m.tokens_per_sec_per_gpu},
      {"allocated", m.memory.allocated_mib},
      {"max_allocated", m.memory.max_allocated_mib},
      {"reserved", m.memory.reserved_mib},
      {"max_reserved", m.memory.max_reserved_mib},
      {"global_max_reserved", m.memory.global_max_reserved_mib},
  };
  // JSON has no NaN: a non-finite loss is written as null.
  for (const auto& [name, value] : m.losses) record[name] = std::isfinite(value) ? nlohmann::json(value) : nullptr;
  return record;
}

}  // namespace

MemoryUsage memory_usage(Device device, bool reset_peak) {
  Allocator& allocator = allocator_for(device);
  AllocatorStats stats = allocator.stats();
  if (reset_peak) allocator.reset_peak();
  // One process: the global peak is this process's.
  return {.allocated_mib = double(stats.allocated_bytes) / kMebibyte,
          .max_allocated_mib = double(stats.peak_allocated_bytes) / kMebibyte,
          .reserved_mib = double(stats.reserved_bytes) / kMebibyte,
          .max_reserved_mib = double(stats.peak_reserved_bytes) / kMebibyte,
          .global_max_reserved_mib = double(stats.peak_reserved_bytes) / kMebibyte};
}

std::string format_with_commas(double value, int precision) {
  if (!std::isfinite(value)) return fmt::format("{}", value);
  std::string digits = fmt::format("{:.{}f}", std::fabs(value), precision);
  size_t point = digits.find('.');
  size_t integer_end = point == std::string::npos ? digits.size() : point;
  std::string result;
  for (size_t i = 0; i < integer_end; ++i) {
    if (i > 0 && (integer_end - i) % 3 == 0) result += ',';
    result += digits[i];
  }
  result += digits.substr(integer_end);
  return std::signbit(value) && result.find_first_not_of("0.,") != std::string::npos ? "-" + result : result;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds)) return "nan";
  int64_t total = int64_t(std::llround(seconds));
  bool negative = total < 0;
  // Python normalises negative durations to "-1 day, H:MM:SS"; a negative remaining time never happens here.
  if (negative) total = 0;
  int64_t days = total / 86400, rest = total % 86400;
  std::string clock = fmt::format("{}:{:02}:{:02}", rest / 3600, rest % 3600 / 60, rest % 60);
  if (days == 0) return clock;
  return fmt::format("{} day{}, {}", days, days == 1 ? "" : "s", clock);
}

std::string format_timestamp(double seconds) {
  if (!std::isfinite(seconds)) return "nan";
  std::time_t time = std::time_t(std::llround(seconds));
  std::tm local{};
  localtime_r(&time, &local);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d %H:%M:%S", &local);
  return buffer;
}

std::string format_training_metrics(const TrainingMetrics& m) {
  return "training" + format_step_fields(m) +
         fmt::format(" | learning rate: {:.3e} | loss scale: {:5.0f} | grad norm: {:.4f} | skipped iterations: {:3.0f} "
                     "| nan iterations: {:3.0f} | average step time {:.2f} ms | data wait: {:.2f} ms | remaining {}  | "
                     "completion {} ({:.2f} %)",
                     m.learning_rate, m.loss_scale, m.grad_norm, double(m.skipped_iters), double(m.nan_iters),
                     m.step_time_average_ms, m.data_wait_ms, format_duration(m.remaining_time_s),
                     format_timestamp(m.completion_time), m.percent_done) +
         format_losses(m);
}

std::string format_validation_metrics(const StepMetrics& m, const std::string& dataset_name) {
  return "validation/" + dataset_name + format_step_fields(m) + format_losses(m);
}

nlohmann::json training_metrics_json(const TrainingMetrics& m) {
  nlohmann::json record = step_json(m);
  record["phase"] = "training";
  record["learning_rate"] = m.learning_rate;
  record["loss_scale"] = m.loss_scale;
  record["grad_norm"] = std::isfinite(m.grad_norm) ? nlohmann::json(m.grad_norm) : nullptr;
  record["skipped_iters"] = m.skipped_iters;
  record["nan_iters"] = m.nan_iters;
  record["step_time_average_ms"] = m.step_time_average_ms;
  record["data_wait_ms"] = m.data_wait_ms;
  record["remaining_time"] = m.remaining_time_s;
  record["completion_time"] = m.completion_time;
  record["percent_done"] = m.percent_done;
  return record;
}

nlohmann::json validation_metrics_json(const StepMetrics& m, const std::string& dataset_name) {
  nlohmann::json record = step_json(m);
  record["phase"] = "validation";
  record["dataset"] = dataset_name;
  return record;
}

}  // namespace fast_llm::engine
