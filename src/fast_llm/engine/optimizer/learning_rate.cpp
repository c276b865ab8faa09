// Learning-rate schedules.
#include "fast_llm/engine/optimizer/learning_rate.h"

#include <cmath>
#include <numbers>

#include "fast_llm/core/error.h"

namespace fast_llm::engine {

double learning_rate_at(const LearningRateStage& stage, int64_t step) {
  if (stage.style == DecayStyle::constant) return stage.lr;
  FLM_ASSERT(stage.end && *stage.end > stage.begin, "an interpolating learning-rate stage needs an end");
  const double fraction = std::pow(double(step - stage.begin) / double(*stage.end - stage.begin), stage.power);
  const double weight = stage.style == DecayStyle::cosine ? 0.5 * (1.0 - std::cos(std::numbers::pi * fraction))
                                                          : fraction;
  return stage.lr + weight * (stage.end_lr - stage.lr);
}

LearningRateSchedule::LearningRateSchedule(const LearningRateScheduleConfig& config)
    : LearningRateSchedule(config.stages()) {}

LearningRateSchedule::LearningRateSchedule(std::vector<LearningRateStage> stages) : stages_(std::move(stages)) {
  FLM_ASSERT(!stages_.empty() && stages_.front().begin == 0, "a learning-rate schedule starts at step 0");
  for (size_t i = 1; i < stages_.size(); ++i)
    FLM_ASSERT(stages_[i - 1].end && *stages_[i - 1].end == stages_[i].begin,
               "learning-rate stages must follow each other");
  // After a bounded last stage the rate stays where it ended.
  if (const LearningRateStage& last = stages_.back(); last.end) {
    const double final_rate = learning_rate_at(last, *last.end);
    stages_.push_back({.style = DecayStyle::constant, .begin = *last.end, .lr = final_rate, .end_lr = final_rate});
  }
}

double LearningRateSchedule::operator()(int64_t step) const {
  // The first stage whose end is after `step` (the last one is open-ended).
  for (const LearningRateStage& stage : stages_)
    if (!stage.end || step < *stage.end) return learning_rate_at(stage, step);
  throw InternalError("optimizer", "learning-rate schedule without an open-ended last stage");
}

}  // namespace fast_llm::engine
