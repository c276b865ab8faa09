// Token generation with a GPT model whose weights are loaded (a MultiStage built for inference): prompts of token ids
// in, completions out, one batch of prompts at a time.
//
// A batch runs as one prefill and then one-token decode steps, against a key/value cache (layers/attention/
// key_value_cache.h) sized for the longest prompt plus max_new_tokens:
//   prefill  the prompts packed without padding, each its own document (cu_seqlens), positions from 0 in each; the
//            residual stream's last row of each prompt (a row gather) goes through the head for the first new token;
//   decode   one token per sequence, at position = its cached length; attention_decode against the cache.
// A sequence stops at its end-of-sequence token (kept in its completion, as Hugging Face's generate keeps it) or at
// max_new_tokens; finished sequences stay in the batch until all have stopped, their tokens ignored, so the shapes of
// a step never change. Sampling (engine/inference/sampling.h) is seeded by the prompt's index in the whole run, so
// a prompt gets the same completion whatever batch it is in.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "fast_llm/engine/inference/sampling.h"
#include "fast_llm/models/gpt/model.h"

namespace fast_llm::models::gpt {

struct GenerationSettings {
  int64_t max_new_tokens = 64;
  std::vector<int64_t> eos_token_ids;  // any of them ends a sequence; none: generate max_new_tokens
  engine::SamplingSettings sampling;
};

class Generator {
 public:
  // `model`'s weights are bound and loaded on `device`; compute in `compute_dtype`.
  Generator(GPTModel& model, Device device, DType compute_dtype);

  // Called with (index of the prompt in the batch, token) as each token is chosen.
  using TokenCallback = std::function<void(size_t, int64_t)>;

  // The completions (new tokens only) of `prompts` (non-empty, ids within the vocabulary), generated together;
  // `first_index` is the index of prompts[0] among all prompts of the run (it seeds the sampling).
  std::vector<std::vector<int64_t>> generate(const std::vector<std::vector<int64_t>>& prompts,
                                             const GenerationSettings& settings, uint64_t first_index = 0,
                                             const TokenCallback& on_token = {});

 private:
  // The model's residual stream after the last block for `batch` (the context's cache, if any, is read and extended).
  Tensor forward(layers::LayerContext& context);
  // Logits of `rows` (rows, hidden) on the host, fp32 (rows, vocab). From a GPU they land in one page-locked buffer
  // kept for the whole generation: a fresh pageable one each step cost page faults and a staged copy (batch 16 at a
  // 128k vocabulary: 8 MB a step).
  Tensor host_logits(const Tensor& rows);

  GPTModel& model_;
  Device device_;
  DType compute_dtype_;
  Stream stream_;
  Tensor pinned_logits_;  // (rows, vocab) fp32, reused while the shape holds
};

}  // namespace fast_llm::models::gpt
