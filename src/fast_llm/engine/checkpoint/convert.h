// `fast-llm convert <model>`: a checkpoint from one format to another (Fast-LLM's ConvertConfig), any format the model
// type reads (loading.h) to any it writes (saving.h), holding one tensor (or one output file) at a time.
//
// It never destroys data: the output is written into a temporary folder and published when complete, `ok` last
// (directory.h); an output folder that is the input, lies inside it or holds it is refused (the identity of the
// folders is compared, so links do not hide it); on failure the output folder is left as it was.
#pragma once

#include <optional>

#include "fast_llm/config/config.h"
#include "fast_llm/engine/checkpoint/config.h"
#include "fast_llm/engine/model_type.h"

namespace fast_llm::engine {

struct ConvertConfig : config::Config {
  CheckpointLoadConfig input;
  CheckpointSaveConfig output;
  bool use_cpu = false;
  bool exist_ok = false;
  std::optional<int> layers_per_step;
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

// Converts `config.input`, a checkpoint of a `model_type` model, to `config.output`.
void convert(const ConvertConfig& config, const ModelType& model_type);

}  // namespace fast_llm::engine
