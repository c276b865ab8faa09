// Decoder blocks (`block:` of a decoder, `type: decoder`), as Fast-LLM's DecoderBlockConfig, and the `stochastic`
// mixer that samples one of several mixers per step (supernet training).
//
// Forward (as Fast-LLM):
//   x += dropout(post_mixer_normalization(mixer(pre_mixer_normalization(x))))
//   x += dropout(post_mlp_normalization(mlp(pre_mlp_normalization(x))))
//   x *= output_scale (when enabled)
// where an unset pre-normalization uses `normalization`.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fast_llm/config/config.h"
#include "fast_llm/layers/attention/config.h"
#include "fast_llm/layers/block_config.h"
#include "fast_llm/layers/common/normalization_config.h"
#include "fast_llm/layers/common/parameter_config.h"
#include "fast_llm/layers/mlp/config.h"

namespace fast_llm::layers {

struct DecoderBlockConfig : BlockConfig {
  config::Dynamic<MixerConfig> mixer;
  config::Dynamic<MlpBaseConfig> mlp;
  config::Dynamic<NormalizationConfig> normalization;
  std::optional<config::Dynamic<NormalizationConfig>> pre_mixer_normalization;
  std::optional<config::Dynamic<NormalizationConfig>> pre_mlp_normalization;
  std::optional<config::Dynamic<NormalizationConfig>> post_mixer_normalization;
  std::optional<config::Dynamic<NormalizationConfig>> post_mlp_normalization;
  OptionalParameterConfig output_scale;
  double dropout = 0.0;
  std::optional<std::string> distillation_model;
  double distillation_loss_weight = 1.0;

  DecoderBlockConfig();
  void visit(config::Visitor& v) override;

  // The normalization before the mixer (norm_1) and before the MLP (norm_2).
  const NormalizationConfig& mixer_normalization() const {
    return pre_mixer_normalization ? pre_mixer_normalization->get() : normalization.get();
  }
  const NormalizationConfig& mlp_normalization() const {
    return pre_mlp_normalization ? pre_mlp_normalization->get() : normalization.get();
  }

 protected:
  void derive() override;
};

enum class StochasticMixerSamplingStrategy { uniform, weighted, full_layout };

struct StochasticMixerConfig : MixerConfig {
  std::string type = "stochastic";
  std::optional<std::map<std::string, config::Dynamic<MixerConfig>>> mixers;  // required, non-empty
  StochasticMixerSamplingStrategy sampling_strategy = StochasticMixerSamplingStrategy::uniform;
  std::optional<std::map<std::string, double>> sampling_weights;
  // Unset: Fast-LLM takes the first mixer of the file; our maps are ordered by name, so it is left unset here.
  std::optional<std::string> main_mixer_name;
  std::vector<std::vector<std::string>> predefined_layouts;
  std::vector<double> predefined_layout_probabilities;
  // Decimal digits: Fast-LLM's default is a prime above 2^64.
  std::string seed_shift = "501974169931277706872159392843";
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

}  // namespace fast_llm::layers

template <>
struct fast_llm::config::EnumNames<fast_llm::layers::StochasticMixerSamplingStrategy> {
  using E = fast_llm::layers::StochasticMixerSamplingStrategy;
  static constexpr std::array<std::pair<E, std::string_view>, 3> values{
      {{E::uniform, "uniform"}, {E::weighted, "weighted"}, {E::full_layout, "full_layout"}}};
};
