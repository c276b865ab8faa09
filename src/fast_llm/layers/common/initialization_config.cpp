// Field lists of the initialization configs.
#include <fmt/format.h>

#include "fast_llm/layers/common/initialization_config.h"
#include "fast_llm/layers/common/unsupported_type.h"

namespace fast_llm::layers {

using config::Hint;
using config::Visitor;
namespace check = config::check;

FLM_REGISTER_CONFIG(InitializationConfig, DefaultInitializationConfig, "default");
FLM_REGISTER_CONFIG(InitializationConfig, FillInitializationConfig, "fill");
FLM_REGISTER_CONFIG(InitializationConfig, NormalInitializationConfig, "normal");
FLM_REGISTER_CONFIG(InitializationConfig, UniformInitializationConfig, "uniform");
FLM_REGISTER_CONFIG(InitializationConfig, MambaDtBiasInitializationConfig, "mamba_dt_bias");
FLM_REGISTER_CONFIG(InitializationConfig, MambaAInitializationConfig, "mamba_a");

void FillInitializationConfig::visit(Visitor& v) {
  v(value, "value", "Constant every element is set to.", Hint::optional, check::ge(0.0));
}

void NormalInitializationConfig::visit(Visitor& v) {
  v(standard_deviation, "std", "Standard deviation of the normal distribution.", Hint::optional, check::ge(0.0));
  v(mean, "mean", "Mean of the normal distribution.", Hint::optional);
  v(min, "min", "Lower clamp applied after sampling, if set.", Hint::optional);
  v(max, "max", "Upper clamp applied after sampling, if set.", Hint::optional);
}

void NormalInitializationConfig::check() const {
  if (min && max && *min > *max) fail("max", fmt::format("must be at least min ({}), got {}", *min, *max));
}

void UniformInitializationConfig::visit(Visitor& v) {
  v(scale, "scale", "Half-width of the interval: values are drawn from [mean - scale, mean + scale]. Required.",
    Hint::core, check::ge(0.0));
  v(mean, "mean", "Centre of the interval.", Hint::optional);
}

void UniformInitializationConfig::check() const {
  if (!scale) fail("scale", "is required for a uniform initialization");
}

void MambaDtBiasInitializationConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "Mamba initializations");
  v(min_step_size, "min_step_size", "Smallest discretization step sampled.", Hint::core, check::gt(0.0));
  v(max_step_size, "max_step_size", "Largest discretization step sampled.", Hint::core, check::gt(0.0));
  v(floor, "floor", "Lower bound on the sampled step before the inverse softplus.", Hint::core, check::gt(0.0));
}

void MambaDtBiasInitializationConfig::check() const {
  if (max_step_size < min_step_size)
    fail("max_step_size", fmt::format("must be at least min_step_size ({}), got {}", min_step_size, max_step_size));
}

void MambaAInitializationConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "Mamba initializations");
  v(state_size, "state_size", "SSM state size, repeated here for the initializer. Required.", Hint::core,
    check::gt(0));
  v(d_inner, "d_inner", "SSM inner dimension, repeated here for the initializer. Required.", Hint::core, check::gt(0));
}

void MambaAInitializationConfig::check() const {
  if (!state_size) fail("state_size", "is required for a mamba_a initialization");
  if (!d_inner) fail("d_inner", "is required for a mamba_a initialization");
}

}  // namespace fast_llm::layers
