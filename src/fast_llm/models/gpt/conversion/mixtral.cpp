// The Mixtral format (`mixtral`, MixtralForCausalLM): Mistral (no biases, a sliding window, default none) whose MLP
// is a mixture of experts (`type: moe`, gated, top-k softmax routing renormalised over the chosen experts, no shared
// experts).
//
// config.json: num_local_experts <-> experts, num_experts_per_tok <-> experts_per_token, router_aux_loss_coef <->
// auxiliary_loss_coefficient, router_jitter_noise <-> jitter_eps (training only, and not the same noise: transformers
// scales every element of the MLP input, ours each token's router logits; the model outside training is the same),
// output_router_logits (what the Hugging Face model returns) ignored. MixtralConfig's defaults differ from Mistral's:
// rms_norm_eps 1e-5, rope_theta 1e6, no sliding window.
//
// Weights: `block_sparse_moe.gate` is the router; each expert e's `w1` (gate) and `w3` (up), [I, H], are expert e's
// rows of layer_1 ([w1; w3]), and its `w2` [H, I] transposed is expert e's rows of layer_2. This per-expert spelling is
// the one on the hub and the one both transformers 4 and 5 write and read: transformers 5 fuses the experts in memory
// (`mlp.gate`, `mlp.experts.gate_up_proj` [E, 2I, H] gate rows first, `down_proj` [E, H, I]) through its conversion
// mapping on load and reverts to these names on save, so exports write them. Importing also reads the fused names
// (a checkpoint saved while that revert was missing), recognised by a `mlp.experts.gate_up_proj` tensor.
#include <fmt/format.h>

#include <algorithm>

#include "fast_llm/models/gpt/conversion/llama.h"

namespace fast_llm::models::gpt {

namespace {

constexpr std::string_view kMlp = "decoder.block.mlp";

std::string mlp_field(std::string_view field) { return fmt::format("{}.{}", kMlp, field); }

std::vector<HfConfigEntry> mixtral_config() {
  // MixtralConfig's defaults.
  std::vector<HfConfigEntry> config = llama_family_config(
      {.vocab_size = 32000, .max_position_embeddings = 4096 * 32, .rms_norm_eps = 1e-5, .rope_theta = 1e6});
  // The family's MLP is dense: ours is a mixture of experts.
  std::erase_if(config, [](const HfConfigEntry& entry) {
    return entry.kind == HfConfigEntry::Kind::constant && entry.paths.front() == mlp_field("type");
  });
  config.push_back(hf_constant_field(mlp_field("type"), "moe"));
  config.push_back(llama_head_dim_entry());
  config.push_back(hf_constant_field("decoder.block.mixer.add_linear_biases", false));
  config.push_back(hf_constant_field(mlp_field("add_linear_biases"), false));
  config.push_back(hf_constant_field(mlp_field("shared_experts"), 0));
  config.push_back(hf_constant_field(mlp_field("routing"), "aux_loss"));
  config.push_back(hf_constant_field(mlp_field("router_input_scale"), 1.0));
  config.push_back(hf_rename("num_local_experts", {mlp_field("experts")}, HfValueType::integer, 8));
  config.push_back(hf_rename("num_experts_per_tok", {mlp_field("experts_per_token")}, HfValueType::integer, 2));
  config.push_back(hf_rename("router_aux_loss_coef", {mlp_field("auxiliary_loss_coefficient")}, HfValueType::number,
                             0.001));
  config.push_back(hf_rename("router_jitter_noise", {mlp_field("jitter_eps")}, HfValueType::number, 0.0));
  // Whether the Hugging Face model also returns the router logits (and adds the auxiliary loss to its own loss).
  config.push_back(hf_ignored({"output_router_logits"}));
  config.push_back(sliding_window_entry(std::nullopt));
  return config;
}

std::vector<HfWeightEntry> mixtral_weights() {
  using Kind = HfWeightEntry::Kind;
  std::vector<HfWeightEntry> weights = llama_family_weights();
  std::erase_if(weights, [](const HfWeightEntry& entry) { return entry.parameter.starts_with("decoder.{}.mlp."); });
  weights.push_back({Kind::copy, "decoder.{}.mlp.router.weight", {"model.layers.{}.block_sparse_moe.gate.weight"}});
  weights.push_back({Kind::expert_concatenate,
                     "decoder.{}.mlp.layer_1.weight",
                     {"model.layers.{}.block_sparse_moe.experts.{e}.w1.weight",
                      "model.layers.{}.block_sparse_moe.experts.{e}.w3.weight"}});
  weights.push_back({Kind::expert_transpose,
                     "decoder.{}.mlp.layer_2.weight",
                     {"model.layers.{}.block_sparse_moe.experts.{e}.w2.weight"}});
  return weights;
}

// transformers 5's in-memory spelling: the router under `mlp.gate`, the experts stacked.
std::vector<HfWeightEntry> mixtral_fused_weights() {
  using Kind = HfWeightEntry::Kind;
  std::vector<HfWeightEntry> weights = llama_family_weights();
  std::erase_if(weights, [](const HfWeightEntry& entry) { return entry.parameter.starts_with("decoder.{}.mlp."); });
  weights.push_back({Kind::copy, "decoder.{}.mlp.router.weight", {"model.layers.{}.mlp.gate.weight"}});
  weights.push_back(
      {Kind::expert_stacked, "decoder.{}.mlp.layer_1.weight", {"model.layers.{}.mlp.experts.gate_up_proj"}});
  weights.push_back(
      {Kind::expert_stacked_transpose, "decoder.{}.mlp.layer_2.weight", {"model.layers.{}.mlp.experts.down_proj"}});
  return weights;
}

}  // namespace

const HfFormat& mixtral_format() {
  static const HfFormat format{.format = engine::CheckpointFormat::mixtral,
                               .model_type = "mixtral",
                               .architecture = "MixtralForCausalLM",
                               .config = mixtral_config(),
                               .weights = mixtral_weights(),
                               .ignored_tensors = llama_family_ignored_tensors(),
                               .import_spelling = mixtral_fused_weights(),
                               .import_spelling_marker = "model.layers.{}.mlp.experts.gate_up_proj"};
  return format;
}

}  // namespace fast_llm::models::gpt
