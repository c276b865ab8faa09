// Fuzz target: a Hugging Face `tokenizer.json`, loaded as Tokenizer::load loads it (tokenizer/), then, when accepted,
// a fixed text with added-token strings, several scripts and invalid UTF-8 encoded and its ids decoded back.
#include "fuzz_target.h"

#include "fast_llm/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fast_llm::fuzz::write_input("tokenizer.json", {data, size});
  fast_llm::fuzz::refusing_cleanly([&] {
    const auto tokenizer = fast_llm::tokenizer::Tokenizer::load(path);
    const std::string text = "Hello, world! <s>ab</s> <|endoftext|> 12345 \t\n  caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 "
                             "\xF0\x9F\x98\x80 \xFF\xC3( end";
    const auto ids = tokenizer->encode(text, true);
    tokenizer->decode(ids);
    tokenizer->decode(ids, true);
  });
  return 0;
}
