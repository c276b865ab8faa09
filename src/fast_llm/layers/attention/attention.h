// Attention mixer (Fast-LLM's `type: attention`, the registered `attention` Mixer): multi-head, grouped-query or
// multi-query attention over the packed documents of a micro-batch, with optional per-head query/key norms, rotary
// embeddings and a sliding window.
//
// Parameters (Fast-LLM names under the mixer's name, e.g. `decoder.3.mixer`):
//   query.weight      [heads * head_size, hidden]            (+ query.bias)
//   key_value.weight  [2 * head_groups * head_size, hidden]   keys then values, from key_layer's settings (+ bias)
//   dense.weight      [hidden, heads * head_size]            (+ dense.bias)
//   q_norm.*, k_norm.* (head_size) when query_norm / key_norm are configured (Fast-LLM's attribute names)
// Forward, on (tokens, hidden):
//   q = x Wq^T, k = x Wk^T, v = x Wv^T   (k and v: the two halves of key_value, each computed contiguous)
//   q, k = norm(q), norm(k) per head; rotary(q), rotary(k) in place
//   o = attention(q, k, v) per document (cu_seqlens), causal, window, scale head_size^-softmax_scale_power, GQA
//   y = o Wd^T
// As a Mixer (forward / backward with a LayerContext) it keeps each micro-batch's Saved itself; the explicit forms fill
// and take a Saved the caller holds. Backward returns grad_input (=) and accumulates parameter gradients (+=); it takes
// the Saved by value, so q, k, v, the attention output and logsumexp are freed once the attention backward has run,
// before the projections' gradients are allocated. Attention dropout is refused.
// A piece of a longer sequence (MicroBatch::sequence_piece: schedule.micro_batch_splits, sequence_data_parallel):
// rotary at the piece's rows of the sequence; its keys and values go into its rows of a carry of the sequence's keys
// and values (gathered over the sequence-data ranks), kept from split 0's forward to the last split's, and its queries
// attend to rows [0, end of its split) of it (attention_forward's query_offset). Backward runs the splits in reverse:
// the key / value gradients of a split's attention add into a gradient carry of the sequence, whose rows of the split
// are then complete (the later splits came first) and go back to their rows (reduce-scattered over the sequence-data
// ranks). The result equals the unsplit micro-batch's up to the order of the sums.
// Shared prompt rows (MicroBatch::attention_rows, data/shared_prompts.h): the projections run on the micro-batch's
// computed rows; the queries, keys and values are gathered to attention's rows (a rejected sequence's shared prompt
// row takes its chosen sequence's), rotary and attention run on those as on the original batch, and the dense
// projection on the output of the computed rows. Backward: the output gradient is zero at the repeated rows, and
// their key and value gradients add to their sources'.
// Generation (a context with a key_value_cache, inference only): rotary at the micro-batch's per-sequence positions;
// a prefill step attends within each prompt as above and stores its keys and values in the cache, a decode step (one
// token per sequence) goes through attention_decode against the cache.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "fast_llm/layers/attention/config.h"
#include "fast_llm/layers/attention/key_value_cache.h"
#include "fast_llm/layers/attention/rotary.h"
#include "fast_llm/layers/block/mixer.h"
#include "fast_llm/layers/common/linear.h"
#include "fast_llm/layers/common/normalization.h"
#include "fast_llm/layers/saved_per_micro_batch.h"

namespace fast_llm::layers {

class Attention : public Mixer {
 public:
  // `rotary` may be shared between layers with the same rotary settings (the cos/sin tables are then built once); null
  // builds this layer's own from the config.
  // `lora` (null: none) adds LoRA adapters to the query projection and the value half of key_value, and to the other
  // projections whose `apply_peft` is true (the key half, dense).
  // `tensor_parallel`: this rank's heads and head groups (both must divide over the ranks, or with a single head group
  // the heads only, key_value then whole on every rank with partial gradients, as Fast-LLM), query and key_value
  // column-parallel, dense row-parallel (common/tensor_parallel.h).
  Attention(std::string name, const AttentionConfig& config, int64_t hidden_size, double lr_scale,
            std::shared_ptr<Rotary> rotary = nullptr, const LoraConfig* lora = nullptr,
            TensorParallelism tensor_parallel = {});
  // As the block's mixer: the rotary tables from `arguments.shared`.
  Attention(const AttentionConfig& config, const SublayerArguments& arguments);

  struct Saved {
    Tensor input;      // (tokens, hidden)
    Tensor query;      // (tokens, heads, head_size), after norm and rotary
    Tensor key;        // (key tokens, head_groups, head_size), after norm and rotary (a piece: the carry's rows)
    Tensor value;      // (key tokens, head_groups, head_size)
    Tensor output;     // (tokens, heads, head_size): attention output, input of dense
    Tensor logsumexp;  // (heads, tokens) fp32 (fp64 for fp64 compute)
    Tensor cu_seqlens;  // of the key rows
    int64_t max_seqlen = 0;
    std::optional<SequencePiece> piece;  // the micro-batch's, when it is a piece of a longer sequence
    // The micro-batch's, when its preference pairs share their prompt rows: query, key, value, output and logsumexp
    // are then of the attention rows.
    std::optional<AttentionRows> attention_rows;
    Normalization::Saved query_norm;
    Normalization::Saved key_norm;
    std::optional<uint64_t> dropout_seed;  // the forward's (LoRA dropout), regenerated in backward
  };

