// Field list of the PEFT configs.
#include "fast_llm/layers/peft/config.h"


namespace fast_llm::layers {

using config::Hint;
namespace check = config::check;

FLM_REGISTER_CONFIG(PeftConfig, NoPeftConfig, "none");
FLM_REGISTER_CONFIG(PeftConfig, LoraConfig, "lora");

void LoraConfig::visit(config::Visitor& v) {
  v(rank, "rank", "Inner dimension of the low-rank adapters.", Hint::stability, check::gt(0));
  v(alpha, "alpha", "Adapter scaling numerator: the adapter output is multiplied by alpha / rank.", Hint::stability);
  v(dropout, "dropout", "Dropout probability on the adapter input.", Hint::stability, check::in_range(0.0, 1.0));
  v(freeze_others, "freeze_others", "Freeze every parameter that is not an adapter.", Hint::unknown);
}

}  // namespace fast_llm::layers
