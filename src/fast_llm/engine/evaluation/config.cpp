// Field lists of the interval and evaluator configs.
#include "fast_llm/engine/evaluation/config.h"

namespace fast_llm::engine {

using config::Hint;
using config::Visitor;
namespace check = config::check;

// ---------------------------------------------------------------------------------------------------------------
// Intervals

void IntervalConfig::visit(Visitor& v) {
  visit_interval(v, "Training steps between two occurrences. Unset: never.", "Step of the first occurrence.");
}

void IntervalConfig::visit_interval(Visitor& v, std::string_view interval_description,
                                    std::string_view offset_description) {
  v(interval, "interval", interval_description, Hint::feature, check::gt(0));
  v(offset, "offset", offset_description, Hint::feature, check::ge(0));
}

void IntervalConfig::derive() {
  // A non-positive interval is reported by its check.
  if (interval && *interval > 0) offset %= *interval;
}

bool IntervalConfig::is_sub_interval(const IntervalConfig& other) const {
  if (!enabled()) return true;
  if (!other.enabled()) return false;
  return *interval % *other.interval == 0 && other.offset % *other.interval == offset % *other.interval;
}

// ---------------------------------------------------------------------------------------------------------------
// Evaluators

FLM_REGISTER_CONFIG(EvaluatorConfig, LossEvaluatorConfig, "loss");
FLM_REGISTER_CONFIG(EvaluatorConfig, LmEvalEvaluatorConfig, "lm_eval");

void LossEvaluatorConfig::visit(Visitor& v) {
  visit_interval(v, "Training steps between two evaluations (also run after the last step). Unset: never.",
                 "Step of the first evaluation.");
  v(iterations, "iterations", "Batches in each evaluation. Unset: no evaluation.", Hint::feature, check::gt(0));
}

void EvaluatorTokenizerConfig::visit(Visitor& v) {
  v(path, "path", "Path to the tokenizer.", Hint::core);
  v(bos_token, "bos_token", "Beginning-of-sequence token to use when the tokenizer defines none.", Hint::core);
  v(max_vocab_size, "max_vocab_size", "Restrict output tokens to this many ids (testing).", Hint::testing);
  v(trust_remote_code, "trust_remote_code",
    "Allow the tokenizer's own code to run; needs --trust-remote-code on the command line too.", Hint::feature);
}

void LmEvalEvaluatorConfig::visit(Visitor& v) {
  v(type, "type", "Name of this configuration type.", Hint::core,
    config::not_supported_yet(std::string(), "lm_eval evaluators"));
  visit_interval(v, "Training steps between two evaluations (also run after the last step). Unset: never.",
                 "Step of the first evaluation.");
  v(tokenizer, "tokenizer", "Tokenizer of the evaluation tasks.", Hint::unknown);
  v(cli_args, "cli_args", "lm_eval command-line arguments, except those about the model, W&B, batch size and device.",
    Hint::unknown);
  v(truncation, "truncation", "Truncate inputs longer than the model's maximum length.", Hint::unknown);
  v(logits_cache, "logits_cache", "Cache logits between repeated evaluations.", Hint::unknown);
  v(add_bos_token, "add_bos_token", "Prepend the beginning-of-sequence token.", Hint::unknown);
  v(prefix_token_id, "prefix_token_id", "Token id prepended to every input. Unset: none.", Hint::unknown);
  v(max_length, "max_length", "Longest prompt plus generation. Unset: from the model or tokenizer.", Hint::unknown);
  v(communication_timeout_sec, "communication_timeout_sec",
    "Timeout of the collectives of an evaluation, in seconds (ranks may idle while others post-process).",
    Hint::unknown, check::gt(0.0));
}

}  // namespace fast_llm::engine
