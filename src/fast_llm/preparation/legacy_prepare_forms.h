// Fast-LLM's preparation configs before its 0.4 release, still shown by its documentation (quick-start, recipes):
//   loading_workers / tokenize_workers / saving_workers  ->  num_workers (the largest of them)
//   dataset.field                                         ->  dataset.source_schema.text
//   dataset.loss_masking_spans                            ->  dataset.source_schema.loss_masking_spans
//   dataset.chosen_text / dataset.rejected_text           ->  dataset.source_schema.chosen_span / rejected_span
// Fast-LLM 0.4 rejects these; here each is rewritten in the YAML tree before the config is read, with one warning per
// form that shows the current spelling, so `--validate` prints the migrated config. A form set together with its
// current spelling to a different value is an error naming both.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace fast_llm::preparation {

// Rewrites the pre-0.4 forms of a `prepare gpt_memmap` config tree in place; returns the warnings.
std::vector<std::string> migrate_legacy_preparation_forms(YAML::Node& tree);

}  // namespace fast_llm::preparation
