// Per-layer tensor logs, as Fast-LLM writes them for `model.multi_stage.debug_layer_outputs` and
// `debug_layer_gradients`: after each layer's forward, its output; after each layer's backward, the gradient of its
// input. They are how two runs (two layouts, two builds, this program and Fast-LLM) are compared layer by layer.
//
// The value is the detail level, as in Fast-LLM's log_tensor: 1 name, shape, dtype and device; 2 also the mean, the
// standard deviation (unbiased, in float64 over the values read as floats) and the strides; 3 and above also
// 2^(level - 3) values sampled at a stride (the stride is lowered until it divides no dimension larger than 1, so
// the samples walk across rows), of which the first 8 are printed. Columns are padded to Fast-LLM's widths and numbers
// formatted as its format_number (4 decimals, or 3 in scientific notation outside [1e-2, 1e7)).
// Reading the statistics waits for the device: these logs are for debugging, not for measured runs (CUDA graphs
// refuse them).
#pragma once

#include <string>

#include "fast_llm/tensor/tensor.h"

namespace fast_llm::engine {

struct LayerLogSettings {
  int outputs = 0;    // debug_layer_outputs
  int gradients = 0;  // debug_layer_gradients
  bool any() const { return outputs > 0 || gradients > 0; }
};

// The log line of `tensor` under `name` at `level` (>= 1).
std::string describe_tensor(const std::string& name, const Tensor& tensor, int level);

// Fast-LLM's format_number: `value` with 4 decimals, or with 3 in scientific notation when its magnitude is outside
// [1e-2, 1e7).
std::string format_number(double value);

}  // namespace fast_llm::engine
