// Byte-level BPE training (see bpe_trainer.h): words counted in parallel, then merges with incremental pair counts.
#include "fast_llm/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <queue>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "fast_llm/core/error.h"
#include "fast_llm/tokenizer/added_vocabulary.h"
#include "fast_llm/tokenizer/bpe_tokenizer_json.h"
#include "fast_llm/tokenizer/byte_level.h"
#include "fast_llm/tokenizer/pre_tokenizers.h"
#include "fast_llm/tokenizer/utf8.h"

namespace fast_llm::tokenizer {
namespace {

constexpr std::string_view kComponent = "bpe_trainer";

using WordCounts = std::unordered_map<std::string, int64_t>;

// Cuts text into words exactly as the written tokenizer will: special tokens out, then the pre-tokenizer.
class WordCutter {
 public:
  explicit WordCutter(const std::vector<std::string>& special_tokens) {
    pre_tokenizer_ = make_pre_tokenizer(Json::parse(byte_level_bpe_pre_tokenizer().dump()),
                                        JsonPlace{"(trained tokenizer)", "pre_tokenizer"});
    if (special_tokens.empty()) return;
    Json list = Json::array();
    std::unordered_map<std::string, int32_t> ids;
    for (size_t i = 0; i < special_tokens.size(); ++i) {
      list.push_back({{"content", special_tokens[i]}, {"id", i}, {"special", true}, {"normalized", false}});
      ids[special_tokens[i]] = static_cast<int32_t>(i);
    }
    added_ = std::make_unique<AddedVocabulary>(
        list, JsonPlace{"(trained tokenizer)", "added_tokens"}, nullptr,
        [&ids](std::string_view content) -> std::optional<int32_t> {
          const auto it = ids.find(std::string(content));
          return it == ids.end() ? std::nullopt : std::optional<int32_t>(it->second);
        },
        static_cast<int64_t>(special_tokens.size()));
  }

  void count(std::string_view document, WordCounts& counts, int64_t& words) const {
    const std::string text = to_valid_utf8(document);
    std::vector<TextPiece> pieces;
    if (added_) {
      for (TextSegment& segment : added_->split(text, nullptr))
        if (!segment.id) pieces.push_back({std::move(segment.text), segment.at_text_start});
    } else {
      pieces.push_back({text, true});
    }
    pre_tokenizer_->pre_tokenize(pieces);
    for (TextPiece& piece : pieces) {
      ++counts[std::move(piece.text)];
      ++words;
    }
  }

 private:
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<AddedVocabulary> added_;
};

// The distinct words of `documents` with their counts, sorted by word; `words`: how many in all.
std::vector<std::pair<std::string, int64_t>> count_words(std::span<const std::string_view> documents,
                                                         const BpeTrainerOptions& options, int64_t& words) {
  const WordCutter cutter(options.special_tokens);
  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, std::min<int>(threads, static_cast<int>(documents.size())));
  std::vector<WordCounts> counts(threads);
  std::vector<int64_t> word_totals(threads, 0);
  std::vector<std::exception_ptr> failures(threads);
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0};
  auto work = [&](int thread) {
    try {
      for (size_t i = next++; i < documents.size(); i = next++) {
        cutter.count(documents[i], counts[thread], word_totals[thread]);
        ++done;
        if (thread == 0 && options.progress)
          options.progress({BpeTrainingProgress::Stage::counting_words, done.load(),
                            static_cast<int64_t>(documents.size())});
      }
    } catch (...) {
      failures[thread] = std::current_exception();
      next = documents.size();
    }
  };
  std::vector<std::thread> workers;
  for (int thread = 1; thread < threads; ++thread) workers.emplace_back(work, thread);
  work(0);
  for (std::thread& worker : workers) worker.join();
  for (const std::exception_ptr& failure : failures)
    if (failure) std::rethrow_exception(failure);

