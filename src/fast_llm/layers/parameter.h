// Parameters as layers declare them and as the engine binds them.
//
// A layer declares each parameter (name, shape, initialisation, optimizer settings) when it is built; the engine
// (engine/multi_stage) then lays all parameters of a stage out in flat buffers and binds each Parameter to its views:
// `weight` in the compute dtype, `grad` in the gradient dtype (fp32 by default). Layers never allocate parameters.
#pragma once

#include <cstdint>
#include <string>

#include "fast_llm/tensor/tensor.h"

namespace fast_llm::layers {

// How a parameter is initialised. Element i of a parameter is a pure function of (seed, parameter name, i), so the
// initial model is the same for any parallel layout and any device (core/random.h).
struct Initialization {
  enum class Kind { normal, uniform, fill };
  Kind kind = Kind::normal;
  double mean = 0.0;
  double std = 1.0;       // normal
  double min = -1e300;    // normal: clamp (truncation), uniform: low
  double max = 1e300;     // normal: clamp, uniform: high
  double value = 0.0;     // fill

  static Initialization normal(double std, double mean = 0.0) { return {.kind = Kind::normal, .mean = mean, .std = std}; }
  static Initialization fill(double value) { return {.kind = Kind::fill, .value = value}; }
  static Initialization uniform(double low, double high) { return {.kind = Kind::uniform, .min = low, .max = high}; }
};

struct ParameterMeta {
  std::string name;  // full dotted name, Fast-LLM's: "decoder.3.mixer.query.weight"
  Shape shape;
  Initialization initialization;
  bool weight_decay = true;  // false for norms and biases
  double lr_scale = 1.0;     // product of the lr_scale settings down the config tree
  bool frozen = false;       // no gradient, no optimizer state
};

struct Parameter {
  ParameterMeta meta;
  Tensor weight;  // bound by the engine: view into the stage weight buffer, compute dtype
  Tensor grad;    // bound by the engine: view into the stage gradient buffer (undefined when frozen)
};

}  // namespace fast_llm::layers
