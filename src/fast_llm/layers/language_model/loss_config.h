// Losses of the language-model head (`head.losses: {name: {type: ...}}`), as Fast-LLM's LanguageModelLossConfig family.
// `type` is required: `label` (cross-entropy with the next-token labels; Fast-LLM's default loss is named
// `cross_entropy`), `z_loss` (logsumexp^2 regularizer), `grpo` and `gspo` (clipped policy-gradient losses on the
// dataset's token data), and `distillation` and `dpo` (against a model of the trainer's `reference_models`; dpo is
// normalised by the preference pairs in the step instead). Each loss is weight * (sum over unmasked labels) /
// (unmasked labels in the whole step) (gspo: per document, policy_gradient_loss.h), on logits scaled by the head's and
// the loss's logits_scale_factor (reference/fast-llm.md §4).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "fast_llm/config/config.h"

namespace fast_llm::layers {

// Distance between distributions: for labels (one-hot), forward KL is the same as cross-entropy and reverse KL is
// undefined.
enum class EntropyLossType { cross_entropy, forward_kl, reverse_kl };
enum class PolicyMetricsLevel { none, basic, auto_ };

struct LanguageModelLossConfig : config::Config {
  static constexpr std::string_view kDefaultType = "";  // `type` is required
  double weight = 1.0;
  double logits_scale_factor = 1.0;
  void visit(config::Visitor& v) override;
  // Whether the loss can share one softmax with the other combinable losses of the head.
  virtual bool combinable() const { return false; }
};

// Losses computed from the same softmax, fused together unless `head.loss_implementation` is `per_loss`.
struct CombinableLossConfig : LanguageModelLossConfig {
  std::optional<bool> use_triton;
  void visit(config::Visitor& v) override;
  bool combinable() const override { return true; }
};

struct LabelLossConfig : CombinableLossConfig {
  EntropyLossType loss_type = EntropyLossType::cross_entropy;
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

struct ZLossConfig : CombinableLossConfig {};

// Knowledge distillation from a reference model's logits.
struct DistillationLossConfig : CombinableLossConfig {
  EntropyLossType loss_type = EntropyLossType::cross_entropy;
  std::string reference_model = "teacher";
  double temperature = 1.0;
  void visit(config::Visitor& v) override;
};

// Direct preference optimization against a reference model.
struct DpoLossConfig : LanguageModelLossConfig {
  double beta = 1.0;
  std::optional<std::string> reference_model;  // required
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

// Clipped policy-gradient losses (GRPO per token, GSPO per sequence).
struct PolicyGradientLossConfig : CombinableLossConfig {
  double epsilon_low = 0.2;
  double epsilon_high = 0.2;
  PolicyMetricsLevel metrics = PolicyMetricsLevel::auto_;
  void visit(config::Visitor& v) override;
};

struct GrpoLossConfig : PolicyGradientLossConfig {};

struct GspoLossConfig : PolicyGradientLossConfig {};

}  // namespace fast_llm::layers

template <>
struct fast_llm::config::EnumNames<fast_llm::layers::EntropyLossType> {
  using E = fast_llm::layers::EntropyLossType;
  static constexpr std::array<std::pair<E, std::string_view>, 3> values{
      {{E::cross_entropy, "cross_entropy"}, {E::forward_kl, "forward_kl"}, {E::reverse_kl, "reverse_kl"}}};
};

template <>
struct fast_llm::config::EnumNames<fast_llm::layers::PolicyMetricsLevel> {
  using E = fast_llm::layers::PolicyMetricsLevel;
  static constexpr std::array<std::pair<E, std::string_view>, 3> values{
      {{E::none, "none"}, {E::basic, "basic"}, {E::auto_, "auto"}}};
};
