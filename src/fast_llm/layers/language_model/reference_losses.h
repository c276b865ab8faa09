// The head's losses that read a reference model's logits (Fast-LLM's `distillation` and `dpo` loss types, reference/
// fast-llm.md §4), kept apart from the label losses so the head runs them with a few calls:
//   distillation  kernels/distillation.h's loss on each chunk of logits against the teacher's logits of the same rows
//                 (MicroBatch::reference_logits[reference_model]), masked by the labels, computed by the head's
//                 cross-entropy pass as its distillation term (distillation_term); logged under its name as
//                 sum / labels in the step (a per-label loss, as the label loss)
//   dpo           kernels/dpo.h on the micro-batch's logits (one chunk: cross_entropy_splits must be 1), the
//                 reference's log-probabilities of the labels (MicroBatch::reference_label_log_probabilities
//                 [reference_model]) and the preference pairs of the micro-batch; logged under its name as
//                 the mean over the preference pairs of the step (LossNormalization::normalized), and added to the
//                 head's total as that mean times the labels in the step, so that the total divided by the labels is
//                 sum(weight * each loss's logged value), Fast-LLM's lm_head_loss
// At most one loss of each type; the head refuses the rest. The gradient of the logits (training) is the sum of both
// losses', scaled as the engine scales the label loss (1 / labels in the step, or 1 / pairs for dpo, times the loss
// weight and the fp16 loss scale).
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "fast_llm/kernels/cross_entropy.h"
#include "fast_llm/kernels/distillation.h"
#include "fast_llm/kernels/dpo.h"
#include "fast_llm/layers/context.h"
#include "fast_llm/layers/language_model/config.h"

namespace fast_llm::layers {

class ReferenceLosses {
 public:
  // Takes `loss` when it is a distillation or dpo loss (false otherwise); `path` names it in errors.
  bool take(const std::string& name, const LanguageModelLossConfig& loss, const LanguageModelHeadConfig& head,
            const std::string& path);
  bool empty() const { return !distillation_ && !dpo_; }
  bool has_distillation() const { return distillation_.has_value(); }
  bool has_dpo() const { return dpo_.has_value(); }

  // The losses' sums over one micro-batch: (1) scalars in the dtype of the context's loss sums.
  struct Sums {
    Tensor distillation, dpo;
  };
  Sums zero_sums(Device device, Stream stream) const;

  // The head computes `rows` rows: every row of the micro-batch, or its loss rows only (LanguageModelHead::
  // computes_loss_rows_only); the reference models' logits have the same rows.
  // dpo on all `rows` rows, whose logits (rows, vocab) are read only, with their `labels` and the preference pairs
  // `row_pairs` in their numbering: it writes no gradient but adds its per-row gradient coefficients (kernels/dpo.h) to
  // `row_coefficients` (rows), for the head's cross-entropy pass; in training they must be given. Only with has_dpo()
  // (the distillation is distillation_term's).
  void dpo_forward_backward(const LayerContext& context, const Tensor& logits, const Tensor& labels,
                            std::span<const kernels::PreferencePair> row_pairs, int64_t rows, Sums& sums,
                            double logits_scale_factor, Tensor* row_coefficients) const;

  // The distillation term of the head's cross-entropy pass over rows [begin, end) of its `rows` rows
  // (kernels/cross_entropy.h): the teacher's logits of those rows are put in `teacher`, which must outlive the term,
  // and its loss goes to sums.distillation. Only with has_distillation().
  kernels::CrossEntropyDistillation distillation_term(const LayerContext& context, int64_t begin, int64_t end,
                                                      int64_t rows, Tensor& teacher, Sums& sums) const;

  // Adds the sums into context.losses under the losses' names and, weighted, under the head's total `total_name`.
  void add_losses(const LayerContext& context, const Sums& sums, const std::string& total_name) const;

 private:
  struct Distillation {
    std::string name, reference_model;
    double weight = 1.0, temperature = 1.0;
    kernels::DistillationLossType loss_type = kernels::DistillationLossType::cross_entropy;
  };
  struct Dpo {
    std::string name, reference_model;
    double weight = 1.0, beta = 1.0;
  };
  // Rows [begin, end) of the head's `rows` rows of a reference model's output (`outputs`: one of MicroBatch's maps of
  // them, `what` naming it in errors).
  static Tensor reference_rows(const std::map<std::string, Tensor>& outputs, std::string_view what,
                               const std::string& loss, const std::string& model, int64_t begin, int64_t end,
                               int64_t rows);

  std::optional<Distillation> distillation_;
  std::optional<Dpo> dpo_;
};

}  // namespace fast_llm::layers
