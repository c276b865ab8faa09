// BPE tokenization of one word as Hugging Face's library does it (see bpe_model.h).
#include "fast_llm/tokenizer/bpe_model.h"

#include <atomic>
#include <memory>
#include <algorithm>
#include <functional>

#include "fast_llm/tokenizer/utf8.h"

namespace fast_llm::tokenizer {
namespace {

// One symbol of the word being merged: a token id and its neighbours; `alive` is false once merged into its left.
struct Symbol {
  int32_t id;
  int32_t previous;
  int32_t next;
  bool alive;
};

// Below this many symbols a linear scan for the best pair beats the priority queue.
constexpr size_t kLinearScanSymbols = 48;

std::atomic<uint64_t> next_model_serial{1};

// Word -> ids of one model in one thread; stops taking entries when full (as Hugging Face's cache does). 32768 words
// (a few MB) hold the frequent words of any language, and keep a many-core machine's caches far below a gigabyte.
struct WordCache {
  static constexpr size_t kEntries = size_t{1} << 15;
  uint64_t model_serial;
  std::unordered_map<std::string, std::vector<int32_t>, StringViewHash, std::equal_to<>> entries;
};

// This thread's word cache for the model `serial`; a thread keeps the caches of its last few models.
WordCache& thread_word_cache(uint64_t serial) {
  constexpr size_t kModelsPerThread = 4;
  thread_local std::vector<std::unique_ptr<WordCache>> caches;
  for (size_t i = 0; i < caches.size(); ++i) {
    if (caches[i]->model_serial == serial) {
      if (i > 0) std::swap(caches[i], caches[0]);
      return *caches[0];
    }
  }
  if (caches.size() == kModelsPerThread) caches.pop_back();
  caches.insert(caches.begin(), std::make_unique<WordCache>());
  caches[0]->model_serial = serial;
  return *caches[0];
}

}  // namespace

BpeModel::BpeModel(const Json& model, const JsonPlace& place) : serial_(next_model_serial++) {
  if (json_present(model, "dropout")) json_unsupported(place / "dropout", "BPE dropout (random merges)");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto value = json_optional_string(model, affix, place);
    if (value && !value->empty()) json_unsupported(place / affix, fmt::format("a non-empty {}", affix));
  }
  byte_fallback_ = json_bool(model, "byte_fallback", place, false);
  fuse_unk_ = json_bool(model, "fuse_unk", place, false);
  ignore_merges_ = json_bool(model, "ignore_merges", place, false);

  read_model_vocabulary(model, place, vocabulary_, tokens_, has_token_);
  if (const auto unk = json_optional_string(model, "unk_token", place)) {
    unk_id_ = find_token(vocabulary_, *unk);
    if (!unk_id_) json_error(place / "unk_token", fmt::format("\"{}\" is not in the vocabulary", *unk));
  }
  for (int byte = 0; byte < 256; ++byte) {
    const auto id = find_token(vocabulary_, fmt::format("<0x{:02X}>", byte));
    byte_fallback_ids_[byte] = id ? *id : -1;
  }

  bmp_character_ids_.assign(0x10000, -1);
  for (const auto& [token, id] : vocabulary_) {
    size_t position = 0;
    if (!token.empty() && is_valid_utf8(token)) {
      const char32_t code_point = next_code_point(token, position);
      if (position == token.size() && code_point < 0x10000) bmp_character_ids_[code_point] = id;
    }
  }

  const Json& merges = json_required(model, "merges", place);
  if (!merges.is_array()) json_error(place / "merges", "expected an array");
  // At most half full, so that probes stay short.
  size_t capacity = 16;
  while (capacity < merges.size() * 2) capacity *= 2;
  merge_keys_.assign(capacity, kEmptyKey);
  merge_values_.resize(capacity);
  merge_mask_ = capacity - 1;
  merge_shift_ = 64 - __builtin_ctzll(capacity);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& merge = merges[rank];
    const JsonPlace merge_place = (place / "merges")[rank];
    std::string left, right;
    if (merge.is_string()) {
      // "a b": exactly one space, as Hugging Face's reader requires.
      const std::string& text = merge.get_ref<const std::string&>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        json_error(merge_place, fmt::format("expected two tokens separated by one space, got \"{}\"", text));
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      json_error(merge_place, fmt::format("expected \"a b\" or [\"a\", \"b\"], got {}", merge.dump()));
    }
    const auto left_id = find_token(vocabulary_, left), right_id = find_token(vocabulary_, right);
    const auto merged_id = find_token(vocabulary_, left + right);
    if (!left_id || !right_id || !merged_id)
      json_error(merge_place, fmt::format("token \"{}\" is not in the vocabulary",
                                          !left_id ? left : !right_id ? right : left + right));
    // A repeated pair keeps its last rank, as in Hugging Face's map.
    insert_merge(pair_key(*left_id, *right_id), Merge{static_cast<int32_t>(rank), *merged_id});
  }
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

