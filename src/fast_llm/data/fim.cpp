#include "fast_llm/data/fim.h"

#include <algorithm>

#include "fast_llm/core/error.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/core/random.h"
#include "fast_llm/data/sampling.h"
#include "fast_llm/tokenizer/tokenizer.h"
#include "fast_llm/tokenizer/utf8.h"

namespace fast_llm::data {

namespace {

constexpr std::string_view kComponent = "data";
// Separates FIM's random streams from the other users of the sampling seed.
constexpr uint64_t kFimStream = 0x46494D;  // "FIM"

using Tokens = std::vector<int64_t>;

// One document's rewrite: the settings, the tokenizer and the document's random stream.
class FimRewriter {
 public:
  FimRewriter(const FimSettings& settings, const tokenizer::Tokenizer& tokenizer, FimRandom& random)
      : settings_(settings), tokenizer_(tokenizer), random_(random) {}

  Tokens document(std::span<const int64_t> tokens) {
    Tokens result = rewrite_separated(tokens, settings_.eos_id, [&](std::span<const int64_t> segment) {
      return split_and_permute(segment);
    });
    result.resize(tokens.size(), settings_.pad_id);
    return result;
  }

 private:
  // The pieces of `tokens` between `separator`s each rewritten by `rewrite` and joined again with the separators.
  // Empty pieces between separators are not rewritten; the piece after the last separator is, even when empty.
  // (Fast-LLM also drops the separator after an empty piece, and pads the document at its end instead: a document
  // piece starting with EOS would change even at rate 0. Here it is kept.)
  template <class Rewrite>
  static Tokens rewrite_separated(std::span<const int64_t> tokens, int64_t separator, const Rewrite& rewrite) {
    Tokens result;
    size_t start = 0;
    for (size_t index = 0; index < tokens.size(); ++index) {
      if (tokens[index] != separator) continue;
      if (index > start) {
        Tokens piece = rewrite(tokens.subspan(start, index - start));
        result.insert(result.end(), piece.begin(), piece.end());
      }
      result.push_back(separator);
      start = index + 1;
    }
    Tokens last = rewrite(tokens.subspan(start));
    result.insert(result.end(), last.begin(), last.end());
    return result;
  }

  Tokens split_and_permute(std::span<const int64_t> segment) {
    if (!settings_.split_sample_id ||
        std::find(segment.begin(), segment.end(), *settings_.split_sample_id) == segment.end())
      return permute(segment, settings_.rate);
    if (!random_.bernoulli(settings_.rate)) return Tokens(segment.begin(), segment.end());
    return rewrite_separated(segment, *settings_.split_sample_id, [&](std::span<const int64_t> fragment) {
      return permute(fragment, settings_.fragment_rate);
    });
  }

  // Encoded text, with BOS before and EOS after when asked (Fast-LLM's Tokenizer.tokenize).
  Tokens encode(const std::string& text, bool begin, bool end) const {
    std::vector<int32_t> ids = tokenizer_.encode(text, /*add_special_tokens=*/false);
    Tokens result;
    result.reserve(ids.size() + 2);
    if (begin) result.push_back(settings_.bos_id);
    result.insert(result.end(), ids.begin(), ids.end());
    if (end) result.push_back(settings_.eos_id);
    if (settings_.max_vocab_size)
      for (int64_t& id : result) id %= *settings_.max_vocab_size;
    return result;
  }

