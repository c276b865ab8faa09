#include "fast_llm/models/gpt/model_type.h"

#include "fast_llm/models/gpt/config.h"
#include "fast_llm/models/gpt/conversion/huggingface.h"
#include "fast_llm/models/gpt/model.h"

namespace fast_llm::models::gpt {

namespace {

class GPTModelType : public engine::ModelType {
 public:
  std::string_view name() const override { return "gpt"; }

  std::unique_ptr<engine::ModelConfig> make_config() const override { return std::make_unique<GPTModelConfig>(); }

  std::unique_ptr<engine::BaseModel> make_model(const engine::ModelConfig& config) const override {
    return std::make_unique<GPTModel>(dynamic_cast<const GPTModelConfig&>(config).base_model);
  }

  const engine::ExternalCheckpointHandler& external_handler(engine::CheckpointFormat format) const override {
    return huggingface_handler(format);
  }
};

}  // namespace

const engine::ModelType& gpt_model_type() {
  static const GPTModelType type;
  return type;
}

}  // namespace fast_llm::models::gpt
