#include "fast_llm/layers/block/shared_resources.h"

#include <utility>

namespace fast_llm::layers {

std::shared_ptr<Rotary> SharedResources::rotary(const RotaryConfig& config, int64_t head_size) {
  RotaryFrequencies frequencies = config.frequencies(head_size);
  for (const auto& candidate : rotaries_)
    if (candidate->frequencies() == frequencies) return candidate;
  return rotaries_.emplace_back(std::make_shared<Rotary>(std::move(frequencies)));
}

}  // namespace fast_llm::layers
