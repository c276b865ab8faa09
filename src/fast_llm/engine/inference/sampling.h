// Choosing the next token from a row of logits, as Hugging Face's generate does with its logits processors, in order:
// final softcap (the model's), temperature, top-k, top-p (nucleus), then a draw, or the arg max when greedy.
//   greedy      temperature == 0: the first index of the largest logit (torch.argmax); top-k and top-p are moot
//   temperature logits / temperature
//   top_k       keep the k largest logits (ties at the k-th kept too); 0: all
//   top_p       keep the smallest set of the most probable tokens whose probability sums to >= top_p (at least one);
//               1: all
//   draw        inverse CDF of the kept softmax at u = Philox uniform (core/random.h) of (seed, sequence, step): the
//               same seed, prompt index and step give the same token whatever the batch, device or thread layout.
// Host-side: the caller copies the step's logits to the host (one row per sequence), which it needs anyway to stream
// the tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace fast_llm::engine {

struct SamplingSettings {
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // 1: no limit
  uint64_t seed = 0;
  std::optional<double> softcap;  // the model's final logit softcap: softcap * tanh(logit / softcap)
};

// The next token of sequence `sequence` (its index among all prompts of the run) at its decoding step `step`, from
// its logits (vocab). Never returns a token whose logit is -inf or NaN unless every logit is.
int64_t sample_token(std::span<const float> logits, const SamplingSettings& settings, uint64_t sequence,
                     uint64_t step);

}  // namespace fast_llm::engine
