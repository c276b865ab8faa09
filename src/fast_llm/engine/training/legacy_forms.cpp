#include "fast_llm/engine/training/legacy_forms.h"

#include <fmt/format.h>

#include <map>

#include "fast_llm/core/error.h"

namespace fast_llm::engine {

namespace {

// A node on one line, whatever style it was written in.
void set_flow_style(YAML::Node node) {
  if (!node.IsMap() && !node.IsSequence()) return;
  node.SetStyle(YAML::EmitterStyle::Flow);
  for (auto item : node) set_flow_style(node.IsMap() ? item.second : YAML::Node(item));
}

std::string flow(const YAML::Node& node) {
  YAML::Node copy = YAML::Clone(node);
  set_flow_style(copy);
  YAML::Emitter emitter;
  emitter << copy;
  return emitter.c_str();
}

bool is_map(const YAML::Node& node) { return node && node.IsMap(); }

// Moves `from[key]` to `to[key]`; both present and different is an error naming both paths.
void move_key(YAML::Node from, YAML::Node to, const std::string& key, const std::string& from_path,
              const std::string& to_path) {
  const YAML::Node value = from[key];
  if (to[key] && flow(to[key]) != flow(value))
    throw ConfigError(to_path + "." + key, fmt::format("set both here ({}) and in its older spelling {}.{} ({})",
                                                       flow(to[key]), from_path, key, flow(value)));
  to[key] = YAML::Clone(value);
  from.remove(key);
}

// training.validation and training.evaluations: evaluators of type loss under training.evaluators.
void migrate_evaluations(YAML::Node training, std::vector<std::string>& warnings) {
  auto add_evaluator = [&](const std::string& name, const YAML::Node& settings, const std::string& old_path) {
    if (!is_map(settings))
      throw ConfigError(old_path, fmt::format("expected a mapping of interval, offset and iterations, got {}",
                                              flow(settings)));
    if (!training["evaluators"]) training["evaluators"] = YAML::Node(YAML::NodeType::Map);
    if (training["evaluators"][name])
      throw ConfigError("training.evaluators." + name,
                        fmt::format("defined twice: here and in its older spelling {}", old_path));
    YAML::Node evaluator = YAML::Clone(settings);
    // The oldest form was always a loss evaluation; a nested `evaluator:` says its own type (migrated next).
    if (!evaluator["type"] && !evaluator["evaluator"]) evaluator["type"] = "loss";
    training["evaluators"][name] = evaluator;
    warnings.push_back(fmt::format("`{}` is Fast-LLM's spelling before 0.4; read as `training.evaluators.{}: {}`",
                                   old_path, name, flow(evaluator)));
  };
  if (training["validation"]) {
    add_evaluator("validation", training["validation"], "training.validation");
    training.remove("validation");
  }
  if (training["evaluations"]) {
    const YAML::Node evaluations = training["evaluations"];
    if (!is_map(evaluations))
      throw ConfigError("training.evaluations", fmt::format("expected a mapping of evaluations, got {}",
                                                            flow(evaluations)));
    for (const auto& entry : evaluations)
      add_evaluator(entry.first.as<std::string>(), entry.second,
                    "training.evaluations." + entry.first.as<std::string>());
    training.remove("evaluations");
  }
}

// training.evaluators.NAME.evaluator: {...}: the evaluator's fields one level up, named after its dataset.
void migrate_nested_evaluators(YAML::Node training, std::vector<std::string>& warnings) {
  YAML::Node evaluators = training["evaluators"];
  if (!is_map(evaluators)) return;
  struct Migrated {
    std::string name;  // the evaluator's old name
    std::string dataset;
    YAML::Node flat;
  };
  std::vector<Migrated> migrated;
  std::vector<std::string> removed;
  for (const auto& entry : evaluators) {
    const std::string name = entry.first.as<std::string>();
    YAML::Node outer = entry.second;
    if (!is_map(outer) || !outer["evaluator"]) continue;
    const std::string path = "training.evaluators." + name;
    YAML::Node inner = outer["evaluator"];
    if (!is_map(inner))
      throw ConfigError(path + ".evaluator", fmt::format("expected a mapping, got {}", flow(inner)));
    YAML::Node flat = YAML::Clone(outer);
    flat.remove("evaluator");
    std::string dataset = name;
    for (const auto& field : inner) {
      const std::string key = field.first.as<std::string>();
      if (key == "dataset_name") {
        dataset = field.second.as<std::string>();
        continue;
      }
      move_key(YAML::Clone(inner), flat, key, path + ".evaluator", path);
    }
    removed.push_back(name);
    migrated.push_back({name, dataset, flat});
    warnings.push_back(fmt::format("`{}: {}` is Fast-LLM's spelling before 0.4; read as `training.evaluators.{}: {}`{}",
                                   path, flow(outer), dataset, flow(flat),
                                   dataset == name ? ""
                                                   : fmt::format(" (an evaluator is named after its dataset since 0.4: "
                                                                 "data.datasets.{})",
                                                                 dataset)));
  }
  for (const std::string& name : removed) evaluators.remove(name);
  std::map<std::string, std::string> evaluator_of_dataset;
  for (const auto& [name, dataset, flat] : migrated) {
    if (evaluators[dataset] || evaluator_of_dataset.contains(dataset))
      throw ConfigError("training.evaluators." + name,
                        fmt::format("evaluates data.datasets.{} (`dataset_name`), as does evaluator `{}`: since "
                                    "Fast-LLM 0.4 an evaluator is named after the one dataset it evaluates, so the "
                                    "two cannot both be kept; remove one",
                                    dataset, evaluator_of_dataset.contains(dataset) ? evaluator_of_dataset[dataset]
                                                                                     : dataset));
    evaluator_of_dataset[dataset] = name;
    evaluators[dataset] = flat;
  }
}

// data.sampling: its fields are data's own since 0.4.
void migrate_data_sampling(YAML::Node data, std::vector<std::string>& warnings) {
  const YAML::Node sampling = data["sampling"];
  if (!sampling) return;
  if (!is_map(sampling))
    throw ConfigError("data.sampling", fmt::format("expected a mapping, got {}", flow(sampling)));
  YAML::Node moved(YAML::NodeType::Map);
  for (const auto& field : YAML::Clone(sampling)) {
    const std::string key = field.first.as<std::string>();
    move_key(data["sampling"], data, key, "data.sampling", "data");
    moved[key] = YAML::Clone(field.second);
  }
  data.remove("sampling");
  warnings.push_back(fmt::format("`data.sampling: {}` is Fast-LLM's spelling before 0.4; its fields are data's own: "
                                 "read as `data: {}`",
                                 flow(moved), flow(moved)));
}

// {type: sampled, dataset: D, sampling: S} anywhere in a dataset tree: D.
YAML::Node unwrap_sampled(const YAML::Node& dataset, const std::string& path, std::vector<std::string>& warnings) {
  if (dataset && dataset.IsSequence()) {
    YAML::Node result(YAML::NodeType::Sequence);
    for (size_t i = 0; i < dataset.size(); ++i)
      result.push_back(unwrap_sampled(dataset[i], fmt::format("{}[{}]", path, i), warnings));
    return result;
  }
  if (!is_map(dataset)) return dataset;
  if (dataset["type"] && dataset["type"].IsScalar() && dataset["type"].Scalar() == "sampled") {
    if (!dataset["dataset"])
      throw ConfigError(path + ".dataset", "a `sampled` dataset (Fast-LLM before 0.4) needs the dataset it wraps");
    for (const auto& field : dataset) {
      const std::string key = field.first.as<std::string>();
      if (key != "type" && key != "dataset" && key != "sampling")
        throw ConfigError(path + "." + key, "unknown field of a `sampled` dataset (Fast-LLM before 0.4)");
    }
    const std::string dropped =
        dataset["sampling"] ? fmt::format("; its sampling {} no longer applies per dataset (data.seed and "
                                          "data.shuffle apply to every dataset)",
                                          flow(dataset["sampling"]))
                            : "";
    warnings.push_back(fmt::format("`{}: {{type: sampled, ...}}` is Fast-LLM's spelling before 0.4: read as the "
                                   "dataset it wraps{}",
                                   path, dropped));
    return unwrap_sampled(dataset["dataset"], path, warnings);
  }
  YAML::Node result = YAML::Clone(dataset);
  for (const auto& field : dataset) {
    const std::string key = field.first.as<std::string>();
    if (key == "dataset" || key == "datasets")
      result[key] = unwrap_sampled(field.second, path + "." + key, warnings);
  }
  return result;
}

// Every `fim` dataset in a dataset tree without its own tokenizer gets `tokenizer`; returns how many did.
int give_fim_datasets(YAML::Node dataset, const YAML::Node& tokenizer) {
  int count = 0;
  if (dataset && dataset.IsSequence()) {
    for (size_t i = 0; i < dataset.size(); ++i) count += give_fim_datasets(dataset[i], tokenizer);
    return count;
  }
  if (!is_map(dataset)) return 0;
  if (dataset["type"] && dataset["type"].IsScalar() && dataset["type"].Scalar() == "fim" && !dataset["tokenizer"]) {
    dataset["tokenizer"] = YAML::Clone(tokenizer);
    ++count;
  }
  for (const char* key : {"dataset", "datasets"})
    if (dataset[key]) count += give_fim_datasets(dataset[key], tokenizer);
  return count;
}

// data.tokenizer: before 0.4 the one tokenizer of lm_eval evaluators and fim datasets, which now have their own.
void migrate_data_tokenizer(YAML::Node tree, std::vector<std::string>& warnings) {
  YAML::Node data = tree["data"];
  if (!is_map(data) || !static_cast<const YAML::Node&>(data)["tokenizer"]) return;
  const YAML::Node tokenizer = YAML::Clone(data["tokenizer"]);
  std::vector<std::string> receivers;
  if (is_map(tree["training"]) && is_map(tree["training"]["evaluators"]))
    for (auto entry : tree["training"]["evaluators"]) {
      YAML::Node evaluator = entry.second;
      if (is_map(evaluator) && evaluator["type"] && evaluator["type"].IsScalar() &&
          evaluator["type"].Scalar() == "lm_eval" && !evaluator["tokenizer"]) {
        evaluator["tokenizer"] = YAML::Clone(tokenizer);
        receivers.push_back("training.evaluators." + entry.first.as<std::string>() + ".tokenizer");
      }
    }
  if (is_map(data["datasets"]))
    for (auto entry : data["datasets"])
      if (int count = give_fim_datasets(entry.second, tokenizer); count > 0)
        receivers.push_back(fmt::format("the tokenizer of {} fim dataset(s) in data.datasets.{}", count,
                                        entry.first.as<std::string>()));
  data.remove("tokenizer");
  warnings.push_back(fmt::format("`data.tokenizer: {}` is Fast-LLM's spelling before 0.4; {}", flow(tokenizer),
                                 receivers.empty() ? "nothing uses it since (lm_eval evaluators and fim datasets "
                                                     "have their own `tokenizer`), so it is ignored"
                                                   : fmt::format("read as {}", fmt::join(receivers, ", "))));
}

}  // namespace

std::vector<std::string> migrate_legacy_config_forms(YAML::Node& tree) {
  std::vector<std::string> warnings;
  if (!is_map(tree)) return warnings;
  if (is_map(tree["training"])) {
    YAML::Node training = tree["training"];
    migrate_evaluations(training, warnings);
    migrate_nested_evaluators(training, warnings);
  }
  if (is_map(tree["data"])) {
    YAML::Node data = tree["data"];
    migrate_data_sampling(data, warnings);
    if (is_map(data["datasets"])) {
      YAML::Node datasets = data["datasets"];
      for (const auto& entry : YAML::Clone(datasets)) {
        const std::string name = entry.first.as<std::string>();
        datasets[name] = unwrap_sampled(entry.second, "data.datasets." + name, warnings);
      }
    }
    migrate_data_tokenizer(tree, warnings);
  }
  return warnings;
}

}  // namespace fast_llm::engine
