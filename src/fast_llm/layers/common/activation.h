// Activation functions named in configs (MLP, gated norms, convolutions), with Fast-LLM's YAML names. `gelu` is the
// tanh approximation; `squared_relu` is relu(x)^2.
#pragma once

#include <array>
#include <string_view>
#include <utility>

#include "fast_llm/config/codec.h"

namespace fast_llm::layers {

enum class ActivationType { gelu, silu, relu, sigmoid, squared_relu, identity };

}  // namespace fast_llm::layers

template <>
struct fast_llm::config::EnumNames<fast_llm::layers::ActivationType> {
  using E = fast_llm::layers::ActivationType;
  static constexpr std::array<std::pair<E, std::string_view>, 6> values{{{E::gelu, "gelu"},
                                                                          {E::silu, "silu"},
                                                                          {E::relu, "relu"},
                                                                          {E::sigmoid, "sigmoid"},
                                                                          {E::squared_relu, "squared_relu"},
                                                                          {E::identity, "identity"}}};
};
