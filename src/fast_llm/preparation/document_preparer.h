// One record of the input into one document of the dataset: its text tokenized, BOS and EOS added, and character
// spans turned into token spans, exactly as Fast-LLM's GPTMemmapDatasetPreparator._prepare_sample does for
// `source_schema: {type: document}`:
//   - loss_masking_spans: [begin, last] character (code point) spans, inclusive, given as pairs or a flat list; they
//     become end-exclusive token spans.
//   - chosen_span / rejected_span (preference data): the document is `text + chosen + EOS string` followed by
//     `BOS string + text + rejected`; the chosen span covers `chosen + EOS`, the rejected span `rejected` plus the
//     final EOS token.
//   - advantages (policy-gradient data): a number per record; every token of the document gets it as its advantage and
//     0 as its old log-probability, as Fast-LLM's `has_grpo_data` preparation.
// Text with spans is tokenized piece by piece between the span boundaries (as Fast-LLM's tokenize_with_splits), so a
// span boundary is always a token boundary.
//
// Written against `const tokenizer::Tokenizer&`; safe to call from several threads at once. Bad records (not JSON, a
// missing or non-string field, spans outside the text or overlapping) are an Error naming the record's file and line.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/data/dataset.h"
#include "fast_llm/tokenizer/tokenizer.h"

namespace fast_llm::preparation {

struct DocumentOptions {
  std::string text_field = "text";
  std::optional<std::string> loss_masking_spans_field;
  std::optional<std::string> chosen_field;
  std::optional<std::string> rejected_field;
  std::optional<std::string> advantages_field;
  bool add_bos = true;
  bool add_eos = true;
  std::optional<int64_t> max_vocab_size;  // ids are taken modulo this (Fast-LLM's testing option)
  std::optional<std::string> bos_token;   // tokenizer.bos_token: replaces the tokenizer's BOS
};

class DocumentPreparer {
 public:
  // Checks that the tokenizer has the BOS / EOS the options need (errors say which option to change).
  DocumentPreparer(const tokenizer::Tokenizer& tokenizer, DocumentOptions options);

  // A JSON Lines record (`line`), at `location` ("file:line").
  data::Document from_json(std::string_view line, const std::string& location) const;
  // A whole text file (no spans) at `location` (its path); text that is not UTF-8 is an error naming the line.
  data::Document from_text(std::string_view text, const std::string& location) const;

  // Tokens of `text` with BOS / EOS as configured, and the token offset of each byte offset in `splits` (each a
  // code-point boundary of `text`, in any order): Fast-LLM's tokenize_with_splits.
  std::vector<int64_t> tokenize_with_splits(std::string_view text, const std::vector<size_t>& splits,
                                            std::vector<int64_t>& token_splits) const;

  const DocumentOptions& options() const { return options_; }

 private:
  const tokenizer::Tokenizer& tokenizer_;
  DocumentOptions options_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
  std::string bos_text_;  // the BOS and EOS tokens' strings, packed into preference documents
  std::string eos_text_;
};

}  // namespace fast_llm::preparation
