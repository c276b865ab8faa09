// Field lists of the embeddings, head and language-model configs.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "fast_llm/layers/language_model/config.h"

namespace fast_llm::layers {

using config::Hint;
using config::Visitor;
namespace check = config::check;

void LanguageModelEmbeddingsConfig::visit(Visitor& v) {
  BlockConfig::visit(v);
  v(word_embeddings, "word_embeddings", "Settings of the token embedding table.", Hint::architecture);
  v(position_embeddings, "position_embeddings",
    "Settings of learned absolute position embeddings (positions restart at each document); off unless enabled.",
    Hint::architecture);
  v(vocab_size, "vocab_size", "Number of tokens in the vocabulary: embedding rows and logits.", Hint::architecture,
    check::gt(0));
  v(num_position_embeddings, "num_position_embeddings", "Number of absolute positions, when position embeddings are on.",
    Hint::architecture, check::gt(0));
  v(dropout, "dropout", "Dropout probability on the embeddings.", Hint::feature, check::in_range(0.0, 1.0));
  v(full_precision_residual, "full_precision_residual",
    "Keep the residual stream in the optimization data type rather than the compute data type.", Hint::stability,
    config::not_supported_yet(false, "full-precision residual stream"));
  v(vocab_parallel, "vocab_parallel",
    "With tensor parallelism, split the vocabulary (embeddings, output weights, loss) over the tensor group. "
    "Turn off to split the sequence instead (sequence-tensor parallelism).",
    Hint::performance);
  v(embedding_scale, "embedding_scale", "Factor on the looked-up embeddings (Gemma uses sqrt(hidden_size)).",
    Hint::architecture, check::gt(0.0));
}

void LanguageModelEmbeddingsConfig::derive() {
  if (!position_embeddings.enabled) position_embeddings.enabled = false;
}

// ---------------------------------------------------------------------------------------------------------------
// Head

void LanguageModelHeadConfig::visit(Visitor& v) {
  BlockConfig::visit(v);
  v(normalization, "normalization", "Final normalization before the output projection.", Hint::architecture);
  v(losses, "losses", "Losses by name; empty means one label (cross-entropy) loss named cross_entropy.", Hint::core);
  v(loss_implementation, "loss_implementation",
    "Fuse the combinable losses into one softmax pass (auto, compiled, triton) or compute each separately (per_loss).",
    Hint::expert);
  v(output_weight, "output_weight", "Settings of the output projection; unused when the embeddings are tied.",
    Hint::architecture);
  v(cross_entropy_splits, "cross_entropy_splits",
    "Compute logits and losses in this many chunks of the sequence, to bound the memory of the logits.",
    Hint::feature, check::gt(0));
  v(logits_scale_factor, "logits_scale_factor", "Factor on the output logits (below 1 under muP).", Hint::feature,
    check::ge(0.0));
  v(final_logit_softcap, "final_logit_softcap", "Soft cap of the logits before the losses: cap * tanh(z / cap).",
    Hint::architecture, check::gt(0.0));
  v(prediction_heads, "prediction_heads",
    "Number of tokens predicted at each position (multi-token prediction when above 1).", Hint::architecture,
    check::gt(0), config::not_supported_yet(1, "multi-token prediction"));
  v(prediction_loss_coefficient, "prediction_loss_coefficient",
    "Weight of each prediction head's losses; unset weighs them equally.", Hint::feature);
}

void LanguageModelHeadConfig::derive() {
  if (losses.empty()) losses.emplace(std::string(kDefaultLossName), config::Dynamic<LanguageModelLossConfig>("label"));
}

void LanguageModelHeadConfig::check() const {
  for (const auto& [name, loss] : losses) {
    // Fast-LLM reserves these names for the head total and for the fused loss groups.
    bool reserved = name == kHeadLossName || name == "monolithic";
    if (name.starts_with("monolithic_") && name.size() > 11 &&
        std::all_of(name.begin() + 11, name.end(), [](unsigned char c) { return std::isdigit(c); }))
      reserved = true;
    if (reserved) fail("losses." + name, "this loss name is reserved");
    if (loss_implementation != LossImplementation::per_loss && loss->combinable()) {
      const auto& combinable = static_cast<const CombinableLossConfig&>(loss.get());
      if (combinable.use_triton)
        fail(fmt::format("losses.{}.use_triton", name),
             "has no effect when losses are fused; set head.loss_implementation to per_loss or leave it unset");
    }
  }
  for (const auto& [name, loss] : losses)
    if (loss.is<GspoLossConfig>() && cross_entropy_splits != 1)
      fail("cross_entropy_splits", fmt::format("must be 1 with the gspo loss '{}': its per-document ratio needs each "
                                               "document's labels in one chunk",
                                               name));
  if (prediction_loss_coefficient && int(prediction_loss_coefficient->size()) != prediction_heads)
    fail("prediction_loss_coefficient", fmt::format("must have one entry per prediction head ({}), got {}",
                                                    prediction_heads, prediction_loss_coefficient->size()));
}

// ---------------------------------------------------------------------------------------------------------------
// Language model

void LanguageModelConfig::visit(Visitor& v) {
  BlockConfig::visit(v);
  v(decoder, "decoder", "The sequence of decoder blocks.", Hint::architecture);
  v(embeddings, "embeddings", "The input embeddings.", Hint::architecture);
  v(head, "head", "The output head: final norm, output projection and losses.", Hint::architecture);
  v(tied_embedding_weight, "tied_embedding_weight", "Use the word embedding table as the output projection.",
    Hint::architecture);
  v(hidden_size, "hidden_size", "Width of the residual stream.", Hint::architecture, check::gt(0));
}

}  // namespace fast_llm::layers
