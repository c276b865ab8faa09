// Field hints, as Fast-LLM's FieldHint: what kind of setting a field is, which decides when it is printed.
#pragma once

#include <string_view>

namespace fast_llm::config {

enum class Hint {
  core,          // what most users set (sizes, paths, iterations)
  architecture,  // defines the model's function; compared when loading checkpoints
  optional,
  performance,
  stability,
  feature,
  expert,
  unknown,
  logging,
  testing,
  derived,  // computed from other fields
  setup,    // set from the environment (ranks, world size)
  deprecated,
  wip,
};

// Verbosity levels for printing (Fast-LLM's FieldVerboseLevel): a field is printed when its hint's importance is at
// most the level asked for.
inline constexpr int kVerboseCore = 0;
inline constexpr int kVerboseOptional = 10;
inline constexpr int kVerbosePerformance = 20;
inline constexpr int kVerboseDebug = 50;
inline constexpr int kVerboseEverything = 1000;

int hint_importance(Hint hint);
std::string_view hint_name(Hint hint);

}  // namespace fast_llm::config
