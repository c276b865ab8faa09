// Field lists of the language-model loss configs.
#include <fmt/format.h>

#include "fast_llm/layers/common/unsupported_type.h"
#include "fast_llm/layers/language_model/loss_config.h"

namespace fast_llm::layers {

using config::Hint;
using config::Visitor;
namespace check = config::check;

FLM_REGISTER_CONFIG(LanguageModelLossConfig, LabelLossConfig, "label");
FLM_REGISTER_CONFIG(LanguageModelLossConfig, ZLossConfig, "z_loss");
FLM_REGISTER_CONFIG(LanguageModelLossConfig, DistillationLossConfig, "distillation");
FLM_REGISTER_CONFIG(LanguageModelLossConfig, DpoLossConfig, "dpo");
FLM_REGISTER_CONFIG(LanguageModelLossConfig, GrpoLossConfig, "grpo");
FLM_REGISTER_CONFIG(LanguageModelLossConfig, GspoLossConfig, "gspo");

void LanguageModelLossConfig::visit(Visitor& v) {
  v(weight, "weight", "Weight of this loss in the total loss.", Hint::core, check::ge(0.0));
  v(logits_scale_factor, "logits_scale_factor",
    "Extra factor on the logits for this loss only, on top of the head's logits_scale_factor.", Hint::feature,
    check::gt(0.0));
}

void CombinableLossConfig::visit(Visitor& v) {
  LanguageModelLossConfig::visit(v);
  v(use_triton, "use_triton",
    "Ask for Fast-LLM's Triton kernel for this loss; only meaningful with loss_implementation per_loss. Unset: auto.",
    Hint::expert);
}

void LabelLossConfig::visit(Visitor& v) {
  CombinableLossConfig::visit(v);
  v(loss_type, "loss_type", "Distance to the labels; forward_kl is the same as cross_entropy for one-hot labels.",
    Hint::core);
}

void LabelLossConfig::check() const {
  if (loss_type == EntropyLossType::reverse_kl) fail("loss_type", "reverse_kl is not defined for labels");
}

void DistillationLossConfig::visit(Visitor& v) {
  CombinableLossConfig::visit(v);
  v(loss_type, "loss_type", "Distance between the teacher's and the model's distributions.", Hint::core);
  v(reference_model, "reference_model", "Name of the teacher in `reference_models`.", Hint::feature);
  v(temperature, "temperature", "Temperature of the teacher's softmax: its logits are divided by it.", Hint::optional,
    check::gt(0.0));
}

void DpoLossConfig::visit(Visitor& v) {
  LanguageModelLossConfig::visit(v);
  v(beta, "beta", "Strength of the preference term.", Hint::core, check::gt(0.0));
  v(reference_model, "reference_model", "Name of the reference model in `reference_models`. Required.",
    Hint::feature);
}

void DpoLossConfig::check() const {
  if (!reference_model) fail("reference_model", "is required for a dpo loss");
}

void PolicyGradientLossConfig::visit(Visitor& v) {
  CombinableLossConfig::visit(v);
  v(epsilon_low, "epsilon_low", "Lower clip of the probability ratio: 1 - epsilon_low.", Hint::unknown,
    check::ge(0.0));
  v(epsilon_high, "epsilon_high", "Upper clip of the probability ratio: 1 + epsilon_high.", Hint::unknown,
    check::ge(0.0));
  v(metrics, "metrics",
    "Diagnostics to log: basic (ratio, KL, advantage and entropy statistics), none, or auto (basic: the head always "
    "sees the whole vocabulary).",
    Hint::feature);
}

}  // namespace fast_llm::layers
