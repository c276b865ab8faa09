// Fill-in-the-middle (`type: fim`): a wrapper over a sampled dataset that rewrites each document of each sample so a
// causal model learns to write a middle given what comes before and after it (Bavarian et al. 2022, "Efficient
// Training of Language Models to Fill in the Middle"), with Fast-LLM's parameters and algorithm
// (reference/fast-llm.md §5.3).
//
// A document is cut at each EOS token into segments; each non-empty segment, and the piece after the last EOS, is
// rewritten, then the document is cut or padded with the pad token back to its original length, so samples keep
// their size and packing. (Fast-LLM drops the EOS after an empty segment and pads instead, so a document piece that
// starts with EOS changes even at rate 0; here rate 0 is the identity.) Rewriting a segment, with probability `rate`:
// the tokens are decoded to text (special tokens kept), the text is cut at two character (code point) positions into
// prefix / middle / suffix, and each part is encoded again, BOS before the prefix and EOS after the suffix:
//   PSM:  <prefix> BOS prefix.. <suffix> suffix.. EOS <middle> middle..
//   SPM:  <prefix> <suffix> suffix.. EOS <middle> BOS prefix.. middle..     (with probability `spm_rate`)
// `max_middle_len` bounds the middle in characters; `truncate_or_pad` cuts the suffix (or pads it) so the segment
// keeps its length; `ignore_prefix` leaves text starting with it alone. With `split_sample` (a token), a segment
// holding that token is rewritten with probability `rate` fragment by fragment, each with `fragment_rate`.
//
// The random draws, in the order Fast-LLM makes them: per segment (or per fragment) one Bernoulli(rate), then two
// integers for the cut, then (unless truncate_or_pad gave up) one Bernoulli(spm_rate); per split segment first one
// Bernoulli(rate). They come from a Philox stream (core/random.h) keyed by the sampling seed, the sample index and the
// document's place in the sample: a sample is the same on every rank, in every run, whatever the process count. (The
// draws are not numpy's, so the samples are not Fast-LLM's token for token; Fast-LLM also reuses one seed for every
// document of a sample, which makes equal-length documents cut alike; each document has its own stream here.)
// Text is decoded as the tokenizer decodes it; Fast-LLM's transformers decode also applies
// `clean_up_tokenization_spaces` where a tokenizer_config.json asks (deleting the space before punctuation), which
// is not reproduced: it would change the text of every rewritten segment.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fast_llm/data/config.h"
#include "fast_llm/data/dataset.h"

namespace fast_llm::tokenizer {
class Tokenizer;
}

namespace fast_llm::data {

// What the transform needs: the rates of FimDatasetConfig and the ids its token names have in the tokenizer.
struct FimSettings {
  double rate = 0.0;
  std::optional<int64_t> max_middle_len;
  std::optional<int64_t> split_sample_id;
  double fragment_rate = 0.0;
  std::optional<std::string> ignore_prefix;
  double spm_rate = 0.5;
  bool truncate_or_pad = false;
  int64_t prefix_id = 0, middle_id = 0, suffix_id = 0, pad_id = 0;
  int64_t bos_id = 0, eos_id = 0;
  // Re-encoded ids are taken modulo this (Fast-LLM's tokenizer.max_vocab_size, for tests with small models).
  std::optional<int64_t> max_vocab_size;
};

// The settings of `config` for `tokenizer`: each token name must be in its vocabulary (or added tokens), and the
// tokenizer must have BOS and EOS (`tokenizer.bos_token` replaces its BOS). Errors are ConfigErrors naming the field.
FimSettings resolve_fim_settings(const FimDatasetConfig& config, const tokenizer::Tokenizer& tokenizer);

// The random draws of one document's transform: a sequential stream over Philox blocks.
class FimRandom {
 public:
  // The stream of document `document` (its place in the sample) of sample `index` under sampling seed `seed`.
  FimRandom(uint64_t seed, int64_t index, int64_t document);
  // True with probability `probability`: never for 0, always for 1.
  bool bernoulli(double probability);
  // Uniform in [low, high) (high > low), without modulo bias.
  int64_t integer(int64_t low, int64_t high);

 private:
  uint64_t next_bits();
  uint64_t key_;
  uint64_t counter_ = 0;
};

// The FIM rewrite of one document's tokens; the result has the same length.
std::vector<int64_t> fim_transform(std::span<const int64_t> tokens, const FimSettings& settings,
                                   const tokenizer::Tokenizer& tokenizer, FimRandom& random);

class FimSampledDataset final : public SampledDataset {
 public:
  FimSampledDataset(std::shared_ptr<SampledDataset> dataset, std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                    FimSettings settings, uint64_t seed);
  const std::string& name() const override { return name_; }
  int64_t num_samples() const override { return dataset_->num_samples(); }
  // The documents of the wrapped sample, each rewritten. Documents with loss-masking or preference spans are refused:
  // the rewrite moves tokens, so the spans would mark the wrong ones (Fast-LLM refuses them too).
  std::vector<Document> get_sample(int64_t index) const override;

 private:
  std::shared_ptr<SampledDataset> dataset_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  FimSettings settings_;
  uint64_t seed_;
  std::string name_;
};

}  // namespace fast_llm::data
