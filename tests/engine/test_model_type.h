// The test model (test_model.h) as a model type of the engine (engine/model_type.h), so that the trainer and the
// checkpoint engine run on a model that is not GPT: named `test`, its base-model config holds its sizes (architecture
// fields), and it has no external checkpoint format.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <string_view>

#include "engine/test_model.h"
#include "fast_llm/config/config.h"
#include "fast_llm/core/error.h"
#include "fast_llm/engine/model_type.h"

namespace fast_llm::testing {

struct TestBaseModelConfig : config::Config {
  int64_t vocab_size = 20;
  int64_t hidden_size = 4;
  int num_linear = 2;
  void visit(config::Visitor& v) override {
    v(vocab_size, "vocab_size", "Rows of the embedding table.", config::Hint::architecture,
      config::check::gt(int64_t(0)));
    v(hidden_size, "hidden_size", "Width of every layer.", config::Hint::architecture, config::check::gt(int64_t(0)));
    v(num_linear, "num_linear", "Linear layers between the embedding and the head.", config::Hint::architecture,
      config::check::ge(0));
  }
};

struct TestModelConfig : engine::ModelConfig {
  TestBaseModelConfig base_model;
  void visit(config::Visitor& v) override {
    v(base_model, "base_model", "The test model's sizes.", config::Hint::core);
    v(multi_stage, "multi_stage", "Stages and ZeRO sharding.", config::Hint::core);
    v(distributed, "distributed", "Process layout, data types and seeds.", config::Hint::core);
  }
  const engine::ModelType& model_type() const override;
  config::Config& base_model_config() override { return base_model; }
  const config::Config& base_model_config() const override { return base_model; }
};

class TestModelType : public engine::ModelType {
 public:
  std::string_view name() const override { return "test"; }
  std::unique_ptr<engine::ModelConfig> make_config() const override { return std::make_unique<TestModelConfig>(); }
  std::unique_ptr<engine::BaseModel> make_model(const engine::ModelConfig& config) const override {
    const TestBaseModelConfig& sizes = dynamic_cast<const TestModelConfig&>(config).base_model;
    return std::make_unique<TestModel>(sizes.vocab_size, sizes.hidden_size, sizes.num_linear);
  }
  const engine::ExternalCheckpointHandler& external_handler(engine::CheckpointFormat format) const override {
    throw NotSupportedError("test", fmt::format("the test model has no {} format", config::enum_name(format)));
  }
};

inline const engine::ModelType& TestModelConfig::model_type() const {
  static const TestModelType type;
  return type;
}

}  // namespace fast_llm::testing