  WordCounts& all = counts[0];
  for (int thread = 1; thread < threads; ++thread) {
    for (auto& [word, count] : counts[thread]) all[word] += count;
    WordCounts().swap(counts[thread]);
  }
  words = 0;
  for (const int64_t total : word_totals) words += total;
  std::vector<std::pair<std::string, int64_t>> sorted(std::make_move_iterator(all.begin()),
                                                      std::make_move_iterator(all.end()));
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// A candidate merge: `count` was the pair's count when pushed; `positions` indexes the list of words that may hold it.
struct HeapEntry {
  int64_t count;
  uint64_t pair;
  size_t positions;
};

// Max-heap order: the larger count first, then the smaller (left id, right id).
struct LowerPriority {
  bool operator()(const HeapEntry& a, const HeapEntry& b) const {
    return a.count != b.count ? a.count < b.count : a.pair > b.pair;
  }
};

// Replaces every non-overlapping (a, b) of `symbols`, left to right, by `merged`, reporting the change of each
// neighbouring pair (-1 for a pair that is gone, +1 for a new one) to `change`.
template <class Change>
void merge_word(std::vector<int32_t>& symbols, int32_t a, int32_t b, int32_t merged, Change&& change) {
  const size_t n = symbols.size();
  size_t out = 0;
  for (size_t i = 0; i < n;) {
    if (i + 1 < n && symbols[i] == a && symbols[i + 1] == b) {
      if (out > 0) {
        change(pair_key(symbols[out - 1], a), -1);
        change(pair_key(symbols[out - 1], merged), 1);
      }
      if (i + 2 < n) {
        change(pair_key(b, symbols[i + 2]), -1);
        change(pair_key(merged, symbols[i + 2]), 1);
      }
      symbols[out++] = merged;
      i += 2;
    } else {
      symbols[out++] = symbols[i++];
    }
  }
  symbols.resize(out);
}

}  // namespace

