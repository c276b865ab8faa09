// Merging config trees: a config stored elsewhere (a pretrained checkpoint's model) under the values a user wrote,
// before the merged tree is read into a config.
#pragma once

#include <yaml-cpp/yaml.h>

namespace fast_llm::config {

// `base` with `overrides` applied key by key (mappings merge recursively; a mapping whose `type` differs from the
// base's replaces it whole, since the fields of another type do not apply). The inputs are left unchanged.
YAML::Node merge_config_trees(const YAML::Node& base, const YAML::Node& overrides);

}  // namespace fast_llm::config
