// Configuration forms of Fast-LLM before its 0.4 release, which its own documentation (quick-start, recipes, data
// configuration) still shows and Fast-LLM 0.4 rejects: each is rewritten into the current form before the config is
// read, with a warning that shows the current spelling, so a user following those documents gets a running job and
// `--validate` prints the migrated config. Forms:
//   training.validation: {interval, offset, iterations}        -> training.evaluators.validation: {type: loss, ...}
//   training.evaluations: {NAME: {interval, offset, iterations}} -> training.evaluators.NAME: {type: loss, ...}
//   training.evaluators.NAME: {interval, offset, evaluator: {type, iterations, dataset_name, ...}}
//                                                               -> training.evaluators.DATASET: {type, interval, ...}
//                                                                  (0.4 evaluates data.datasets.<evaluator name>)
//   data.sampling: {shuffle, seed, gpu}                         -> data.shuffle, data.seed, data.gpu
//   {type: sampled, dataset: D, sampling: {...}} (any dataset)  -> D; 0.4 has no per-dataset sampling, so the
//                                                                  warning says which settings no longer apply
//   data.tokenizer                                              -> the `tokenizer` of each lm_eval evaluator and
//                                                                  fim dataset that has none
// A form that cannot be migrated without changing its meaning (the old and the new spelling both present with
// different values) is a ConfigError naming both paths.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace fast_llm::engine {

// Rewrites `tree` (a whole trainer config) in place; returns one warning per migrated form.
std::vector<std::string> migrate_legacy_config_forms(YAML::Node& tree);

}  // namespace fast_llm::engine
