#include "fast_llm/layers/layer.h"

#include <fmt/format.h>

#include "fast_llm/core/error.h"
#include "fast_llm/kernels/copy.h"

namespace fast_llm::layers {

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> result;
  for (auto& parameter : parameters_) result.push_back(&parameter);
  for (Module* child : children_) {
    auto child_parameters = child->parameters();
    result.insert(result.end(), child_parameters.begin(), child_parameters.end());
  }
  return result;
}

Parameter& Module::declare(std::string_view local_name, Shape shape, Initialization initialization, bool weight_decay,
                           double lr_scale) {
  return parameters_.emplace_back(Parameter{.meta = ParameterMeta{.name = child_name(local_name),
                                                                  .shape = shape,
                                                                  .initialization = initialization,
                                                                  .weight_decay = weight_decay,
                                                                  .lr_scale = lr_scale}});
}

std::string Module::child_name(std::string_view local_name) const {
  return name_.empty() ? std::string(local_name) : fmt::format("{}.{}", name_, local_name);
}

Tensor& LossSums::get(const std::string& name, Device device, LossNormalization normalization) {
  auto found = sums_.find(name);
  if (found != sums_.end()) {
    FLM_ASSERT(normalizations_.at(name) == normalization, "loss {} summed with two normalisations", name);
    return found->second;
  }
  normalizations_.emplace(name, normalization);
  DType dtype = device.is_cpu() ? DType::float64 : DType::float32;
  Tensor sum = Tensor::empty(Shape{1}, dtype, device);
  kernels::fill({.tensor = sum, .value = loss_identity(normalization), .stream = Stream{}});
  return sums_.emplace(name, std::move(sum)).first->second;
}

LossNormalization LossSums::normalization(const std::string& name) const {
  auto found = normalizations_.find(name);
  return found == normalizations_.end() ? LossNormalization::per_label : found->second;
}

}  // namespace fast_llm::layers
