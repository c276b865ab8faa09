#include "fast_llm/layers/attention/rotary.h"

#include <cmath>

#include "fast_llm/core/error.h"

namespace fast_llm::layers {

Rotary::Rotary(const RotaryConfig& config, int64_t head_size) : frequencies_(config.frequencies(head_size)) {}

Rotary::Tables Rotary::tables(int64_t tokens, Device device, Stream stream, DType compute_dtype) {
  FLM_ASSERT(enabled(), "rotary tables without rotary");
  const DType dtype = compute_dtype == DType::float64 ? DType::float64 : DType::float32;
  std::lock_guard lock(mutex_);
  if (!cached_.cos.defined() || device_ != device || dtype_ != dtype || cached_.cos.size(0) < tokens) {
    const int64_t half = int64_t(frequencies_.inverse_frequencies.size());
    Tensor cos = Tensor::empty(Shape{tokens, half}, dtype);
    Tensor sin = Tensor::empty(Shape{tokens, half}, dtype);
    const auto fill = [&]<class T>(T* cos_data, T* sin_data) {
      for (int64_t token = 0; token < tokens; ++token) {
        for (int64_t i = 0; i < half; ++i) {
          const double angle = double(token) * frequencies_.inverse_frequencies[size_t(i)];
          cos_data[token * half + i] = T(std::cos(angle) * frequencies_.attention_factor);
          sin_data[token * half + i] = T(std::sin(angle) * frequencies_.attention_factor);
        }
      }
    };
    if (dtype == DType::float64)
      fill(cos.data_as<double>(), sin.data_as<double>());
    else
      fill(cos.data_as<float>(), sin.data_as<float>());
    cached_ = {.cos = cos.to(device, stream), .sin = sin.to(device, stream)};
    device_ = device;
    dtype_ = dtype;
  }
  return {.cos = cached_.cos.slice(0, 0, tokens), .sin = cached_.sin.slice(0, 0, tokens)};
}

}  // namespace fast_llm::layers
