// Preference documents for the tests of shared prompt rows (data/shared_prompts.h).
#pragma once

#include <cstdint>
#include <vector>

#include "fast_llm/data/dataset.h"

namespace fast_llm::layers::testing {

// A preference document as `prepare` writes it with add_bos: BOS(1) + prompt + chosen + EOS(2), then BOS + prompt +
// rejected + EOS.
inline data::Document preference_document(const std::vector<int64_t>& prompt, const std::vector<int64_t>& chosen,
                                          const std::vector<int64_t>& rejected) {
  data::Document result{.tokens = {1}};
  const auto append = [&](const std::vector<int64_t>& tokens) {
    result.tokens.insert(result.tokens.end(), tokens.begin(), tokens.end());
  };
  append(prompt);
  const auto chosen_begin = int32_t(result.size());
  append(chosen);
  append({2});
  result.chosen_spans = {{chosen_begin, int32_t(result.size())}};
  append({1});
  append(prompt);
  const auto rejected_begin = int32_t(result.size());
  append(rejected);
  append({2});
  result.rejected_spans = {{rejected_begin, int32_t(result.size())}};
  return result;
}

}  // namespace fast_llm::layers::testing
