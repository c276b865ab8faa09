// Evaluators run during training (`training.evaluators: {name: {type: ...}}`), as Fast-LLM's EvaluatorConfig: `loss`
// (the default: the training losses on the dataset `data.datasets.<name>`) every `interval` steps and at the end of
// training, and `lm_eval` (the EleutherAI harness, accepted but not built yet).
//
// IntervalConfig, the base of every evaluator, is declared here: the training loop's other periodic things (logs,
// checkpoints, exports, shutdown, alerts) derive from it too, and training/config.h includes this header for the
// evaluators, so this is the one home both see.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/config/config.h"

namespace fast_llm::engine {

// Things that happen every `interval` training steps from `offset` (logs, checkpoints, exports, evaluations, shutdown),
// as Fast-LLM's IntervalConfig. An unset interval disables the thing; the offset is reduced modulo the interval.
struct IntervalConfig : config::Config {
  std::optional<int> interval;
  int offset = 0;
  void visit(config::Visitor& v) override;

  bool enabled() const { return interval.has_value(); }
  // Whether it happens at (completed) step `iteration`.
  bool enabled_at(int64_t iteration) const { return interval && (iteration - offset) % *interval == 0; }
  // Whether every step where this happens is also a step where `other` happens.
  bool is_sub_interval(const IntervalConfig& other) const;

 protected:
  // Lets subclasses say what their interval is for, as Fast-LLM's field overrides do.
  void visit_interval(config::Visitor& v, std::string_view interval_description, std::string_view offset_description);
  void derive() override;
};

struct EvaluatorConfig : IntervalConfig {
  static constexpr std::string_view kDefaultType = "loss";
};

struct LossEvaluatorConfig : EvaluatorConfig {
  std::optional<int> iterations;
  void visit(config::Visitor& v) override;
};

// The tokenizer of an lm_eval evaluator (the fields of Fast-LLM's TokenizerConfig).
struct EvaluatorTokenizerConfig : config::Config {
  std::optional<std::filesystem::path> path;
  std::optional<std::string> bos_token;
  std::optional<int> max_vocab_size;
  bool trust_remote_code = false;
  void visit(config::Visitor& v) override;
};

struct LmEvalEvaluatorConfig : EvaluatorConfig {
  std::string type = "lm_eval";
  EvaluatorTokenizerConfig tokenizer;
  std::vector<std::string> cli_args;
  bool truncation = false;
  bool logits_cache = true;
  bool add_bos_token = false;
  std::optional<int> prefix_token_id;
  std::optional<int> max_length;
  double communication_timeout_sec = 600.0;
  void visit(config::Visitor& v) override;
};

}  // namespace fast_llm::engine
