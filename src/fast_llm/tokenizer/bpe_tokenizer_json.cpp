// tokenizer.json and tokenizer_config.json of a trained byte-level BPE tokenizer (see bpe_tokenizer_json.h).
#include "fast_llm/tokenizer/bpe_tokenizer_json.h"

#include "fast_llm/core/error.h"
#include "fast_llm/core/file_writer.h"

namespace fast_llm::tokenizer {
namespace {

using OrderedJson = nlohmann::ordered_json;

OrderedJson byte_level(bool add_prefix_space, bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true},
          {"use_regex", use_regex}};
}

// `tokenizer.encode(text)` with special tokens gives [BOS] + text (a pair: [BOS] A [BOS] B), as Llama 3's template.
OrderedJson bos_template(const std::string& bos) {
  auto special = [&bos](int type_id) { return OrderedJson{{"SpecialToken", {{"id", bos}, {"type_id", type_id}}}}; };
  auto sequence = [](const char* id, int type_id) {
    return OrderedJson{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
  };
  OrderedJson special_tokens = OrderedJson::object();
  special_tokens[bos] = {{"id", bos}, {"ids", {0}}, {"tokens", {bos}}};
  return {{"type", "TemplateProcessing"},
          {"single", {special(0), sequence("A", 0)}},
          {"pair", {special(0), sequence("A", 0), special(1), sequence("B", 1)}},
          {"special_tokens", special_tokens}};
}

}  // namespace

OrderedJson byte_level_bpe_pre_tokenizer() {
  OrderedJson split = {{"type", "Split"},
                       {"pattern", {{"Regex", kLlama3SplitPattern}}},
                       {"behavior", "Isolated"},
                       {"invert", false}};
  return {{"type", "Sequence"}, {"pretokenizers", {split, byte_level(false, false)}}};
}

OrderedJson byte_level_bpe_tokenizer_json(const TrainedBpe& trained, const std::vector<std::string>& special_tokens) {
  OrderedJson added_tokens = OrderedJson::array();
  for (size_t id = 0; id < special_tokens.size(); ++id)
    added_tokens.push_back({{"id", id},
                            {"content", special_tokens[id]},
                            {"single_word", false},
                            {"lstrip", false},
                            {"rstrip", false},
                            {"normalized", false},
                            {"special", true}});
  OrderedJson vocabulary = OrderedJson::object();
  for (size_t id = 0; id < trained.vocabulary.size(); ++id) vocabulary[trained.vocabulary[id]] = id;
  OrderedJson merges = OrderedJson::array();
  for (const auto& [left, right] : trained.merges)
    merges.push_back({trained.vocabulary.at(left), trained.vocabulary.at(right)});

  OrderedJson model = {{"type", "BPE"},
                       {"dropout", nullptr},
                       {"unk_token", nullptr},
                       {"continuing_subword_prefix", nullptr},
                       {"end_of_word_suffix", nullptr},
                       {"fuse_unk", false},
                       {"byte_fallback", false},
                       {"ignore_merges", false},
                       {"vocab", std::move(vocabulary)},
                       {"merges", std::move(merges)}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", std::move(added_tokens)},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level_bpe_pre_tokenizer()},
          {"post_processor", special_tokens.empty() ? OrderedJson() : bos_template(special_tokens[0])},
          {"decoder", byte_level(true, true)},
          {"model", std::move(model)}};
}

void write_byte_level_bpe_tokenizer(const std::filesystem::path& folder, const TrainedBpe& trained,
                                    const TokenizerFilesOptions& options) {
  FLM_CHECK(!options.special_tokens.empty(), "bpe_trainer",
            "a tokenizer file needs a special token for BOS and EOS (the first special token)");
  FLM_CHECK(options.model_max_length > 0, "bpe_trainer", "model_max_length must be positive, got {}",
            options.model_max_length);
  const std::string& bos = options.special_tokens[0];

  FileWriter tokenizer_file(folder / "tokenizer.json", {.component = "bpe_trainer"});
  tokenizer_file.write(byte_level_bpe_tokenizer_json(trained, options.special_tokens).dump(2) + "\n");
  tokenizer_file.commit();

  // What transformers' AutoTokenizer reads beside tokenizer.json: the tokenizer class, BOS/EOS and the special tokens.
  OrderedJson added_tokens_decoder = OrderedJson::object();
  for (size_t id = 0; id < options.special_tokens.size(); ++id)
    added_tokens_decoder[std::to_string(id)] = {{"content", options.special_tokens[id]},
                                                {"lstrip", false},
                                                {"normalized", false},
                                                {"rstrip", false},
                                                {"single_word", false},
                                                {"special", true}};
  OrderedJson additional = OrderedJson::array();
  for (size_t id = 1; id < options.special_tokens.size(); ++id) additional.push_back(options.special_tokens[id]);
  const OrderedJson config = {{"added_tokens_decoder", std::move(added_tokens_decoder)},
                              {"additional_special_tokens", std::move(additional)},
                              {"bos_token", bos},
                              {"eos_token", bos},
                              {"clean_up_tokenization_spaces", false},
                              {"model_max_length", options.model_max_length},
                              {"tokenizer_class", "PreTrainedTokenizerFast"}};
  FileWriter config_file(folder / "tokenizer_config.json", {.component = "bpe_trainer"});
  config_file.write(config.dump(2) + "\n");
  config_file.commit();
}

}  // namespace fast_llm::tokenizer