  // With tensor parallelism these gather the sequence (sequence-tensor parallelism: only this rank's rows of the input
  // are kept for backward, which gathers them again) and sum the dense output and the input gradient over the group;
  // the explicit forms below work on this rank's part alone (the dense output a partial sum without its bias, the
  // input gradient a partial sum).
  Tensor forward(LayerContext& context, const Tensor& input) override;
  Tensor backward(LayerContext& context, const Tensor& grad_output) override;
  bool supports_tensor_parallelism() const override { return true; }
  // (tokens, hidden) -> (tokens, hidden). `saved` may be null (validation: nothing kept). `dropout_seed`: the
  // micro-batch's in a training forward (LoRA dropout), unset otherwise.
  Tensor forward(const Tensor& input, const MicroBatch& batch, Saved* saved, Stream stream,
                 std::optional<uint64_t> dropout_seed = std::nullopt);
  // `input_gradient_ready` (tensor parallelism): called with the input gradient once it is complete, before the
  // projections' parameter gradients, so that its reduction over the group runs while they are computed.
  Tensor backward(const Tensor& grad_output, Saved saved, Stream stream,
                  const InputGradientReady& input_gradient_ready = {});

  // Matmuls (6 * tokens * weights) plus attention (12 * heads * head_size per attended query-key pair, counted from
  // the batch's host sequence_lengths, or from cu_seqlens when they are not given and it is on the CPU).
  double flops(const MicroBatch& batch) const override;
  int64_t matmul_weight_count() const override;
  // 12 * heads * head_size per attended pair, per token of one document of `sequence_length` tokens (6 * length *
  // heads * head_size for plain causal attention).
  double mixing_flops_per_token(int64_t sequence_length) const override;

  // The generation forward described above; no Saved.
  Tensor forward_cached(const Tensor& input, const MicroBatch& batch, KeyValueCache& cache, Stream stream);

  bool uses_dropout() const override {
    return query_.uses_dropout() || key_value_.uses_dropout() || dense_.uses_dropout();
  }
  Linear& query() { return query_; }
  Linear& key_value() { return key_value_; }
  Linear& dense() { return dense_; }

  // This rank's heads and head groups (all of them without tensor parallelism).
  int heads() const { return heads_; }
  int head_groups() const { return head_groups_; }
  int head_size() const { return head_size_; }
  bool causal() const { return causal_; }
  std::optional<int64_t> window_size() const { return window_size_; }

 private:
  struct Projections {
    Tensor query;  // (tokens, heads, head_size), normalised when configured, before rotary
    Tensor key;    // (tokens, head_groups, head_size), normalised when configured, before rotary
    Tensor value;  // (tokens, head_groups, head_size)
  };
  Projections project(const Tensor& input, Normalization::Saved* query_norm, Normalization::Saved* key_norm,
                      Stream stream, std::optional<uint64_t> dropout_seed = std::nullopt);
  // attention_forward of the projections' queries against their keys and values, over the documents of cu_seqlens (of
  // the key rows), the queries at key rows from query_offset; logsumexp is written to `logsumexp` when given.
  Tensor attend(const Projections& projections, const Tensor& cu_seqlens, int64_t max_seqlen, int64_t query_offset,
                Tensor* logsumexp, Stream stream) const;

  struct KeyValues {
    Tensor key, value;  // (rows, head_groups, head_size)
  };
  // A piece's keys and values (after rotary) put into its sequence's carry (gathered over the sequence-data ranks):
  // returns the carry's rows [0, end of the piece's split).
  KeyValues carried_key_values(const Tensor& key, const Tensor& value, const SequencePiece& piece, Stream stream);
  // The gradients of the key rows [0, end of the split) of a piece's attention added into its sequence's gradient
  // carry: returns the gradients of the piece's own rows, summed over every split and sequence-data rank.
  KeyValues piece_gradients(const Tensor& grad_key, const Tensor& grad_value, const SequencePiece& piece,
                            Stream stream);

  Linear::OutputRange key_range() const { return {0, int64_t(head_groups_) * head_size_}; }
  Linear::OutputRange value_range() const {
    return {int64_t(head_groups_) * head_size_, 2 * int64_t(head_groups_) * head_size_};
  }

  int heads_;
  int head_groups_;
  int head_size_;
  bool causal_;
  std::optional<int64_t> window_size_;
  double softmax_scale_;
  Linear query_;
  Linear key_value_;
  Linear dense_;
  std::unique_ptr<Normalization> query_norm_;
  std::unique_ptr<Normalization> key_norm_;
  std::shared_ptr<Rotary> rotary_;
  TensorParallelism tensor_parallel_;
  SavedPerMicroBatch<Saved> saved_;
  // By SequencePiece::sequence: the keys and values of the sequence's rows (from split 0's forward to the last's), and
  // the sum of their gradients (from the last split's backward to split 0's).
  std::map<int64_t, KeyValues> key_value_carries_;
  std::map<int64_t, KeyValues> gradient_carries_;
};

// Number of (query, key) pairs attention computes for documents of the given lengths (causal and window as the
// attention op defines them). Host-side.
int64_t attention_pair_count(std::span<const int64_t> document_lengths, bool causal, std::optional<int64_t> window_size);

}  // namespace fast_llm::layers
