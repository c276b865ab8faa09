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

// How a parameter lies over the tensor-parallel group (layers/common/tensor_parallel.h). `shape` is this rank's; a split
// parameter is the one-process tensor cut along `dim`, which is made of `blocks` equal blocks (key_value's keys and
// values, a gated layer_1's gate and up halves) each cut into `size` parts, rank r holding part r of every block. A
// replicated parameter (dim -1) is whole on every rank; with `partial_gradient` each rank computes only a part of its
// gradient (sequence-tensor-parallel norms, the per-head query and key norms), which the engine sums over the group.
struct TensorSplit {
  int size = 1;  // tensor-parallel ranks (1: not tensor-parallel)
  int rank = 0;
  int dim = -1;
  int blocks = 1;
  bool partial_gradient = false;

  bool split() const { return size > 1 && dim >= 0; }
  // The one-process shape of a parameter of this rank's shape `local`.
  Shape global_shape(const Shape& local) const;
  // The index in the one-process tensor of element `index` of this rank's tensor of shape `local` (row-major).
  int64_t global_index(const Shape& local, int64_t index) const;
  // Elements from `index` on that follow each other in the one-process tensor too (at least 1).
  int64_t contiguous_run(const Shape& local, int64_t index) const;
};

struct ParameterMeta {
  std::string name;  // full dotted name, Fast-LLM's: "decoder.3.mixer.query.weight"
  Shape shape;
  Initialization initialization;
  bool weight_decay = true;  // false for norms and biases
  double lr_scale = 1.0;     // product of the lr_scale settings down the config tree
  bool frozen = false;       // no gradient, no optimizer state
  bool peft = false;         // a PEFT adapter weight (LoRA): stays trainable when `peft.freeze_others` freezes the rest
  TensorSplit tensor;        // tensor-parallel layout (whole, on one rank, by default)
};

struct Parameter {
  ParameterMeta meta;
  Tensor weight;  // bound by the engine: view into the stage weight buffer, compute dtype
  Tensor grad;    // bound by the engine: view into the stage gradient buffer (undefined when frozen)

  // Set by the layers that call grad_beta or start_grad before each accumulation into `grad` (linear, norms,
  // embeddings, the head). For those, at the start of a training step the engine clears grad_started instead of
  // zeroing the gradient (a full write of 4 bytes per parameter), so the step's first accumulation writes instead of
  // adding (a gemm with beta 0 also skips reading the old values), and zeroes what no layer wrote before the
  // optimizer reads it. Other parameters are zeroed at the start of the step.
  bool tracks_grad_start = false;
  // Whether `grad` holds this step's gradient so far. Layers used outside a training step (tests) see true: `+=`.
  bool grad_started = true;

  // The beta of an accumulation that covers the whole of `grad` and can overwrite it (a gemm): 0 for the step's
  // first, then 1. The caller must then write all of `grad`.
  double grad_beta() {
    const double beta = grad_started ? 1.0 : 0.0;
    grad_started = true;
    return beta;
  }
  // Before an accumulation that can only add, or covers part of `grad`: zeroes it if this step has not written it.
  void start_grad(Stream stream);
};

}  // namespace fast_llm::layers