TrainedBpe train_byte_level_bpe(std::span<const std::string_view> documents, const BpeTrainerOptions& options) {
  std::unordered_set<std::string> seen_special;
  for (const std::string& token : options.special_tokens) {
    FLM_CHECK(!token.empty(), kComponent, "a special token cannot be empty");
    FLM_CHECK(is_valid_utf8(token), kComponent, "special token {:?} is not valid UTF-8", token);
    FLM_CHECK(seen_special.insert(token).second, kComponent, "special token {:?} is given twice", token);
  }

  TrainedBpe trained;
  const std::vector<std::pair<std::string, int64_t>> word_counts = count_words(documents, options, trained.words);
  trained.distinct_words = static_cast<int64_t>(word_counts.size());
  if (options.progress) options.progress({BpeTrainingProgress::Stage::merging, 0, options.vocab_size});

  // Vocabulary: special tokens, then the alphabet by code point (the byte-level characters are U+0021..U+0143).
  std::vector<std::string>& vocabulary = trained.vocabulary;
  std::unordered_map<std::string, int32_t> token_ids;
  for (const std::string& token : options.special_tokens) {
    token_ids.emplace(token, static_cast<int32_t>(vocabulary.size()));
    vocabulary.push_back(token);
  }
  std::vector<bool> in_alphabet;
  auto add_to_alphabet = [&in_alphabet](char32_t c) {
    if (c >= in_alphabet.size()) in_alphabet.resize(c + 1, false);
    in_alphabet[c] = true;
  };
  if (options.full_byte_alphabet) {
    std::string all_bytes(256, '\0');
    for (int byte = 0; byte < 256; ++byte) all_bytes[byte] = static_cast<char>(byte);
    std::string mapped;
    append_byte_level(mapped, all_bytes);
    for (size_t position = 0; position < mapped.size();) add_to_alphabet(next_code_point(mapped, position));
  }
  for (const auto& [word, count] : word_counts)
    for (size_t position = 0; position < word.size();) add_to_alphabet(next_code_point(word, position));
  std::vector<int32_t> character_ids(in_alphabet.size(), -1);
  for (char32_t c = 0; c < in_alphabet.size(); ++c) {
    if (!in_alphabet[c]) continue;
    std::string token;
    append_utf8(token, c);
    // A special token of one character keeps its id (the library does the same).
    const auto [it, inserted] = token_ids.emplace(token, static_cast<int32_t>(vocabulary.size()));
    if (inserted) vocabulary.push_back(token);
    character_ids[c] = it->second;
  }
  FLM_CHECK(options.vocab_size >= static_cast<int64_t>(vocabulary.size()), kComponent,
            "vocab_size {} cannot hold the {} special tokens and the {} characters of the alphabet", options.vocab_size,
            options.special_tokens.size(), vocabulary.size() - options.special_tokens.size());

  // Words as symbol ids, and the initial pair counts with, for each pair, the words that hold it.
  std::vector<std::vector<int32_t>> words(word_counts.size());
  std::vector<int64_t> counts(word_counts.size());
  std::unordered_map<uint64_t, int64_t> pair_counts;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;
  for (size_t w = 0; w < word_counts.size(); ++w) {
    const std::string& word = word_counts[w].first;
    counts[w] = word_counts[w].second;
    for (size_t position = 0; position < word.size();)
      words[w].push_back(character_ids[next_code_point(word, position)]);
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const uint64_t pair = pair_key(words[w][i], words[w][i + 1]);
      pair_counts[pair] += counts[w];
      std::vector<int32_t>& holders = pair_words[pair];
      if (holders.empty() || holders.back() != static_cast<int32_t>(w)) holders.push_back(static_cast<int32_t>(w));
    }
  }
  std::vector<std::vector<int32_t>> positions;
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, LowerPriority> heap;
  for (auto& [pair, holders] : pair_words) {
    positions.push_back(std::move(holders));
    heap.push({pair_counts[pair], pair, positions.size() - 1});
  }
  pair_words.clear();

  std::unordered_map<uint64_t, std::vector<int32_t>> new_pair_words;
  while (static_cast<int64_t>(vocabulary.size()) < options.vocab_size && !heap.empty()) {
    HeapEntry top = heap.top();
    heap.pop();
    const int64_t current = pair_counts[top.pair];
    if (current != top.count) {
      // Counts only fall after a pair is pushed (new pairs are pushed again), so this entry was stale: re-rank it.
      if (current > 0) heap.push({current, top.pair, top.positions});
      continue;
    }
    if (top.count < 1) break;
    const int32_t left = static_cast<int32_t>(top.pair >> 32), right = static_cast<int32_t>(top.pair & 0xFFFFFFFFu);
    std::string merged_token = vocabulary[left] + vocabulary[right];
    const auto [it, inserted] = token_ids.emplace(std::move(merged_token), static_cast<int32_t>(vocabulary.size()));
    if (inserted) vocabulary.push_back(it->first);
    const int32_t merged = it->second;
    trained.merges.emplace_back(left, right);

    for (const int32_t w : positions[top.positions]) {
      merge_word(words[w], left, right, merged, [&](uint64_t pair, int change) {
        pair_counts[pair] += change * counts[w];
        if (change > 0) {
          std::vector<int32_t>& holders = new_pair_words[pair];
          if (holders.empty() || holders.back() != w) holders.push_back(w);
        }
      });
    }
    std::vector<int32_t>().swap(positions[top.positions]);
    for (auto& [pair, holders] : new_pair_words) {
      const int64_t count = pair_counts[pair];
      if (count <= 0) continue;
      positions.push_back(std::move(holders));
      heap.push({count, pair, positions.size() - 1});
    }
    new_pair_words.clear();
    if (options.progress && trained.merges.size() % 64 == 0)
      options.progress({BpeTrainingProgress::Stage::merging, static_cast<int64_t>(vocabulary.size()),
                        options.vocab_size});
  }
  if (options.progress)
    options.progress(
        {BpeTrainingProgress::Stage::merging, static_cast<int64_t>(vocabulary.size()), options.vocab_size});
  return trained;
}

}  // namespace fast_llm::tokenizer