  Tokens permute(std::span<const int64_t> sequence, double rate) {
    Tokens unchanged(sequence.begin(), sequence.end());
    if (!random_.bernoulli(rate)) return unchanged;
    const std::vector<int32_t> ids(sequence.begin(), sequence.end());
    const std::string contents = tokenizer_.decode(ids, /*skip_special_tokens=*/false);
    if (settings_.ignore_prefix && contents.starts_with(*settings_.ignore_prefix)) return unchanged;

    const std::vector<size_t> offsets = tokenizer::character_offsets(contents);
    const int64_t characters = int64_t(offsets.size()) - 1;
    int64_t first = 0, second = 0;
    if (!settings_.max_middle_len) {
      // Both cuts uniform over [0, characters]: any part may be empty.
      first = random_.integer(0, characters + 1);
      second = random_.integer(0, characters + 1);
      if (second < first) std::swap(first, second);
    } else {
      const int64_t middle = random_.integer(0, std::min(*settings_.max_middle_len, characters) + 1);
      first = random_.integer(0, characters - middle + 1);
      second = first + middle;
    }
    const size_t first_byte = offsets[size_t(first)], second_byte = offsets[size_t(second)];
    Tokens prefix = encode(contents.substr(0, first_byte), true, false);
    Tokens middle = encode(contents.substr(first_byte, second_byte - first_byte), false, false);
    Tokens suffix = encode(contents.substr(second_byte), false, true);

    if (settings_.truncate_or_pad) {
      // The three sentinels count: the rewritten segment keeps the original length, the suffix absorbing the change.
      const int64_t length = int64_t(prefix.size() + middle.size() + suffix.size()) + 3;
      const int64_t excess = length - int64_t(sequence.size());
      if (excess > 0) {
        if (int64_t(suffix.size()) <= excess) return unchanged;
        suffix.resize(suffix.size() - size_t(excess));
      } else if (excess < 0) {
        suffix.resize(suffix.size() + size_t(-excess), settings_.pad_id);
      }
    }

    Tokens result;
    result.reserve(prefix.size() + middle.size() + suffix.size() + 3);
    auto append = [&](const Tokens& part) { result.insert(result.end(), part.begin(), part.end()); };
    if (random_.bernoulli(settings_.spm_rate)) {
      result.push_back(settings_.prefix_id);
      result.push_back(settings_.suffix_id);
      append(suffix);
      result.push_back(settings_.middle_id);
      append(prefix);
      append(middle);
    } else {
      result.push_back(settings_.prefix_id);
      append(prefix);
      result.push_back(settings_.suffix_id);
      append(suffix);
      result.push_back(settings_.middle_id);
      append(middle);
    }
    return result;
  }

