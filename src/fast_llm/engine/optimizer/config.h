// The optimizer (`optimizer`), as Fast-LLM's OptimizerConfig: AdamW with decoupled weight decay, global gradient-norm
// clipping, a loss scaler for fp16, and a learning-rate schedule.
//
// Schedule: either warmup_iterations (linear from 0 to base) then `decay_style` from base to `minimum` ending at
// step decay_iterations, or the `schedule` string "type,steps,lr[,end_lr[,power]];..." (steps < 0: open-ended last
// stage), which replaces the other fields, e.g. warmup-stable-decay:
// "linear,2000,0,3e-4;constant,80000,3e-4;linear,18000,3e-4,0". After the last stage the rate stays where it ended.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fast_llm/config/config.h"

namespace fast_llm::engine {

// How the rate goes from `lr` to `end_lr` over a stage, with c the fraction of the stage done: constant (lr),
// linear / power (c^power), cosine (0.5 * (1 - cos(pi * c^power))).
enum class DecayStyle { constant, linear, power, cosine };

// One stage of a resolved schedule: [begin, end) steps, open-ended when `end` is unset.
struct LearningRateStage {
  DecayStyle style = DecayStyle::constant;
  int64_t begin = 0;
  std::optional<int64_t> end;
  double lr = 0;
  double end_lr = 0;  // interpolating stages only
  double power = 1;
  bool operator==(const LearningRateStage&) const = default;
};

struct LearningRateScheduleConfig : config::Config {
  double base = 1e-4;
  DecayStyle decay_style = DecayStyle::constant;
  std::optional<int64_t> decay_iterations;
  double decay_power = 1.0;
  int64_t warmup_iterations = 0;
  double minimum = 0.0;
  std::optional<std::string> schedule;

  void visit(config::Visitor& v) override;
  // The schedule as stages, from `schedule` when set, else from the other fields. Throws ConfigError (naming the
  // field) on an invalid schedule; validation calls it, so after validation it does not throw.
  std::vector<LearningRateStage> stages() const;

 protected:
  void check() const override;
};

struct GradientScalerConfig : config::Config {
  std::optional<double> constant;
  double initial = 65536.0;
  double minimum = 1.0;
  int window = 1000;
  int hysteresis = 2;
  void visit(config::Visitor& v) override;
};

struct OptimizerConfig : config::Config {
  LearningRateScheduleConfig learning_rate;
  GradientScalerConfig gradient_scaler;
  double weight_decay = 0.01;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-8;
  double gradient_norm_clipping = 1.0;
  double default_learning_rate_scale = 1.0;
  void visit(config::Visitor& v) override;
};

}  // namespace fast_llm::engine

template <>
struct fast_llm::config::EnumNames<fast_llm::engine::DecayStyle> {
  using E = fast_llm::engine::DecayStyle;
  static constexpr std::array<std::pair<E, std::string_view>, 4> values{
      {{E::constant, "constant"}, {E::linear, "linear"}, {E::power, "power"}, {E::cosine, "cosine"}}};
};
