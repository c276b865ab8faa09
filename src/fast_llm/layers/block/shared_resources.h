// What the layers of one model share, made once by the first layer that asks for it and handed to the others: the
// rotary tables, one Rotary per distinct set of frequencies (blocks with equal rotary settings and head size), so each
// cos / sin table exists once. The model builds one for all its blocks; the layers keep what they took.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fast_llm/layers/attention/rotary.h"

namespace fast_llm::layers {

class SharedResources {
 public:
  // The Rotary for `config` at `head_size`: the one made earlier with the same frequencies, or a new one.
  std::shared_ptr<Rotary> rotary(const RotaryConfig& config, int64_t head_size);

 private:
  std::vector<std::shared_ptr<Rotary>> rotaries_;
};

}  // namespace fast_llm::layers
