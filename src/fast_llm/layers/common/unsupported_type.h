// Marks a whole `type:` of a polymorphic config as accepted but without behaviour yet.
//
// The class was already chosen from the YAML `type` key by the Dynamic codec; visiting the key once more as a field of
// the class lets a `not_supported_yet` marker report it at `<path>.type` (e.g. `...decoder.block.mlp.type: moe is not
// supported yet (mixture of experts)`), so `train` refuses to start instead of running without the feature.
#pragma once

#include <string>
#include <string_view>

#include "fast_llm/config/config.h"

namespace fast_llm::layers {

inline void visit_unsupported_type(config::Visitor& v, std::string& type, std::string_view what) {
  v(type, "type", "Name of this configuration type.", config::Hint::core, config::not_supported_yet(std::string(), what));
}

}  // namespace fast_llm::layers
