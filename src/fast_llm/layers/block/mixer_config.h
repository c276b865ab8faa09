// Base of the mixer configs: the token-mixing half of a decoder block (`mixer:`), selected by `type:` (default
// `attention`). Each mixer type registers its config here (FLM_REGISTER_CONFIG) and its layer with the mixer registry
// (layers/block/mixer.h).
#pragma once

#include <string_view>

#include "fast_llm/layers/block_config.h"

namespace fast_llm::layers {

struct MixerConfig : BlockConfig {
  static constexpr std::string_view kDefaultType = "attention";
};

}  // namespace fast_llm::layers
