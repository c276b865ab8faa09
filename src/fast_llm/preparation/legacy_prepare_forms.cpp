#include "fast_llm/preparation/legacy_prepare_forms.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>

#include "fast_llm/core/error.h"

namespace fast_llm::preparation {

namespace {

std::string flow(const YAML::Node& node) {
  YAML::Emitter emitter;
  emitter << YAML::Flow << node;
  return emitter.c_str();
}

// Moves `from[old_key]` to `to[new_key]`, naming both paths when both are set to different values.
void move_key(YAML::Node from, const std::string& old_key, YAML::Node to, const std::string& new_key,
              const std::string& old_path, const std::string& new_path, std::vector<std::string>& warnings) {
  const YAML::Node value = YAML::Clone(from[old_key]);
  if (to[new_key] && flow(to[new_key]) != flow(value))
    throw ConfigError(new_path, fmt::format("set both here ({}) and in its older spelling {} ({})",
                                            flow(to[new_key]), old_path, flow(value)));
  to[new_key] = value;
  from.remove(old_key);
  warnings.push_back(fmt::format("`{}` is Fast-LLM's spelling before 0.4; read as `{}: {}`", old_path, new_path,
                                 flow(value)));
}

}  // namespace

std::vector<std::string> migrate_legacy_preparation_forms(YAML::Node& tree) {
  std::vector<std::string> warnings;
  if (!tree || !tree.IsMap()) return warnings;

  // The three worker counts of the old pipeline (loading, tokenizing, saving) became one pool.
  std::optional<int64_t> workers;
  std::vector<std::string> old_names;
  for (const std::string key : {"loading_workers", "tokenize_workers", "saving_workers"}) {
    if (!tree[key]) continue;
    const YAML::Node value = tree[key];
    int64_t count = 0;
    try {
      count = value.as<int64_t>();
    } catch (const YAML::Exception&) {
      throw ConfigError(key, fmt::format("expected a number of workers, got {}", flow(value)));
    }
    workers = std::max(workers.value_or(count), count);
    old_names.push_back(key);
    tree.remove(key);
  }
  if (workers) {
    if (tree["num_workers"] && tree["num_workers"].as<std::string>("") != std::to_string(*workers))
      throw ConfigError("num_workers", fmt::format("set both here ({}) and in its older spelling {} ({})",
                                                   flow(tree["num_workers"]), fmt::join(old_names, "/"), *workers));
    tree["num_workers"] = *workers;
    warnings.push_back(fmt::format("`{}` are Fast-LLM's spellings before 0.4; read as `num_workers: {}`",
                                   fmt::join(old_names, "`, `"), *workers));
  }

  if (tree["dataset"] && tree["dataset"].IsMap()) {
    YAML::Node dataset = tree["dataset"];
    struct Move {
      const char* old_key;
      const char* new_key;
    };
    for (const Move& move : {Move{"field", "text"}, Move{"loss_masking_spans", "loss_masking_spans"},
                             Move{"chosen_text", "chosen_span"}, Move{"rejected_text", "rejected_span"}}) {
      if (!dataset[move.old_key]) continue;
      if (!dataset["source_schema"]) dataset["source_schema"] = YAML::Node(YAML::NodeType::Map);
      if (!dataset["source_schema"].IsMap())
        throw ConfigError("dataset.source_schema", fmt::format("expected a mapping, got {}",
                                                               flow(dataset["source_schema"])));
      move_key(dataset, move.old_key, dataset["source_schema"], move.new_key,
               std::string("dataset.") + move.old_key, std::string("dataset.source_schema.") + move.new_key,
               warnings);
    }
  }
  return warnings;
}

}  // namespace fast_llm::preparation
