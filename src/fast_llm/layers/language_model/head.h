// Language-model head (Fast-LLM's LanguageModelHead), the last Layer: final norm, output projection and losses.
//
// Forward, on the residual stream x (tokens, hidden):
//   h = final_norm(x)
//   for each of `cross_entropy_splits` chunks of tokens (so the full (tokens, vocab) logits never exist):
//     logits = h_chunk W^T                                   (chunk, vocab), W = head.output_weights [vocab, hidden]
//                                                           or the tied embeddings.word_embeddings_weight
//     cross_entropy_forward_backward: label loss and z-loss summed into the context's losses, gradient of the logits
//       (weights: loss weight * context.loss_gradient_scale; logits_scale_factor = head's * loss's; final softcap)
//     grad_h[chunk] = grad_logits W;  grad W += grad_logits^T h_chunk
// so the output weight gradient is accumulated during FORWARD (training only), and backward only runs the final norm
// backward on grad_h and returns the gradient of x; grad_output is ignored. Forward returns an empty tensor.
// Losses: each configured loss adds its unweighted sum over the micro-batch's labels under its configured name (e.g.
// `cross_entropy`, `z_loss`), and the head adds sum(weight * loss) under `lm_head_loss` (Fast-LLM's head total); the
// engine divides by the labels in the step. Supported: one `label` loss, one `z_loss`, one policy-gradient loss
// (`grpo` or `gspo`, policy_gradient_loss.h), one `distillation` and one `dpo` loss (reference_losses.h: they read
// reference models' logits), all with the same logits_scale_factor. On each chunk dpo runs first, then
// the policy loss, then one cross-entropy pass (kernels/cross_entropy.h), which overwrites the logits with the gradient
// in place. dpo, grpo and gspo read the logits for their statistics only: their gradient is c_r (softmax - onehot)
// dz/dlogits per row, so in training they add their coefficients c_r to a (chunk) buffer of row weights and the
// cross-entropy pass (with label weight 0 when no label loss is configured) writes their gradient together with the
// label and z-losses': no (chunk, vocab) buffer and no extra pass over the logits. The distillation loss is that
// pass's distillation term (kernels/cross_entropy.h: the teacher's rows are read beside the logits, its loss and
// gradient come out of the same pass), so it has neither a pass nor a buffer of its own either.
// Tensor parallelism, with `vocab_parallel`: each rank holds rows [rank * vocab / size, (rank + 1) * vocab / size) of
// the output weights (or of the tied word embeddings) and computes the logits of its slice of the vocabulary; the label
// and z-losses come from the vocabulary-parallel passes (kernels/vocab_parallel_cross_entropy.h: row maxima
// all-reduced, then the sums of exponentials and the label's logit, from the rank that holds it, all-reduced), so the
// full logits never exist; each rank's gradient of the normalised input is a partial sum, all-reduced before the final
// norm's backward. Without it the output weights are whole on every rank, which computes the whole head. With
// sequence-tensor parallelism forward first gathers every rank's rows of the input and backward returns this rank's
// rows of the input gradient. The losses that read reference models or policy data are refused.
// Loss rows: when computes_loss_rows_only (below), the chunks cover only the loss rows (loss_row_rule; gathered from h
// by MicroBatch::loss_rows, with their labels and preference pairs), and backward scatters their gradient back (a row
// without a loss gets zero); every loss and gradient is the same as on every row. When the block before computed its
// output on the loss rows only (DecoderBlock::computes_output_on_loss_rows), the input is (loss rows, hidden) and
// backward returns the gradient of those rows.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "fast_llm/layers/common/normalization.h"
#include "fast_llm/layers/common/tensor_parallel.h"
#include "fast_llm/layers/language_model/config.h"
#include "fast_llm/layers/loss_row_rule.h"
#include "fast_llm/tensor/tensor.h"
#include "fast_llm/layers/language_model/policy_gradient_loss.h"
#include "fast_llm/layers/language_model/reference_losses.h"
#include "fast_llm/layers/layer.h"
#include "fast_llm/layers/saved_per_micro_batch.h"

