// The learning-rate schedule, as Fast-LLM's: a list of stages [begin, end) (LearningRateScheduleConfig::stages()),
// each constant or interpolating from `lr` to `end_lr` with c = (step - begin) / (end - begin):
//   linear, power: lr + c^power * (end_lr - lr)
//   cosine:        lr + 0.5 * (1 - cos(pi * c^power)) * (end_lr - lr)
// A step at a stage's end belongs to the next stage; after the last stage the rate stays at its value at the end.
// Steps are optimizer steps counted from 1 (the first update uses rate(1)), so a warmup of n steps reaches `base` at
// step n.
#pragma once

#include <cstdint>
#include <vector>

#include "fast_llm/engine/optimizer/config.h"

namespace fast_llm::engine {

class LearningRateSchedule {
 public:
  explicit LearningRateSchedule(const LearningRateScheduleConfig& config);
  explicit LearningRateSchedule(std::vector<LearningRateStage> stages);
  double operator()(int64_t step) const;
  const std::vector<LearningRateStage>& stages() const { return stages_; }

 private:
  std::vector<LearningRateStage> stages_;
};

// The rate of one stage at `step` (begin <= step <= end).
double learning_rate_at(const LearningRateStage& stage, int64_t step);

}  // namespace fast_llm::engine
