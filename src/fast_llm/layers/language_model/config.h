// The language model (Fast-LLM's LanguageModelConfig): embeddings -> decoder (a block sequence) -> head.
//
// Defaults are Fast-LLM's, including the surprising ones: hidden_size 1024, vocab_size 49152, untied output weights,
// one `cross_entropy` label loss when `head.losses` is empty (filled in by derive()).
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fast_llm/config/config.h"
#include "fast_llm/layers/block_config.h"
#include "fast_llm/layers/block/sequence_config.h"
#include "fast_llm/layers/common/normalization_config.h"
#include "fast_llm/layers/common/parameter_config.h"
#include "fast_llm/layers/language_model/loss_config.h"

namespace fast_llm::layers {

struct LanguageModelEmbeddingsConfig : BlockConfig {
  ParameterConfig word_embeddings;
  OptionalParameterConfig position_embeddings;  // off unless enabled
  int vocab_size = 49152;
  int num_position_embeddings = 2048;
  double dropout = 0.0;
  bool full_precision_residual = false;
  bool vocab_parallel = true;
  double embedding_scale = 1.0;
  void visit(config::Visitor& v) override;

 protected:
  void derive() override;
};

// How the head's losses are computed: `auto`/`compiled`/`triton` fuse the combinable losses into one softmax pass
// (grouped by logits_scale_factor); `per_loss` gives each loss its own.
enum class LossImplementation { auto_, compiled, triton, per_loss };

struct LanguageModelHeadConfig : BlockConfig {
  // Loss name Fast-LLM reserves for the head's total.
  static constexpr std::string_view kHeadLossName = "lm_head_loss";
  // Name given to the default loss.
  static constexpr std::string_view kDefaultLossName = "cross_entropy";

  config::Dynamic<NormalizationConfig> normalization;
  std::map<std::string, config::Dynamic<LanguageModelLossConfig>> losses;
  LossImplementation loss_implementation = LossImplementation::auto_;
  ParameterConfig output_weight;
  int cross_entropy_splits = 1;
  double logits_scale_factor = 1.0;
  std::optional<double> final_logit_softcap;
  int prediction_heads = 1;
  std::optional<std::vector<double>> prediction_loss_coefficient;
  void visit(config::Visitor& v) override;

 protected:
  void derive() override;
  void check() const override;
};

struct LanguageModelConfig : BlockConfig {
  config::Dynamic<BlockSequenceConfig> decoder;
  LanguageModelEmbeddingsConfig embeddings;
  LanguageModelHeadConfig head;
  bool tied_embedding_weight = false;
  int hidden_size = 1024;
  void visit(config::Visitor& v) override;
};

}  // namespace fast_llm::layers

template <>
struct fast_llm::config::EnumNames<fast_llm::layers::LossImplementation> {
  using E = fast_llm::layers::LossImplementation;
  static constexpr std::array<std::pair<E, std::string_view>, 4> values{
      {{E::auto_, "auto"}, {E::compiled, "compiled"}, {E::triton, "triton"}, {E::per_loss, "per_loss"}}};
};
