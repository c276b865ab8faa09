// The decoders of tokenizer.json (`decoder`): they turn the token strings of a decode call back into text, each step
// rewriting the list of strings as Hugging Face's decode_chain does. Supported: ByteLevel (byte-level alphabet back to
// bytes, then lossy UTF-8), Metaspace, ByteFallback (runs of <0xXX> to text; one U+FFFD per byte of an invalid run),
// Fuse, Strip, Replace, WordPiece and Sequence; other types are refused by make_decoder.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fast_llm/tokenizer/json_fields.h"

namespace fast_llm::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// nullptr for a null decoder.
std::unique_ptr<Decoder> make_decoder(const Json& node, const JsonPlace& place);

}  // namespace fast_llm::tokenizer
