// Loss scaling (`optimizer.gradient_scaler`), as Fast-LLM's grad scalers:
//   - `constant` set: the loss gradient is multiplied by that fixed scale (and gradients divided by it);
//   - fp16 compute: dynamic scaling from `initial`; a step with non-finite gradients costs one unit of hysteresis, and
//     when none is left the scale is halved (not below `minimum`); `window` successful steps in a row double it and
//     restore the hysteresis;
//   - otherwise (bf16, fp32, fp64): scale 1.
#pragma once

#include <cstdint>

#include "fast_llm/core/dtype.h"
#include "fast_llm/engine/optimizer/config.h"

namespace fast_llm::engine {

// What a checkpoint keeps of the scaler.
struct GradScalerState {
  double scale = 1.0;
  int64_t growth_tracker = 0;
  int64_t hysteresis_tracker = 0;
  bool operator==(const GradScalerState&) const = default;
};

class GradScaler {
 public:
  GradScaler(const GradientScalerConfig& config, DType compute_dtype);

  double scale() const { return state_.scale; }
  bool dynamic() const { return dynamic_; }
  // Whether skipped steps may still lower the scale (dynamic scaling above `minimum`): until then a skip is the scaler
  // looking for a scale that fits fp16, not a sign of divergence.
  bool can_lower() const { return dynamic_ && state_.scale > config_.minimum; }
  // After each step: whether the update went through (finite gradients).
  void update(bool successful);

  const GradScalerState& state() const { return state_; }
  void load(const GradScalerState& state) { state_ = state; }

 private:
  const GradientScalerConfig& config_;
  bool dynamic_ = false;
  GradScalerState state_;
};

}  // namespace fast_llm::engine
