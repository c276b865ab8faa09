// Evaluators run during training (`training.evaluators: {name: {type: ...}}`), as Fast-LLM's EvaluatorConfig: `loss`
// (the default: the training losses on the dataset `data.datasets.<name>`) every `interval` steps and at the end of
// training, and `lm_eval` (the EleutherAI harness, accepted but not built yet).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/config/config.h"
#include "fast_llm/engine/config_utils/interval_config.h"

namespace fast_llm::engine {

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