  const FimSettings& settings_;
  const tokenizer::Tokenizer& tokenizer_;
  FimRandom& random_;
};

}  // namespace

FimSettings resolve_fim_settings(const FimDatasetConfig& config, const tokenizer::Tokenizer& tokenizer) {
  const std::string source =
      config.tokenizer.path ? fmt::format("the tokenizer {}", config.tokenizer.path->string()) : "the tokenizer";
  auto id_of = [&](const std::string& token, std::string_view field) -> int64_t {
    std::optional<int32_t> id = tokenizer.token_to_id(token);
    if (!id) config.fail(field, fmt::format("token '{}' is not in the vocabulary of {}", token, source));
    return *id;
  };
  FimSettings settings{.rate = config.rate,
                       .max_middle_len = config.max_middle_len,
                       .fragment_rate = config.fragment_rate,
                       .ignore_prefix = config.ignore_prefix,
                       .spm_rate = config.spm_rate,
                       .truncate_or_pad = config.truncate_or_pad,
                       .max_vocab_size = config.tokenizer.max_vocab_size};
  settings.prefix_id = id_of(config.prefix_token, "prefix_token");
  settings.middle_id = id_of(config.middle_token, "middle_token");
  settings.pad_id = id_of(config.pad_token, "pad_token");
  settings.suffix_id = id_of(config.suffix_token, "suffix_token");
  if (config.split_sample) settings.split_sample_id = id_of(*config.split_sample, "split_sample");
  if (config.tokenizer.bos_token) {
    settings.bos_id = id_of(*config.tokenizer.bos_token, "tokenizer.bos_token");
  } else if (std::optional<int32_t> bos = tokenizer.bos_id()) {
    settings.bos_id = *bos;
  } else {
    config.fail("tokenizer", fmt::format("fill-in-the-middle needs a BOS token and {} defines none; name one with "
                                         "`tokenizer.bos_token`", source));
  }
  std::optional<int32_t> eos = tokenizer.eos_id();
  if (!eos) config.fail("tokenizer", fmt::format("fill-in-the-middle needs an EOS token and {} defines none", source));
  settings.eos_id = *eos;
  return settings;
}

FimRandom::FimRandom(uint64_t seed, int64_t index, int64_t document)
    : key_(derive_seed(seed, kFimStream, uint64_t(index), uint64_t(document))) {}

uint64_t FimRandom::next_bits() {
  const Philox4 block = philox4x32(key_, counter_++);
  return (uint64_t(block.x) << 32) | block.y;
}

bool FimRandom::bernoulli(double probability) {
  // 53 random bits: a uniform double in [0, 1), so 0 never passes and 1 always does.
  const double uniform = double(next_bits() >> 11) * 0x1.0p-53;
  return uniform < probability;
}

int64_t FimRandom::integer(int64_t low, int64_t high) {
  FLM_ASSERT(high > low, "empty range [{}, {})", low, high);
  // Lemire's multiply-shift, redrawing the few values that would favour part of the range.
  const uint64_t range = uint64_t(high - low);
  unsigned __int128 product = static_cast<unsigned __int128>(next_bits()) * range;
  if (uint64_t(product) < range) {
    const uint64_t threshold = (0 - range) % range;
    while (uint64_t(product) < threshold) product = static_cast<unsigned __int128>(next_bits()) * range;
  }
  return low + int64_t(uint64_t(product >> 64));
}

std::vector<int64_t> fim_transform(std::span<const int64_t> tokens, const FimSettings& settings,
                                   const tokenizer::Tokenizer& tokenizer, FimRandom& random) {
  return FimRewriter(settings, tokenizer, random).document(tokens);
}

FimSampledDataset::FimSampledDataset(std::shared_ptr<SampledDataset> dataset,
                                     std::shared_ptr<const tokenizer::Tokenizer> tokenizer, FimSettings settings,
                                     uint64_t seed)
    : dataset_(std::move(dataset)), tokenizer_(std::move(tokenizer)), settings_(std::move(settings)), seed_(seed),
      name_(dataset_->name() + "_fim") {}

std::vector<Document> FimSampledDataset::get_sample(int64_t index) const {
  std::vector<Document> documents = dataset_->get_sample(index);
  const int64_t vocab_size = tokenizer_->vocab_size();
  for (size_t place = 0; place < documents.size(); ++place) {
    Document& document = documents[place];
    FLM_CHECK(document.loss_masking_spans.empty() && document.chosen_spans.empty() && document.rejected_spans.empty(),
              kComponent,
              "{}: sample {} holds a document with loss-masking or preference spans; fill-in-the-middle moves tokens, "
              "so it cannot keep them (as in Fast-LLM)",
              name_, index);
    FLM_CHECK(!document.has_token_data(), kComponent,
              "{}: sample {} holds a document with token data (advantages); fill-in-the-middle moves tokens, so it "
              "cannot keep them",
              name_, index);
    for (int64_t token : document.tokens)
      FLM_CHECK(token >= 0 && token < vocab_size, kComponent,
                "{}: sample {} holds token {}, outside the tokenizer's {} ids; the dataset was not made with this "
                "tokenizer",
                name_, index, token, vocab_size);
    FimRandom random(seed_, index, int64_t(place));
    document.tokens = fim_transform(document.tokens, settings_, *tokenizer_, random);
  }
  return documents;
}

std::shared_ptr<SampledDataset> FimDatasetConfig::build_and_sample(const SamplingParameters& parameters,
                                                                   int64_t num_samples, uint64_t seed) const {
  // check() requires the path.
  log_main("Loading the tokenizer of dataset {} from {}", path(), tokenizer.path->string());
  std::shared_ptr<const tokenizer::Tokenizer> loaded = tokenizer::Tokenizer::load(*tokenizer.path);
  FimSettings settings = resolve_fim_settings(*this, *loaded);
  // The sentinels land in every rewritten sample: one the model cannot embed is refused now, not at the first batch.
  if (parameters.vocab_size > 0) {
    const std::pair<std::string_view, int64_t> placed[] = {
        {"prefix_token", settings.prefix_id}, {"middle_token", settings.middle_id},
        {"suffix_token", settings.suffix_id}, {"pad_token", settings.pad_id}};
    for (const auto& [field, id] : placed)
      if (id >= parameters.vocab_size)
        fail(field, fmt::format("token has id {} in the tokenizer {}, outside the model's vocabulary of {} "
                                "(model.base_model.embeddings.vocab_size)",
                                id, tokenizer.path->string(), parameters.vocab_size));
  }
  // The wrapped dataset is sampled with the same seed, as in Fast-LLM.
  return std::make_shared<FimSampledDataset>(dataset->build_and_sample(parameters, num_samples, seed),
                                             std::move(loaded), std::move(settings), seed);
}

}  // namespace fast_llm::data
