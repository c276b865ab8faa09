// Loss scaling.
#include "fast_llm/engine/optimizer/grad_scaler.h"

#include <algorithm>

#include "fast_llm/core/logging.h"

namespace fast_llm::engine {

GradScaler::GradScaler(const GradientScalerConfig& config, DType compute_dtype) : config_(config) {
  if (config.constant) {
    state_.scale = *config.constant;
  } else if (compute_dtype == DType::float16) {
    dynamic_ = true;
    state_.scale = config.initial;
    state_.hysteresis_tracker = config.hysteresis;
  }
}

void GradScaler::update(bool successful) {
  if (!dynamic_) return;
  if (successful) {
    if (++state_.growth_tracker == config_.window) {
      state_.growth_tracker = 0;
      state_.hysteresis_tracker = config_.hysteresis;
      state_.scale *= 2.0;
      log_main("Setting loss scale to {}", state_.scale);
    }
    return;
  }
  state_.growth_tracker = 0;
  if (--state_.hysteresis_tracker <= 0) {
    state_.scale = std::max(state_.scale * 0.5, config_.minimum);
    log_main("Setting loss scale to {}", state_.scale);
  }
}

}  // namespace fast_llm::engine