namespace fast_llm::layers {

class LanguageModelHead : public Layer {
 public:
  // `tied_output_weights`: the word embeddings Parameter when the embeddings are tied (not declared again here), or
  // null to declare `<name>.output_weights`.
  LanguageModelHead(std::string name, const LanguageModelHeadConfig& config, int64_t hidden_size, int64_t vocab_size,
                    double lr_scale, Parameter* tied_output_weights = nullptr, TensorParallelism tensor_parallel = {},
                    bool vocab_parallel = false);

  Tensor forward(LayerContext& context, const Tensor& input) override;
  Tensor backward(LayerContext& context, const Tensor& grad_output) override;
  bool accumulates_gradients_in_forward() const override { return true; }
  std::vector<Parameter*> borrowed_parameters() const override {
    if (output_weights_tied_) return {output_weights_};
    return {};
  }
  // Counts the output projection's gemms on the rows the head computes (computes_loss_rows_only).
  double flops(const MicroBatch& batch) const override;

  // Whether the head computes its logits, losses and gradients on the loss rows of `batch` only (MicroBatch::
  // loss_rows, found by loss_row_rule), gathered from the normalised input, rather than on every row. The other rows
  // add nothing to any of its losses but the policy-gradient ones, so the result is the same. Yes when the batch
  // carries its loss rows (the batch uploader sets them; sequence pieces do not), some but not all rows carry a loss,
  // and the head has no tensor parallelism and no policy-gradient loss (grpo / gspo read per-token data and documents
  // that would need the same re-indexing). The reference models ask it too, so their logits have the same rows.
  bool computes_loss_rows_only(const MicroBatch& batch) const;
  // Which rows carry a loss of this head: the labelled rows inside a preference span when dpo is its only loss (the
  // prompts add nothing to it), else every labelled row. The batch uploader finds the loss rows by it.
  LossRowRule loss_row_rule() const;
  // Off: every row is computed always (tests compare both ways).
  void enable_loss_rows_only(bool enabled) { loss_rows_only_enabled_ = enabled; }

  // Generation: the logits of rows of the residual stream, (rows, hidden) -> (rows, vocab) in fp32 (fp64 for fp64
  // compute): final norm, output projection, times logits_scale_factor; the final softcap (final_logit_softcap) is the
  // caller's to apply. No loss, nothing saved.
  Tensor logits(const Tensor& input, Stream stream);
  std::optional<double> final_logit_softcap() const { return softcap_; }

  Parameter& output_weights() { return *output_weights_; }
  Normalization& final_norm() { return final_norm_; }
  int64_t matmul_weight_count() const { return local_vocab_size_ * hidden_size_; }

 private:
  struct Loss {
    std::string name;
    double weight = 1.0;
  };
  struct Saved {
    Normalization::Saved final_norm;
    // Gradient of the final norm output: (tokens, hidden), or with loss_rows_only (loss rows + 1, hidden), the loss
    // rows' then a row of zeros (without it with input_on_loss_rows).
    Tensor grad_normalized;
    bool loss_rows_only = false;
    bool input_on_loss_rows = false;  // the input was (loss rows, hidden)
  };

  int64_t hidden_size_;
  int64_t vocab_size_;
  int cross_entropy_splits_;
  double logits_scale_factor_;
  std::optional<double> softcap_;
  std::optional<Loss> label_loss_;
  std::optional<Loss> z_loss_;
  std::optional<PolicyGradientLoss> policy_loss_;
  ReferenceLosses reference_losses_;
  Normalization final_norm_;
  Parameter* output_weights_ = nullptr;
  bool output_weights_tied_ = false;  // the word embeddings', declared by the embedding layer
  TensorParallelism tensor_parallel_;
  bool vocab_parallel_ = false;
  int64_t vocab_begin_ = 0;   // the first row of this rank's slice of the output weights
  int64_t local_vocab_size_;  // rows of the output weights this rank holds
  bool loss_rows_only_enabled_ = true;
  SavedPerMicroBatch<Saved> saved_;
};

}  // namespace fast_llm::layers
