// Exactness against Hugging Face's own library: reference_tokenize.js (run by ctest just before, as the fixture
// tokenizer_reference_outputs) encoded and decoded a varied corpus with tokenizers@0.23.2 for each tokenizer.json
// that tools/install_tokenizer_references.sh installed; here our tokenizer must give the same ids and the same
// decoded text for every document. A missing reference file fails the test: it never skips.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "fast_llm/tokenizer/tokenizer.h"

namespace fast_llm::tokenizer {
namespace {

std::string decode_base64(const std::string& text) {
  std::string out;
  int buffer = 0, bits = 0;
  for (const char c : text) {
    int value;
    if (c >= 'A' && c <= 'Z') value = c - 'A';
    else if (c >= 'a' && c <= 'z') value = c - 'a' + 26;
    else if (c >= '0' && c <= '9') value = c - '0' + 52;
    else if (c == '+') value = 62;
    else if (c == '/') value = 63;
    else continue;
    buffer = (buffer << 6) | value;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xFF);
    }
  }
  return out;
}

const nlohmann::json& references() {
  static const nlohmann::json json = [] {
    const char* file = std::getenv("FAST_LLM_TOKENIZER_REFERENCE");
    if (file == nullptr) throw std::runtime_error("FAST_LLM_TOKENIZER_REFERENCE is not set (run through ctest)");
    std::ifstream stream(file);
    if (!stream) throw std::runtime_error(std::string("cannot open ") + file);
    std::stringstream buffer;
    buffer << stream.rdbuf();
    return nlohmann::json::parse(buffer.str());
  }();
  return json;
}

std::vector<int32_t> ids_of(const nlohmann::json& list) { return list.get<std::vector<int32_t>>(); }

void check_tokenizer(const std::string& name) {
  const auto& json = references();
  ASSERT_TRUE(json["tokenizers"].contains(name)) << name << " is missing from the reference outputs";
  const auto& reference = json["tokenizers"][name];
  const auto tokenizer = Tokenizer::load(reference["file"].get<std::string>());
  EXPECT_EQ(tokenizer->vocab_size(), reference["id_end"].get<int64_t>());
  const auto& documents = json["documents_base64"];
  ASSERT_EQ(documents.size(), reference["documents"].size());
  std::vector<std::string> texts;
  for (size_t i = 0; i < documents.size(); ++i) {
    const std::string text = decode_base64(documents[i].get<std::string>());
    texts.push_back(text);
    const auto& expected = reference["documents"][i];
    SCOPED_TRACE(name + " document " + std::to_string(i) + ": " + text.substr(0, 80));
    const auto ids = tokenizer->encode(text);
    EXPECT_EQ(ids, ids_of(expected["ids"]));
    const auto ids_with_special = tokenizer->encode(text, true);
    EXPECT_EQ(ids_with_special, ids_of(expected["ids_with_special_tokens"]));
    EXPECT_EQ(tokenizer->decode(ids_of(expected["ids"])), expected["decoded"].get<std::string>());
    EXPECT_EQ(tokenizer->decode(ids_of(expected["ids_with_special_tokens"])),
              expected["decoded_with_special_tokens"].get<std::string>());
    EXPECT_EQ(tokenizer->decode(ids_of(expected["ids_with_special_tokens"]), true),
              expected["decoded_skip_special_tokens"].get<std::string>());
    EXPECT_EQ(tokenizer->decode(ids_of(expected["half_ids"])), expected["decoded_half"].get<std::string>());
  }
  // The batch path gives the same ids as one by one.
  std::vector<std::string_view> views(texts.begin(), texts.end());
  const auto batch = tokenizer->encode_batch(views, false, 4);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], ids_of(reference["documents"][i]["ids"])) << i;
}

TEST(TokenizerExactness, Llama3) { check_tokenizer("llama3"); }
TEST(TokenizerExactness, Qwen3) { check_tokenizer("qwen3"); }
TEST(TokenizerExactness, Llama2) { check_tokenizer("llama2"); }
TEST(TokenizerExactness, Gemma3) { check_tokenizer("gemma3"); }
TEST(TokenizerExactness, DeepSeekV3) { check_tokenizer("deepseek_v3"); }
TEST(TokenizerExactness, Gpt4o) { check_tokenizer("gpt4o"); }
TEST(TokenizerExactness, GptOss) { check_tokenizer("gptoss"); }

}  // namespace
}  // namespace fast_llm::tokenizer
