// Things that happen every `interval` training steps from `offset` (logs, checkpoints, exports, evaluations, shutdown),
// as Fast-LLM's IntervalConfig. An unset interval disables the thing; the offset is reduced modulo the interval.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "fast_llm/config/config.h"

namespace fast_llm::engine {

struct IntervalConfig : config::Config {
  std::optional<int> interval;
  int offset = 0;
  void visit(config::Visitor& v) override;

  bool enabled() const { return interval.has_value(); }
  // Whether it happens at (completed) step `iteration`.
  bool enabled_at(int64_t iteration) const { return interval && (iteration - offset) % *interval == 0; }
  // Whether every step where this happens is also a step where `other` happens.
  bool is_sub_interval(const IntervalConfig& other) const;

 protected:
  // Lets subclasses say what their interval is for, as Fast-LLM's field overrides do.
  void visit_interval(config::Visitor& v, std::string_view interval_description, std::string_view offset_description);
  void derive() override;
};

}  // namespace fast_llm::engine
