// Field lists of the decoder block and stochastic mixer configs.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "fast_llm/layers/block/config.h"
#include "fast_llm/layers/common/unsupported_type.h"

namespace fast_llm::layers {

using config::Hint;
using config::Visitor;
namespace check = config::check;

FLM_REGISTER_CONFIG(BlockConfig, DecoderBlockConfig, "decoder");

DecoderBlockConfig::DecoderBlockConfig() { output_scale.unsupported_when_enabled = "learned block output scale"; }

void DecoderBlockConfig::visit(Visitor& v) {
  BlockConfig::visit(v);
  v(mixer, "mixer", "The token mixer (attention by default).", Hint::architecture);
  v(mlp, "mlp", "The feed-forward layer.", Hint::architecture);
  v(normalization, "normalization", "Normalization before the mixer and before the MLP, unless set separately below.",
    Hint::architecture);
  v(pre_mixer_normalization, "pre_mixer_normalization", "Normalization before the mixer; unset uses `normalization`.",
    Hint::architecture);
  v(pre_mlp_normalization, "pre_mlp_normalization", "Normalization before the MLP; unset uses `normalization`.",
    Hint::architecture);
  v(post_mixer_normalization, "post_mixer_normalization",
    "Normalization of the mixer output before the residual addition. Unset: none.", Hint::architecture,
    config::not_supported_yet(std::optional<config::Dynamic<NormalizationConfig>>(), "post-mixer normalization"));
  v(post_mlp_normalization, "post_mlp_normalization",
    "Normalization of the MLP output before the residual addition. Unset: none.", Hint::architecture,
    config::not_supported_yet(std::optional<config::Dynamic<NormalizationConfig>>(), "post-MLP normalization"));
  v(output_scale, "output_scale", "A learned scalar multiplying the block output; off unless enabled.",
    Hint::architecture);
  v(dropout, "dropout", "Dropout probability on the mixer and MLP outputs, before each residual addition.",
    Hint::feature, check::in_range(0.0, 1.0));
  v(distillation_model, "distillation_model",
    "Reference model whose mixer outputs this block is trained to match (activation distillation). Unset: none.",
    Hint::feature);
  v(distillation_loss_weight, "distillation_loss_weight", "Weight of the activation distillation loss.", Hint::feature,
    check::ge(0.0));
}

void DecoderBlockConfig::derive() {
  if (!output_scale.enabled) output_scale.enabled = false;
}

// ---------------------------------------------------------------------------------------------------------------
// Stochastic mixer


FLM_REGISTER_CONFIG(MixerConfig, StochasticMixerConfig, "stochastic");

void StochasticMixerConfig::visit(Visitor& v) {
  visit_unsupported_type(v, type, "stochastic mixers");
  MixerConfig::visit(v);
  v(mixers, "mixers", "The mixers to sample from, by name. Required, at least one.", Hint::architecture);
  v(sampling_strategy, "sampling_strategy", "How a mixer is chosen at each training step.", Hint::feature);
  v(sampling_weights, "sampling_weights",
    "Relative probability of each mixer (normalized), for the weighted strategy. Unset: uniform.", Hint::feature);
  v(main_mixer_name, "main_mixer_name",
    "Mixer used for evaluation and the only one exported; receives the pretrained weights. Unset: the first mixer.",
    Hint::architecture);
  v(predefined_layouts, "predefined_layouts",
    "Whole-model layouts (one mixer name per layer, all the same length) sampled with their own probabilities.",
    Hint::feature);
  v(predefined_layout_probabilities, "predefined_layout_probabilities",
    "Probability of each predefined layout, each in [0, 1] with a sum at most 1; the rest goes to sampling_strategy.",
    Hint::feature);
  v(seed_shift, "seed_shift", "Seed shift of the mixer sampling (a non-negative integer of any length).",
    Hint::optional, [](const std::string& digits) -> std::optional<std::string> {
      if (!digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
      return fmt::format("must be a non-negative integer, got '{}'", digits);
    });
}

void StochasticMixerConfig::check() const {
  if (!mixers || mixers->empty()) fail("mixers", "at least one mixer is required");
  if (main_mixer_name && !mixers->contains(*main_mixer_name))
    fail("main_mixer_name", fmt::format("'{}' is not one of the mixers", *main_mixer_name));
  if (sampling_weights) {
    if (sampling_strategy == StochasticMixerSamplingStrategy::full_layout)
      fail("sampling_weights", "cannot be used with the full_layout sampling strategy");
    std::set<std::string> weight_names, mixer_names;
    for (const auto& [name, weight] : *sampling_weights) weight_names.insert(name);
    for (const auto& [name, mixer] : *mixers) mixer_names.insert(name);
    if (weight_names != mixer_names) fail("sampling_weights", "must have exactly one weight per mixer");
    double total = 0;
    for (const auto& [name, weight] : *sampling_weights) {
      if (weight < 0) fail("sampling_weights." + name, fmt::format("must be at least 0, got {}", weight));
      total += weight;
    }
    if (total <= 0) fail("sampling_weights", "must not all be zero");
  }
  if (predefined_layouts.size() != predefined_layout_probabilities.size())
    fail("predefined_layout_probabilities",
         fmt::format("must have one entry per predefined layout ({}), got {}", predefined_layouts.size(),
                     predefined_layout_probabilities.size()));
  double total = 0;
  for (size_t index = 0; index < predefined_layouts.size(); ++index) {
    const auto& layout = predefined_layouts[index];
    if (layout.size() != predefined_layouts.front().size())
      fail(fmt::format("predefined_layouts[{}]", index), "all layouts must have the same length");
    for (const auto& name : layout)
      if (!mixers->contains(name))
        fail(fmt::format("predefined_layouts[{}]", index), fmt::format("'{}' is not one of the mixers", name));
    double probability = predefined_layout_probabilities[index];
    if (probability < 0 || probability > 1)
      fail(fmt::format("predefined_layout_probabilities[{}]", index),
           fmt::format("must be in [0, 1], got {}", probability));
    total += probability;
  }
  if (total > 1) fail("predefined_layout_probabilities", fmt::format("must sum to at most 1, got {}", total));
}

}  // namespace fast_llm::layers
