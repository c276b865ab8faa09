// The keys and values a generation run keeps per attention layer, so each new token attends to what came before
// without recomputing it (engine-free: generation hands it to the layers through LayerContext::key_value_cache).
//
// Layout: per attention layer, key and value caches (batch, capacity, head_groups, head_size) in the compute dtype,
// allocated on first use by that layer (GQA: the groups, never the repeated heads). Sequence b of the batch owns row
// b. The run moves in steps:
//   prefill  the micro-batch packs one prompt per sequence (document b = sequence b, cu_seqlens); attention runs over
//            it as in training and stores each prompt's keys and values at rows [0, prompt length) of its sequence;
//   decode   the micro-batch has one token per sequence (token b = sequence b); attention_decode stores its key and
//            value at row lengths[b] and attends to rows [0, lengths[b]].
// After a step the caller advances the lengths by what it added (advance). Positions (rotary and absolute position
// embeddings) are per sequence, from the micro-batch's `positions`, as Hugging Face's generate counts them.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "fast_llm/core/device.h"
#include "fast_llm/core/dtype.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::layers {

class KeyValueCache {
 public:
  KeyValueCache(int64_t batch_size, int64_t capacity, DType dtype, Device device);

  enum class Step { prefill, decode };

  struct LayerCache {
    Tensor key;    // (batch, capacity, head_groups, head_size)
    Tensor value;  // (batch, capacity, head_groups, head_size)
  };
  // The cache of the layer `owner` (allocated on its first call).
  LayerCache& layer(const void* owner, int64_t head_groups, int64_t head_size, Stream stream);

  int64_t batch_size() const { return batch_size_; }
  int64_t capacity() const { return capacity_; }
  Step step() const { return step_; }
  // Tokens cached per sequence, on the host and (int32, for attention_decode, uploaded by begin_decode) on the device.
  const std::vector<int64_t>& lengths() const { return lengths_; }
  const Tensor& device_lengths() const { return device_lengths_; }

  // The next step: a prefill of prompts of `prompt_lengths` tokens (one per sequence, into empty caches), or a decode
  // of one token per sequence. Throws when a sequence would outgrow the capacity.
  void begin_prefill(const std::vector<int64_t>& prompt_lengths);
  void begin_decode(Stream stream);
  // The step's tokens are in the caches: prefill sets the lengths to the prompts', decode adds one to each.
  void advance();
  // Prompt lengths of the current prefill step.
  const std::vector<int64_t>& prompt_lengths() const { return prompt_lengths_; }

  // The rotary tables at the step's positions, (tokens, rotary_dims / 2) fp32, gathered by the first attention layer
  // of a step and reused by the others with the same rotary (keyed by it); forgotten when a step begins.
  struct PositionTables {
    Tensor cos, sin;
  };
  const PositionTables* step_rotary(const void* rotary) const;
  const PositionTables& keep_step_rotary(const void* rotary, PositionTables tables);

 private:
  void upload_lengths(Stream stream);

  int64_t batch_size_, capacity_;
  DType dtype_;
  Device device_;
  Step step_ = Step::prefill;
  std::vector<int64_t> lengths_, prompt_lengths_;
  Tensor device_lengths_;  // (batch) int32
  std::map<const void*, LayerCache> layers_;
  std::map<const void*, PositionTables> step_rotary_;
};

}  // namespace fast_llm::layers
