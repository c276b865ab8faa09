// The key/value cache of a generation run (key_value_cache.h): per-layer buffers allocated on first use, and the
// per-sequence lengths kept on the host (what the checks and the next positions read) and mirrored to the device
// (what attention_decode reads) at the start of each step.
#include "fast_llm/layers/attention/key_value_cache.h"

#include <algorithm>

#include "fast_llm/core/error.h"

namespace fast_llm::layers {

KeyValueCache::KeyValueCache(int64_t batch_size, int64_t capacity, DType dtype, Device device)
    : batch_size_(batch_size), capacity_(capacity), dtype_(dtype), device_(device), lengths_(size_t(batch_size), 0) {
  FLM_CHECK(batch_size > 0 && capacity > 0, "generate", "a key/value cache for {} sequences of {} tokens", batch_size,
            capacity);
}

KeyValueCache::LayerCache& KeyValueCache::layer(const void* owner, int64_t head_groups, int64_t head_size,
                                                Stream stream) {
  auto found = layers_.find(owner);
  if (found != layers_.end()) return found->second;
  const Shape shape{batch_size_, capacity_, head_groups, head_size};
  return layers_[owner] = LayerCache{.key = Tensor::empty(shape, dtype_, device_, stream),
                                     .value = Tensor::empty(shape, dtype_, device_, stream)};
}

void KeyValueCache::begin_prefill(const std::vector<int64_t>& prompt_lengths) {
  FLM_CHECK(int64_t(prompt_lengths.size()) == batch_size_, "generate", "{} prompts for a cache of {} sequences",
            prompt_lengths.size(), batch_size_);
  for (int64_t length : prompt_lengths)
    FLM_CHECK(length > 0 && length <= capacity_, "generate",
              "a prompt of {} tokens; the cache holds 1 to {} tokens per sequence", length, capacity_);
  step_ = Step::prefill;
  step_rotary_.clear();
  prompt_lengths_ = prompt_lengths;
  std::fill(lengths_.begin(), lengths_.end(), 0);
}

void KeyValueCache::begin_decode(Stream stream) {
  for (int64_t length : lengths_)
    FLM_CHECK(length < capacity_, "generate", "a sequence of {} tokens fills its cache of {}", length, capacity_);
  step_ = Step::decode;
  step_rotary_.clear();
  upload_lengths(stream);
}

const KeyValueCache::PositionTables* KeyValueCache::step_rotary(const void* rotary) const {
  const auto found = step_rotary_.find(rotary);
  return found == step_rotary_.end() ? nullptr : &found->second;
}

const KeyValueCache::PositionTables& KeyValueCache::keep_step_rotary(const void* rotary, PositionTables tables) {
  return step_rotary_[rotary] = std::move(tables);
}

void KeyValueCache::advance() {
  if (step_ == Step::prefill)
    lengths_ = prompt_lengths_;
  else
    for (int64_t& length : lengths_) ++length;
}

void KeyValueCache::upload_lengths(Stream stream) {
  device_lengths_ = Tensor::from_indices(lengths_, DType::int32, device_, stream);
}

}  // namespace fast_llm::layers
