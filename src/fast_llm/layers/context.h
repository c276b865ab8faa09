// What layers see of the step being run: the micro-batch's inputs on the device, the compute settings, and where
// losses are summed.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fast_llm/core/device.h"
#include "fast_llm/core/dtype.h"
#include "fast_llm/kernels/dpo.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::distributed {
class Communicator;
}  // namespace fast_llm::distributed

namespace fast_llm::layers {

class KeyValueCache;

// Where a micro-batch sits when it is one piece of a longer sequence (engine/schedule/sequence_pieces.h): the sequence
// (one sample of the data) is cut into `splits` consecutive splits run one after the other (schedule.
// micro_batch_splits), and each split into `sequence_data` ranks' parts (model.distributed.sequence_data_parallel);
// this micro-batch holds rows [begin, begin + tokens) of the sequence. Attention is the one layer that looks across
// rows: it attends from these rows to the keys of rows [0, key_end), key_end the end of this split, which it carries
// from the earlier splits' forward and gathers over `sequence_data` (attention/attention.h).
struct SequencePiece {
  int64_t sequence = 0;         // the sequence's index in the step: keys what attention carries between its splits
  int split = 0;                // 0 .. splits - 1, forward in this order and backward in the reverse one
  int splits = 1;
  int64_t sequence_tokens = 0;  // rows of the whole sequence
  int64_t split_tokens = 0;     // rows of one split (all sequence-data ranks' parts): split s is [s, s + 1) * this
  int64_t begin = 0;            // first row of this piece in the sequence
  // Documents of the key rows [0, key_end()) (cut at key_end), on the device, with their host lengths.
  Tensor key_cu_seqlens;
  int64_t key_max_seqlen = 0;
  std::vector<int64_t> key_sequence_lengths;
  // The ranks that hold the other parts of this split (null: one rank). Not owned.
  distributed::Communicator* sequence_data = nullptr;

