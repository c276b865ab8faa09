#include "fast_llm/config/merge.h"

#include <string>

namespace fast_llm::config {

YAML::Node merge_config_trees(const YAML::Node& base, const YAML::Node& overrides) {
  if (!overrides || overrides.IsNull()) return YAML::Clone(base);
  if (!base || base.IsNull() || !base.IsMap() || !overrides.IsMap()) return YAML::Clone(overrides);
  const YAML::Node base_type = base["type"], override_type = overrides["type"];
  if (base_type && override_type && base_type.IsScalar() && override_type.IsScalar() &&
      base_type.Scalar() != override_type.Scalar())
    return YAML::Clone(overrides);
  YAML::Node result = YAML::Clone(base);
  for (const auto& entry : overrides) {
    const std::string key = entry.first.Scalar();
    const YAML::Node existing = base[key];
    result[key] = existing ? merge_config_trees(existing, entry.second) : YAML::Clone(entry.second);
  }
  return result;
}

}  // namespace fast_llm::config
