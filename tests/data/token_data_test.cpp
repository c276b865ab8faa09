// Policy-gradient token data (advantages, old log-probabilities): a file built byte by byte from Fast-LLM's layout
// (`token_data` sections, float32, shape []) read back and cropped to windows; the writer's round trip and reader
// config; the batch shifting them by one as the labels, with each label's document; errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data_test_util.h"
#include "fast_llm/data/batch.h"
#include "fast_llm/data/memmap.h"

namespace fast_llm::data {
namespace {

using testing::big;
using testing::error_message;
using testing::little;
using testing::read_bytes;
using testing::TemporaryFolder;
using testing::write_file;

//   33   "lm begin" 8
//   41   token section: "token begin" 11, 5 x uint16 = 10, 3 x int64 = 24, "token end" 9          -> ends at 95
//   95   advantages: "token data begin" 16, 5 x float32 = 20, 3 x int64 = 24, "token data end" 14 -> ends at 169
//   169  old_log_probabilities: the same                                                        -> ends at 243
//   243  "lm end" 6 -> 249
std::string spec_file(bool with_old_log_probabilities = true) {
  std::string p = "lm begin";
  p += "token begin";
  for (uint16_t token : {7, 8, 9, 10, 11}) p += little(token);
  for (int64_t cumsum : {0, 2, 5}) p += little(cumsum);
  p += "token end";
  for (float base : {0.5f, -3.0f}) {
    p += "token data begin";
    for (int index = 0; index < 5; ++index) p += little(base + float(index));
    for (int64_t cumsum : {0, 2, 5}) p += little(cumsum);
    p += "token data end";
  }
  p += "lm end";
  std::string json =
      R"({"type": "language_model", "begin": 33, "end": 249,)"
      R"( "tokens": {"type": "token", "begin": 41, "end": 95, "num_documents": 2, "num_tokens": 5, "data_type": "uint16"},)"
      R"( "loss_masking_spans": {"type": "none"}, "chosen_spans": {"type": "none"}, "rejected_spans": {"type": "none"},)"
      R"( "image_patches": {"type": "none"}, "advantages": {"type": "token_data", "begin": 95, "end": 169,)"
      R"( "num_documents": 2, "num_tokens": 5, "shape": [], "data_type": "float32"},)";
  json += with_old_log_probabilities
              ? R"( "old_log_probabilities": {"type": "token_data", "begin": 169, "end": 243, "num_documents": 2,)"
                R"( "num_tokens": 5, "shape": [], "data_type": "float32"}})"
              : R"( "old_log_probabilities": {"type": "none"}})";
  EXPECT_EQ(p.size(), 249u - 33u);
  return std::string("fast_llm_prepared_dataset") + big(33 + p.size(), 8) + p + big(json.size(), 4) + json;
}

TEST(TokenData, ReadsAFileBuiltFromTheSpecAndCropsWindows) {
  TemporaryFolder folder;
  write_file(folder / "spec.fast_llm_dataset", spec_file());
  const MemmapDataset dataset("spec", folder / "spec.fast_llm_dataset");
  EXPECT_TRUE(dataset.has_token_data());
  const Document second = dataset.get_document(1);
  EXPECT_EQ(second.tokens, (std::vector<int64_t>{9, 10, 11}));
  EXPECT_EQ(second.advantages, (std::vector<float>{2.5f, 3.5f, 4.5f}));
  EXPECT_EQ(second.old_log_probabilities, (std::vector<float>{-1.0f, 0.0f, 1.0f}));
  const Document window = dataset.get_document(1, 1, 2);
  EXPECT_EQ(window.advantages, (std::vector<float>{3.5f}));
  EXPECT_EQ(window.old_log_probabilities, (std::vector<float>{0.0f}));

  // One section without the other: an error naming the file.
  write_file(folder / "half.fast_llm_dataset", spec_file(false));
  const std::string message = error_message([&] { MemmapDataset("half", folder / "half.fast_llm_dataset"); });
  EXPECT_NE(message.find("half.fast_llm_dataset"), std::string::npos) << message;
}

TEST(TokenData, WriterRoundTripAndReaderConfig) {
  TemporaryFolder folder;
  std::vector<Document> documents(3);
  documents[0].tokens = {1, 2, 3};
  documents[0].advantages = {0.25f, 0.25f, 0.25f};
  documents[0].old_log_probabilities = {-1.5f, -2.5f, -0.125f};
  documents[2].tokens = {4, 5};
  documents[2].advantages = {-1.0f, -1.0f};
  documents[2].old_log_probabilities = {-3.0f, -4.0f};
  const auto path = folder / "rollouts.fast_llm_dataset";
  MemmapWriter writer(path, {.token_data = true});
  for (const Document& document : documents) writer.add_document(document);
  writer.finish();
  const MemmapDataset dataset("rollouts", path);
  ASSERT_TRUE(dataset.has_token_data());
  for (int64_t index = 0; index < 3; ++index) {
    const Document read = dataset.get_document(index);
    EXPECT_EQ(read.tokens, documents[size_t(index)].tokens);
    EXPECT_EQ(read.advantages, documents[size_t(index)].advantages);
    EXPECT_EQ(read.old_log_probabilities, documents[size_t(index)].old_log_probabilities);
  }
  // The reader config as Fast-LLM's TokenDataReaderConfig.
  const std::string bytes = read_bytes(path);
  uint64_t offset = 0;
  for (int index = 0; index < 8; ++index) offset = (offset << 8) | uint8_t(bytes[size_t(25 + index)]);
  const nlohmann::json config = nlohmann::json::parse(bytes.substr(size_t(offset) + 4));
  for (const char* key : {"advantages", "old_log_probabilities"}) {
    EXPECT_EQ(config[key]["type"], "token_data") << key;
    EXPECT_EQ(config[key]["data_type"], "float32") << key;
    EXPECT_EQ(config[key]["shape"], nlohmann::json::array()) << key;
    EXPECT_EQ(config[key]["num_tokens"], 5) << key;
    EXPECT_EQ(config[key]["num_documents"], 3) << key;
  }

  // A document without its token data, for a writer that writes it: an error, no file.
  MemmapWriter bad(folder / "bad.fast_llm_dataset", {.token_data = true});
  Document plain;
  plain.tokens = {1, 2};
  EXPECT_NE(error_message([&] { bad.add_document(plain); }).find("0 advantages"), std::string::npos);
}

TEST(TokenData, BatchShiftsThemByOneAsTheLabels) {
  std::vector<Document> documents(2);
  documents[0].tokens = {10, 11, 12};
  documents[0].advantages = {1, 2, 3};
  documents[0].old_log_probabilities = {-1, -2, -3};
  documents[1].tokens = {20, 21, 22};
  documents[1].advantages = {4, 5, 6};
  documents[1].old_log_probabilities = {-4, -5, -6};
  // 6 tokens for micro_batch_size 4 + 1 predicted token: the last document's last token is cut off (truncation).
  documents[1].tokens.pop_back();
  documents[1].advantages.pop_back();
  documents[1].old_log_probabilities.pop_back();
  const Batch batch = make_batch(documents, {.micro_batch_size = 4});
  ASSERT_TRUE(batch.has_token_data());
  // Labels: 11, 12, (20: document start, masked), 21.
  EXPECT_EQ(batch.labels_at(1)[0], 11);
  EXPECT_EQ(batch.labels_at(1)[2], kIgnoredLabel);
  EXPECT_EQ(batch.labels_at(1)[3], 21);
  EXPECT_EQ(batch.advantages, (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(batch.old_log_probabilities, (std::vector<float>{-2, -3, -4, -5}));
  EXPECT_EQ(batch.label_documents, (std::vector<int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(batch.num_sample_documents, 2);

  // Padding: labels past the documents get 0 and no document.
  const Batch padded = make_batch({documents[0]}, {.micro_batch_size = 4});
  EXPECT_EQ(padded.advantages, (std::vector<float>{2, 3, 0, 0}));
  EXPECT_EQ(padded.label_documents, (std::vector<int32_t>{0, 0, -1, -1}));
  EXPECT_EQ(padded.num_sample_documents, 1);

  // Documents with and without token data in one sample: an error.
  Document plain;
  plain.tokens = {1, 2};
  EXPECT_NE(error_message([&] { make_batch({documents[0], plain}, {.micro_batch_size = 4}); }).find("cannot be mixed"),
            std::string::npos);
}

}  // namespace
}  // namespace fast_llm::data
