// Field lists of the optimizer configs and the learning-rate schedule parser.
#include "fast_llm/engine/optimizer/config.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

namespace fast_llm::engine {

using config::Hint;
using config::Visitor;
namespace check = config::check;

void LearningRateScheduleConfig::visit(Visitor& v) {
  v(base, "base", "Learning rate after warmup.", Hint::core, check::ge(0.0));
  v(decay_style, "decay_style", "Shape of the decay from base to minimum after warmup.", Hint::feature);
  v(decay_iterations, "decay_iterations",
    "Step at which the decay ends (counted from the start of training); required unless decay_style is constant.",
    Hint::feature, check::gt(int64_t(0)));
  v(decay_power, "decay_power", "Exponent applied to the fraction of the decay done.", Hint::feature,
    check::gt(0.0));
  v(warmup_iterations, "warmup_iterations", "Steps of linear warmup from 0 to base.", Hint::feature,
    check::ge(int64_t(0)));
  v(minimum, "minimum", "Learning rate at the end of the decay.", Hint::feature, check::ge(0.0));
  v(schedule, "schedule",
    "Stages \"type,steps,lr[,end_lr[,power]]\" separated by ';' (type constant, linear, power or cosine; steps < 0 for "
    "an open-ended last stage). Replaces the fields above.",
    Hint::wip);
}

namespace {

std::optional<double> parse_number(std::string_view text) {
  std::string copy(text);
  char* end = nullptr;
  double value = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size()) return std::nullopt;
  return value;
}

std::optional<int64_t> parse_integer(std::string_view text) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (size_t begin = 0;;) {
    size_t found = text.find(separator, begin);
    parts.push_back(text.substr(begin, found == std::string_view::npos ? std::string_view::npos : found - begin));
    if (found == std::string_view::npos) return parts;
    begin = found + 1;
  }
}

}  // namespace

std::vector<LearningRateStage> LearningRateScheduleConfig::stages() const {
  std::vector<LearningRateStage> result;
  if (!schedule) {
    if (warmup_iterations > 0)
      result.push_back(
          {.style = DecayStyle::linear, .begin = 0, .end = warmup_iterations, .lr = 0, .end_lr = base, .power = 1});
    if (decay_style != DecayStyle::constant && !decay_iterations)
      fail("decay_iterations", fmt::format("is required with decay_style {}", config::enum_name(decay_style)));
    if (decay_iterations && *decay_iterations <= warmup_iterations)
      fail("decay_iterations", fmt::format("must be greater than warmup_iterations ({}), got {}", warmup_iterations,
                                           *decay_iterations));
    result.push_back({.style = decay_style,
                      .begin = warmup_iterations,
                      .end = decay_iterations,
                      .lr = base,
                      .end_lr = decay_style == DecayStyle::constant ? base : minimum,
                      .power = decay_power});
    return result;
  }
  std::optional<int64_t> begin = 0;
  for (std::string_view definition : split(*schedule, ';')) {
    auto invalid = [&](std::string_view why) {
      fail("schedule", fmt::format("cannot parse stage \"{}\": {}", definition, why));
    };
    if (!begin) invalid("only the last stage may be open-ended (negative steps)");
    std::vector<std::string_view> arguments = split(definition, ',');
    if (arguments.size() < 3 || arguments.size() > 5) invalid("expected type,steps,lr[,end_lr[,power]]");
    auto style = config::parse_enum<DecayStyle>(arguments[0]);
    if (!style) invalid("the type must be constant, linear, power or cosine");
    auto steps = parse_integer(arguments[1]);
    if (!steps) invalid("steps must be an integer");
    if (*steps == 0) invalid("steps must not be 0");
    auto lr = parse_number(arguments[2]);
    if (!lr) invalid("lr must be a number");
    std::optional<int64_t> end;
    if (*steps > 0) end = *begin + *steps;
    LearningRateStage stage{.style = *style, .begin = *begin, .end = end, .lr = *lr, .end_lr = *lr, .power = 1};
    if (*style == DecayStyle::constant) {
      if (arguments.size() > 3) invalid("a constant stage takes no end_lr or power");
    } else {
      if (arguments.size() < 4) invalid("an interpolating stage needs end_lr");
      if (!stage.end) invalid("an interpolating stage needs a positive number of steps");
      auto end_lr = parse_number(arguments[3]);
      if (!end_lr) invalid("end_lr must be a number");
      stage.end_lr = *end_lr;
      if (arguments.size() > 4) {
        auto power = parse_number(arguments[4]);
        if (!power || *power <= 0) invalid("power must be a positive number");
        stage.power = *power;
      }
    }
    begin = stage.end;
    result.push_back(stage);
  }
  return result;
}

void LearningRateScheduleConfig::check() const { stages(); }

void GradientScalerConfig::visit(Visitor& v) {
  v(constant, "constant", "Fixed loss scale; setting it turns off dynamic scaling.", Hint::feature, check::ge(0.0));
  v(initial, "initial", "Starting loss scale of dynamic scaling (fp16).", Hint::feature, check::gt(0.0));
  v(minimum, "minimum", "Lowest loss scale of dynamic scaling (fp16).", Hint::feature, check::gt(0.0));
  v(window, "window", "Successful steps before dynamic scaling doubles the scale (fp16).", Hint::feature,
    check::gt(0));
  v(hysteresis, "hysteresis", "Overflowing steps tolerated before dynamic scaling halves the scale (fp16).",
    Hint::feature, check::gt(0));
}

void OptimizerConfig::visit(Visitor& v) {
  v(learning_rate, "learning_rate", "Learning-rate schedule.", Hint::core);
  v(gradient_scaler, "gradient_scaler", "Loss scaling: fixed, or dynamic for fp16.", Hint::feature);
  v(weight_decay, "weight_decay", "Decoupled (AdamW) weight decay.", Hint::core, check::ge(0.0));
  v(beta_1, "beta_1", "Decay of Adam's first moment.", Hint::optional, check::in_range(0.0, 1.0));
  v(beta_2, "beta_2", "Decay of Adam's second moment.", Hint::optional, check::in_range(0.0, 1.0));
  v(epsilon, "epsilon", "Added to the denominator of Adam's update.", Hint::optional, check::gt(0.0));
  v(gradient_norm_clipping, "gradient_norm_clipping", "Scale gradients down so their global L2 norm is at most this.",
    Hint::feature, check::gt(0.0));
  v(default_learning_rate_scale, "default_learning_rate_scale",
    "Learning-rate multiplier for parameters that set no lr_scale.", Hint::feature, check::ge(0.0));
}

}  // namespace fast_llm::engine