void BpeModel::insert_merge(uint64_t key, Merge merge) {
  for (size_t slot = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;; slot = (slot + 1) & merge_mask_) {
    if (merge_keys_[slot] == key || merge_keys_[slot] == kEmptyKey) {
      merge_keys_[slot] = key;
      merge_values_[slot] = merge;
      return;
    }
  }
}

int32_t BpeModel::character_id(std::string_view character) const {
  if (character.size() <= 3) {
    size_t position = 0;
    return bmp_character_ids_[next_code_point(character, position)];
  }
  const auto id = find_token(vocabulary_, character);
  return id ? *id : -1;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  // A whole word of the vocabulary needs no merging: found without the cache.
  if (ignore_merges_) {
    if (const auto id = find_token(vocabulary_, word)) {
      ids.push_back(*id);
      return;
    }
  }
  if (word.size() > kCacheMaxWordBytes) {
    tokenize_uncached(word, ids);
    return;
  }
  WordCache& cache = thread_word_cache(serial_);
  const auto it = cache.entries.find(word);
  if (it != cache.entries.end()) {
    ids.insert(ids.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t first = ids.size();
  tokenize_uncached(word, ids);
  if (cache.entries.size() < WordCache::kEntries)
    cache.entries.emplace(std::string(word), std::vector<int32_t>(ids.begin() + first, ids.end()));
}

void BpeModel::tokenize_uncached(std::string_view word, std::vector<int32_t>& ids) const {
  // Characters to initial symbols.
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  bool previous_is_unk = false;
  for (size_t position = 0; position < word.size();) {
    const size_t length = utf8_length(static_cast<unsigned char>(word[position]));
    const std::string_view character = word.substr(position, length);
    position += length;
    const auto push = [&](int32_t id) {
      symbols.push_back({id, static_cast<int32_t>(symbols.size()) - 1, static_cast<int32_t>(symbols.size()) + 1, true});
    };
    if (const int32_t id = character_id(character); id >= 0) {
      push(id);
      previous_is_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes_known = true;
      for (const char byte : character) all_bytes_known &= byte_fallback_ids_[static_cast<unsigned char>(byte)] >= 0;
      if (all_bytes_known) {
        for (const char byte : character) push(byte_fallback_ids_[static_cast<unsigned char>(byte)]);
        previous_is_unk = false;
        continue;
      }
    }
    if (unk_id_) {
      if (!(fuse_unk_ && previous_is_unk)) push(*unk_id_);
      previous_is_unk = true;
    }
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  const auto merge_at = [&](int32_t left, int32_t merged_id) {
    Symbol& first = symbols[left];
    Symbol& second = symbols[first.next];
    first.id = merged_id;
    second.alive = false;
    first.next = second.next;
    if (second.next >= 0) symbols[second.next].previous = left;
  };

  if (symbols.size() <= kLinearScanSymbols) {
    while (true) {
      int32_t best = -1, best_rank = INT32_MAX, best_id = 0;
      for (int32_t index = 0; index >= 0 && symbols[index].next >= 0; index = symbols[index].next) {
        const Merge* merge = find_merge(symbols[index].id, symbols[symbols[index].next].id);
        if (merge != nullptr && merge->rank < best_rank) {
          best = index;
          best_rank = merge->rank;
          best_id = merge->merged_id;
        }
      }
      if (best < 0) break;
      merge_at(best, best_id);
    }
  } else {
    // A candidate is (rank << 32 | left symbol): ordering the integers orders by rank, then leftmost. A rank names
    // one pair, so a candidate is still valid when its left symbol and the right neighbour form that pair's rank.
    std::vector<uint64_t> heap;
    heap.reserve(symbols.size());
    const auto consider = [&](int32_t left) {
      if (left < 0 || symbols[left].next < 0) return;
      if (const Merge* merge = find_merge(symbols[left].id, symbols[symbols[left].next].id)) {
        heap.push_back((static_cast<uint64_t>(merge->rank) << 32) | static_cast<uint32_t>(left));
        std::push_heap(heap.begin(), heap.end(), std::greater<>());
      }
    };
    for (int32_t index = 0; index + 1 < static_cast<int32_t>(symbols.size()); ++index) {
      if (const Merge* merge = find_merge(symbols[index].id, symbols[index + 1].id))
        heap.push_back((static_cast<uint64_t>(merge->rank) << 32) | static_cast<uint32_t>(index));
    }
    std::make_heap(heap.begin(), heap.end(), std::greater<>());
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      const uint64_t candidate = heap.back();
      heap.pop_back();
      const auto left = static_cast<int32_t>(candidate & 0xFFFFFFFFu);
      const auto rank = static_cast<int32_t>(candidate >> 32);
      const Symbol& symbol = symbols[left];
      // Stale when either side changed since the candidate was queued.
      if (!symbol.alive || symbol.next < 0) continue;
      const Merge* merge = find_merge(symbol.id, symbols[symbol.next].id);
      if (merge == nullptr || merge->rank != rank) continue;
      merge_at(left, merge->merged_id);
      consider(symbols[left].previous);
      consider(left);
    }
  }
  for (int32_t index = 0; index >= 0; index = symbols[index].next) ids.push_back(symbols[index].id);
}

}  // namespace fast_llm::tokenizer
