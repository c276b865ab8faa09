// Helpers for the layer tests: fp64 CPU tensors, a binder that gives a module's parameters their own weight and
// gradient tensors (the engine's flat buffers do this for real), packed micro-batches, configs from YAML, and central
// finite differences to check backward.
#pragma once

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fast_llm/core/random.h"
#include "fast_llm/kernels/label_log_probabilities.h"
#include "fast_llm/layers/context.h"
#include "fast_llm/layers/layer.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::layers::testing {

inline Tensor tensor_from(const std::vector<double>& values, const Shape& shape, DType dtype = DType::float64) {
  EXPECT_EQ(int64_t(values.size()), shape.numel());
  Tensor tensor = Tensor::empty(shape, DType::float64);
  std::copy(values.begin(), values.end(), tensor.data_as<double>());
  if (dtype == DType::float64) return tensor;
  std::vector<float> narrowed(values.begin(), values.end());
  return Tensor::from_values(narrowed, shape, dtype);
}

// Values uniform in [-scale, scale), a pure function of `seed`.
inline std::vector<double> random_values(int64_t count, uint64_t seed, double scale = 1.0) {
  std::vector<double> values(static_cast<size_t>(count));
  for (int64_t index = 0; index < count; ++index)
    values[size_t(index)] = scale * (2.0 * double(random_uniform(seed, uint64_t(index))) - 1.0);
  return values;
}

inline Tensor random_tensor(const Shape& shape, uint64_t seed, double scale = 1.0, DType dtype = DType::float64) {
  return tensor_from(random_values(shape.numel(), seed, scale), shape, dtype);
}

inline Tensor zeros(const Shape& shape, DType dtype = DType::float64) {
  Tensor tensor = Tensor::empty(shape, dtype);
  set_bytes(tensor.data(), Device::cpu(), 0, tensor.nbytes(), Stream{});
  return tensor;
}

// All elements of a CPU tensor (any floating dtype, any strides), row-major, as doubles.
inline std::vector<double> values_of(const Tensor& tensor) {
  std::vector<double> result(static_cast<size_t>(tensor.numel()));
  std::vector<int64_t> index(size_t(tensor.rank()), 0);
  for (int64_t linear = 0; linear < tensor.numel(); ++linear) {
    int64_t rest = linear;
    for (int dim = tensor.rank() - 1; dim >= 0; --dim) {
      index[size_t(dim)] = rest % tensor.size(dim);
      rest /= tensor.size(dim);
    }
    result[size_t(linear)] = tensor.item_as_double(index);
  }
  return result;
}

inline double dot(const Tensor& tensor, const std::vector<double>& weights) {
  std::vector<double> values = values_of(tensor);
  EXPECT_EQ(values.size(), weights.size());
  double sum = 0.0;
  for (size_t index = 0; index < values.size(); ++index) sum += values[index] * weights[index];
  return sum;
}

inline double max_abs(const std::vector<double>& values) {
  double result = 0.0;
  for (double value : values) result = std::max(result, std::abs(value));
  return result;
}

// Gives every parameter of `module` a weight (random values around its initialisation: fills get +-0.3 noise, random
// initialisations +-scale uniform noise with scale max(std, 0.3)) in `dtype` and a zeroed gradient, on the CPU. The
// values depend on `seed` only, not on the dtype (they are rounded to it).
// Gradients are in `grad_dtype` (the engine's are fp32 by default), or in `dtype` when unset.
inline void bind_parameters(Module& module, uint64_t seed, DType dtype = DType::float64,
                            std::optional<DType> grad_dtype = std::nullopt) {
  uint64_t stream = 0;
  for (Parameter* parameter : module.parameters()) {
    const Initialization& init = parameter->meta.initialization;
    std::vector<double> values = random_values(parameter->meta.shape.numel(), derive_seed(seed, stream++));
    for (double& value : values) {
      if (init.kind == Initialization::Kind::fill)
        value = init.value + 0.3 * value;
      else
        value = init.mean + std::max(init.std, 0.3) * value;
    }
    parameter->weight = tensor_from(values, parameter->meta.shape, dtype);
    parameter->grad = zeros(parameter->meta.shape, grad_dtype.value_or(dtype));
  }
}

// Parameters with the values of `bind_parameters(seed)` in `dtype` on `device`, gradients fp32 zeros there.
inline void bind_on(Module& module, uint64_t seed, Device device, DType dtype) {
  bind_parameters(module, seed, dtype, DType::float32);
  if (device.is_cpu()) return;
  for (Parameter* parameter : module.parameters()) {
    parameter->weight = parameter->weight.to(device);
    parameter->grad = parameter->grad.to(device);
  }
}

// `batch` with its tensors copied to `device`.
inline MicroBatch batch_on(const MicroBatch& batch, Device device) {
  MicroBatch result = batch;
  result.tokens = batch.tokens.to(device);
  result.labels = batch.labels.to(device);
  result.positions = batch.positions.to(device);
  result.cu_seqlens = batch.cu_seqlens.to(device);
  return result;
}

inline void zero_gradients(Module& module) {
  for (Parameter* parameter : module.parameters())
    if (parameter->grad.defined()) set_bytes(parameter->grad.data(), Device::cpu(), 0, parameter->grad.nbytes(), {});
}

inline Parameter* find_parameter(Module& module, const std::string& name) {
  for (Parameter* parameter : module.parameters())
    if (parameter->meta.name == name) return parameter;
  ADD_FAILURE() << "no parameter named " << name;
  return nullptr;
}