  int64_t key_end() const { return int64_t(split + 1) * split_tokens; }
};

// A micro-batch whose preference pairs share their prompt rows (data/shared_prompts.h): its rows are the computed
// ones, attention's rows the original ones, and these the maps between them, int64 on the compute device.
struct AttentionRows {
  int64_t count = 0;  // attention rows
  Tensor sources;     // (attention rows) the computed row each attention row takes its values from
  Tensor positions;   // (attention rows) index among the computed rows, or their count for a repeated row
  Tensor kept;        // (rows) the attention row of each computed row
  Tensor repeating;   // (rows) the attention row repeating each computed row, or `count` when none does
};

// One packed micro-batch, on the compute device.
struct MicroBatch {
  int64_t index = 0;        // position in the step's schedule: keys the saved state of layers
  Tensor tokens;            // (tokens) int64
  Tensor labels;            // (tokens) int64, -100 where masked (document starts, padding, loss-masking spans)
  Tensor positions;         // (tokens) int64, position within the document (absolute position embeddings)
  Tensor cu_seqlens;        // (documents + 1) int32, document boundaries for attention
  int64_t max_seqlen = 0;   // longest document
  // The attention segments' lengths (differences of cu_seqlens) on the host, from the data batch before its upload:
  // what FLOP counts need, without reading the device. Empty: cu_seqlens is read instead (CPU batches only).
  std::vector<int64_t> sequence_lengths;
  // Preference data (DPO): this micro-batch's chosen / rejected pairs as rows (data/batch.h), and the pairs in the
  // whole step (as labels_in_step).
  std::vector<kernels::PreferencePair> preference_pairs;
  int64_t preference_pairs_in_step = 0;
  // The rows that carry a loss (label >= 0, or inside a preference span when dpo is the only loss; language_model/
  // loss_rows.h), set by the batch uploader, undefined elsewhere (sequence pieces, generation, hand-built batches): the
  // head may compute only these rows (LanguageModelHead::computes_loss_rows_only). Their count is loss_rows.numel(),
  // known on the host.
  Tensor loss_rows;           // (loss rows) int64, ascending
  Tensor loss_labels;         // (loss rows) int64: the labels of those rows
  Tensor loss_row_positions;  // (tokens) int64: each row's index among the loss rows, the loss row count if masked
  std::vector<kernels::PreferencePair> loss_preference_pairs;  // preference_pairs in the loss rows' numbering
  // The logits of each reference model on this micro-batch, by its name in `reference_models` (models/gpt/
  // reference_models.h): (tokens, vocab), fp32 (fp64 for fp64 compute), or (loss rows, vocab) when the trained head
  // computes the loss rows only. Empty without reference models.
  std::map<std::string, Tensor> reference_logits;
  // Each reference model's log-probability of each row's label (kernels/label_log_probabilities.h), by its name, for
  // the models the dpo loss reads: (tokens) or (loss rows), fp32 (fp64 for fp64 compute), 0 on masked rows. A model
  // only dpo reads hands these alone, its logits never existing whole.
  std::map<std::string, Tensor> reference_label_log_probabilities;
  // The mixer output of each block of each reference model that blocks distill (block `distillation_model`), by model
  // name then block name (e.g. `decoder.3`): (tokens, hidden) in the compute dtype.
  std::map<std::string, std::map<std::string, Tensor>> reference_mixer_outputs;
  // Policy-gradient token data aligned with the labels (data/batch.h), undefined when the data carries none.
  Tensor advantages;             // (tokens) float32: advantage of label t
  Tensor old_log_probabilities;  // (tokens) float32: log-probability of label t under the rollout policy
  Tensor label_documents;        // (tokens) int32: document of label t in the sample (0-based), -1 at padding
  int64_t num_documents = 0;     // documents in the sample (inputs and trailing labels), Fast-LLM's num_documents
  // Set by the trainer (0 elsewhere): unmasked labels and documents in the whole step (all micro-batches, all
  // data-parallel ranks; validation: the iteration): what per-label losses are divided by, and the divisor of losses
  // normalised per document (GSPO, the policy metrics).
  int64_t labels_in_step = 0;
  int64_t documents_in_step = 0;
  // Set when this micro-batch is a piece of a longer sequence (above); its own cu_seqlens then cover its rows only.
  std::optional<SequencePiece> sequence_piece;
  // Set when its preference pairs share their prompt rows (above): cu_seqlens, max_seqlen and sequence_lengths then
  // cover the attention rows, everything else per row the computed rows (set by the batch uploader when the model
  // allows it: BaseModel::computes_shared_prompts_once).
  std::optional<AttentionRows> attention_rows;
  int64_t num_tokens() const { return tokens.numel(); }
};

// How the engine turns a loss sum into the value it logs: `per_label` sums are numerators, divided by the labels in the
// step (the head's losses); `normalized` sums already are the step's value (each micro-batch adds its loss divided by
// the micro-batches in the step: the mixture of experts' load-balancing and router z-losses). Both add over the
// micro-batches and the ranks. `maximum` and `minimum` are no sums but the largest / smallest of a value over the step
// (the policy losses' advantage extremes): they start at -inf / +inf (the extreme of nothing), layers take max= / min=
// into them, the engine reduces them over the ranks with max / min and logs them as they are.
enum class LossNormalization { per_label, normalized, maximum, minimum };

inline bool is_extreme(LossNormalization normalization) {
  return normalization == LossNormalization::maximum || normalization == LossNormalization::minimum;
}

// The value of a loss sum nothing was added to: 0, or -inf / +inf for an extreme. What LossSums starts a sum at, and
// what a rank that does not hold the loss counts as.
inline double loss_identity(LossNormalization normalization) {
  if (normalization == LossNormalization::maximum) return -std::numeric_limits<double>::infinity();
  if (normalization == LossNormalization::minimum) return std::numeric_limits<double>::infinity();
  return 0.0;
}

// The logged value of a loss sum (already reduced over the data-parallel ranks) of a step with `num_labels` labels.
inline double loss_value(LossNormalization normalization, double sum, int64_t num_labels) {
  if (normalization != LossNormalization::per_label) return sum;
  return num_labels > 0 ? sum / double(num_labels) : 0.0;
}

// Sums of each loss over the micro-batches of a step, each with its normalisation (or extremes: LossNormalization).
// Device scalars (fp64 on CPU, fp32 on CUDA): layers add into them with kernels, no host sync. The engine reduces them
// over the data-parallel ranks.
class LossSums {
 public:
  // The accumulator for `name`, created on first use at loss_identity(normalization) (0 for sums); a name keeps the
  // normalisation it was created with.
  Tensor& get(const std::string& name, Device device, LossNormalization normalization = LossNormalization::per_label);
  const std::map<std::string, Tensor>& all() const { return sums_; }
  LossNormalization normalization(const std::string& name) const;
  void clear() {
    sums_.clear();
    normalizations_.clear();
  }

 private:
  std::map<std::string, Tensor> sums_;
  std::map<std::string, LossNormalization> normalizations_;
};

struct LayerContext {
  const MicroBatch& batch;
  Device device;
  DType compute_dtype = DType::float32;
  Stream stream = {};
  bool training = true;  // false: no dropout, nothing saved for backward (validation)
  // Multiplies the gradient of every label loss: 1 / (labels in the whole step), Fast-LLM's normalisation.
  double loss_gradient_scale = 1.0;
  // The loss scale of fp16 training (1 otherwise), for losses that do not use loss_gradient_scale (the mixture of
  // experts' router losses, normalised per micro-batch rather than per label).
  double loss_scale = 1.0;
  // Micro-batches in the whole step, all data-parallel ranks (validation: in the evaluation iteration).
  int64_t micro_batches_in_step = 1;
  // Seed for this (step, micro-batch); layers derive their own streams from it with their name.
  uint64_t dropout_seed = 0;
  LossSums* losses = nullptr;
  // Set by generation (inference only): attention layers store their keys and values in it and attend to what it
  // holds (attention/key_value_cache.h) instead of only within the micro-batch.
  KeyValueCache* key_value_cache = nullptr;
  // Set by the reference models' forward (models/gpt/reference_models.h): decoder blocks store a copy of their mixer
  // output in it under their name, for the trained model's activation distillation.
  std::map<std::string, Tensor>* mixer_outputs = nullptr;
  // The tensor-parallel group (the ranks that differ only in their tensor rank), set by the schedule when
  // model.distributed.tensor_parallel > 1; layers built for several tensor ranks talk in it (common/tensor_parallel.h).
  distributed::Communicator* tensor_group = nullptr;
};

}  // namespace fast_llm::layers