inline std::vector<std::string> parameter_names(Module& module) {
  std::vector<std::string> names;
  for (Parameter* parameter : module.parameters()) names.push_back(parameter->meta.name);
  return names;
}

// A packed micro-batch of documents with the given lengths: random tokens in [0, vocab), labels = next token of the
// same document (-100 on the last token of each document), positions restarting at each document.
struct BatchData {
  MicroBatch batch;
  std::vector<int64_t> tokens;
  std::vector<int64_t> labels;
};

inline BatchData make_batch(const std::vector<int64_t>& document_lengths, int64_t vocab_size, uint64_t seed,
                            int64_t index = 0) {
  BatchData data;
  std::vector<int64_t> positions;
  std::vector<int32_t> boundaries{0};
  for (int64_t length : document_lengths) {
    for (int64_t position = 0; position < length; ++position) {
      data.tokens.push_back(int64_t(random_uniform(seed, data.tokens.size()) * float(vocab_size)) % vocab_size);
      positions.push_back(position);
    }
    boundaries.push_back(int32_t(data.tokens.size()));
  }
  data.labels.assign(data.tokens.size(), -100);
  for (size_t document = 0; document + 1 < boundaries.size(); ++document)
    for (int32_t token = boundaries[document]; token + 1 < boundaries[document + 1]; ++token)
      data.labels[size_t(token)] = data.tokens[size_t(token) + 1];
  const int64_t count = int64_t(data.tokens.size());
  auto int64_tensor = [&](const std::vector<int64_t>& values) {
    Tensor tensor = Tensor::empty(Shape{count}, DType::int64);
    std::copy(values.begin(), values.end(), tensor.data_as<int64_t>());
    return tensor;
  };
  data.batch.index = index;
  data.batch.tokens = int64_tensor(data.tokens);
  data.batch.labels = int64_tensor(data.labels);
  data.batch.positions = int64_tensor(positions);
  data.batch.cu_seqlens = Tensor::empty(Shape{int64_t(boundaries.size())}, DType::int32);
  std::copy(boundaries.begin(), boundaries.end(), data.batch.cu_seqlens.data_as<int32_t>());
  data.batch.max_seqlen = *std::max_element(document_lengths.begin(), document_lengths.end());
  return data;
}

// Gives `batch` what the reference models would hand the head of reference model `name` (models/gpt/
// reference_models.h): its `logits` (rows, vocab) and their log-probabilities of `labels` (rows; the batch's labels, or
// its loss rows' labels when the head computes those only), on the logits' device.
inline void attach_reference_outputs(MicroBatch& batch, const std::string& name, const Tensor& logits,
                                     const Tensor& labels) {
  batch.reference_logits[name] = logits;
  const DType dtype = logits.dtype() == DType::float64 ? DType::float64 : DType::float32;
  Tensor log_probabilities = Tensor::empty(Shape{logits.size(0)}, dtype, logits.device());
  kernels::label_log_probabilities(
      {.logits = logits, .labels = labels.to(logits.device()), .output = log_probabilities});
  batch.reference_label_log_probabilities[name] = log_probabilities;
}

inline LayerContext make_context(const MicroBatch& batch, bool training, LossSums* losses = nullptr,
                                 double loss_gradient_scale = 1.0, uint64_t dropout_seed = 0,
                                 DType compute_dtype = DType::float64) {
  return LayerContext{.batch = batch,
                      .device = Device::cpu(),
                      .compute_dtype = compute_dtype,
                      .stream = {},
                      .training = training,
                      .loss_gradient_scale = loss_gradient_scale,
                      .dropout_seed = dropout_seed,
                      .losses = losses};
}

// A validated config loaded from YAML.
template <class C>
C load_config(const std::string& yaml) {
  C config;
  config.load(YAML::Load(yaml));
  config.validate();
  return config;
}

// Central finite differences of `objective` with respect to elements of `variable` (a contiguous fp64 CPU tensor the
// objective reads), compared with `analytic` (same shape). Checks every element, or `max_checks` spread evenly.
// Also requires the analytic gradient not to vanish, so the comparison means something.
inline void expect_gradient(const std::function<double()>& objective, const Tensor& variable, const Tensor& analytic,
                            const std::string& what, int64_t max_checks = 48, double epsilon = 1e-6,
                            double tolerance = 1e-6) {
  ASSERT_EQ(variable.dtype(), DType::float64) << what;
  ASSERT_TRUE(variable.is_contiguous()) << what;
  ASSERT_EQ(variable.shape(), analytic.shape()) << what;
  std::vector<double> expected = values_of(analytic);
  EXPECT_GT(max_abs(expected), 1e-8) << what << ": the analytic gradient is zero";
  double* data = variable.data_as<double>();
  const int64_t count = variable.numel();
  const int64_t step = std::max<int64_t>(1, count / max_checks);
  int failures = 0;
  for (int64_t index = (count > max_checks ? step / 2 : 0); index < count; index += step) {
    const double original = data[index];
    data[index] = original + epsilon;
    const double plus = objective();
    data[index] = original - epsilon;
    const double minus = objective();
    data[index] = original;
    const double numeric = (plus - minus) / (2.0 * epsilon);
    const double error = std::abs(numeric - expected[size_t(index)]);
    if (error > tolerance * (1.0 + std::abs(numeric)) && failures++ < 5)
      ADD_FAILURE() << what << "[" << index << "]: finite differences " << numeric << ", backward "
                    << expected[size_t(index)];
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " mismatching elements";
}

}  // namespace fast_llm::layers::testing
