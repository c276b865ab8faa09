// `.fast_llm_dataset` files: round trips through the writer for every token type, files built byte by byte from the
// format description (so the reader is checked against the spec, not against our writer), and malformed files, each
// of which must be an error naming the file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/full_disk.h"
#include "data_test_util.h"
#include "fast_llm/data/config.h"
#include "fast_llm/data/memmap.h"

namespace fast_llm::data {
namespace {

using testing::big;
using testing::error_message;
using testing::little;
using testing::read_bytes;
using testing::TemporaryFolder;
using testing::write_file;

std::vector<Document> span_documents() {
  std::vector<Document> documents(4);
  documents[0].tokens = {3, 1, 4, 1, 5};
  documents[0].loss_masking_spans = {{0, 2}, {3, 5}};
  documents[1].tokens = {9};
  documents[2].tokens = {};
  documents[3].tokens = {2, 6, 5, 3, 5, 8, 9};
  documents[3].loss_masking_spans = {{2, 4}};
  for (auto& document : documents) {
    const int32_t size = int32_t(document.size());
    document.chosen_spans = {{0, size > 0 ? 1 : 0}};
    document.rejected_spans = {{size > 1 ? 1 : 0, size}};
  }
  documents[2].chosen_spans = {};
  documents[2].rejected_spans = {};
  return documents;
}

TEST(Memmap, RoundTripEveryTokenType) {
  TemporaryFolder folder;
  for (TokenDataType type : {TokenDataType::uint8, TokenDataType::int8, TokenDataType::uint16, TokenDataType::int16,
                             TokenDataType::uint32, TokenDataType::int32, TokenDataType::int64,
                             TokenDataType::uint64}) {
    SCOPED_TRACE(std::string(token_data_type_name(type)));
    std::vector<Document> documents = span_documents();
    // Extremes of the type, so a wrong width or signedness shows.
    int64_t low = 0, high = 0;
    switch (type) {
      case TokenDataType::uint8: high = 255; break;
      case TokenDataType::int8: low = -128, high = 127; break;
      case TokenDataType::uint16: high = 65535; break;
      case TokenDataType::int16: low = -32768, high = 32767; break;
      case TokenDataType::uint32: high = 4294967295; break;
      case TokenDataType::int32: low = -2147483648LL, high = 2147483647; break;
      case TokenDataType::int64: low = std::numeric_limits<int64_t>::min(), high = std::numeric_limits<int64_t>::max(); break;
      case TokenDataType::uint64: high = std::numeric_limits<int64_t>::max(); break;
    }
    documents[1].tokens = {low, high};
    std::filesystem::path path = folder / fmt::format("{}.fast_llm_dataset", token_data_type_name(type));
    testing::write_dataset(path, documents, {.data_type = type, .loss_masking_spans = true, .preference_spans = true});

    MemmapDataset dataset("round_trip", path);
    EXPECT_EQ(dataset.token_data_type(), type);
    EXPECT_TRUE(dataset.has_loss_masking_spans());
    EXPECT_TRUE(dataset.has_preference_spans());
    ASSERT_EQ(dataset.num_documents(), 4);
    EXPECT_EQ(dataset.num_tokens(), 5 + 2 + 0 + 7);
    EXPECT_EQ(dataset.document_sizes(), (std::vector<int64_t>{5, 2, 0, 7}));
    for (int64_t index = 0; index < 4; ++index) {
      Document read = dataset.get_document(index);
      EXPECT_EQ(read.tokens, documents[size_t(index)].tokens) << index;
      EXPECT_EQ(read.loss_masking_spans, documents[size_t(index)].loss_masking_spans) << index;
      EXPECT_EQ(read.chosen_spans, documents[size_t(index)].chosen_spans) << index;
      EXPECT_EQ(read.rejected_spans, documents[size_t(index)].rejected_spans) << index;
    }
  }
}

TEST(Memmap, WindowsCropTokensAndSpans) {
  TemporaryFolder folder;
  testing::write_dataset(folder / "d.fast_llm_dataset", span_documents(),
                         {.data_type = TokenDataType::uint16, .loss_masking_spans = true});
  MemmapDataset dataset("d", folder / "d.fast_llm_dataset");
  EXPECT_FALSE(dataset.has_preference_spans());
  // Document 0 = 3 1 4 1 5, spans [0, 2) and [3, 5); window [1, 4) = 1 4 1, spans [0, 1) and [2, 3).
  Document window = dataset.get_document(0, 1, 4);
  EXPECT_EQ(window.tokens, (std::vector<int64_t>{1, 4, 1}));
  EXPECT_EQ(window.loss_masking_spans, (std::vector<Range>{{0, 1}, {2, 3}}));
  // Document 3's span [2, 4) lies outside the window [4, 7).
  EXPECT_TRUE(dataset.get_document(3, 4, 7).loss_masking_spans.empty());
}

TEST(Memmap, WriterOutputFollowsTheFormat) {
  // Checks the writer's bytes against the spec directly: header, big-endian offset, JSON keys and offsets.
  TemporaryFolder folder;
  std::vector<Document> documents(2);
  documents[0].tokens = {7, 8, 9};
  documents[1].tokens = {10};
  testing::write_dataset(folder / "w.fast_llm_dataset", documents, {.data_type = TokenDataType::uint16});
  std::string bytes = read_bytes(folder / "w.fast_llm_dataset");
  ASSERT_GE(bytes.size(), 33u);
  EXPECT_EQ(bytes.substr(0, 25), "fast_llm_prepared_dataset");
  // 33 + "lm begin" 8 + "token begin" 11 + 4 x 2 token bytes + 3 x 8 cumsum bytes + "token end" 9 + "lm end" 6.
  const uint64_t config_offset = 33 + 8 + 11 + 8 + 24 + 9 + 6;
  EXPECT_EQ(bytes.substr(25, 8), big(config_offset, 8));
  EXPECT_EQ(bytes.substr(33, 8), "lm begin");
  EXPECT_EQ(bytes.substr(41, 11), "token begin");
  EXPECT_EQ(bytes.substr(52, 8), little<uint16_t>(7) + little<uint16_t>(8) + little<uint16_t>(9) + little<uint16_t>(10));
  EXPECT_EQ(bytes.substr(60, 24), little<int64_t>(0) + little<int64_t>(3) + little<int64_t>(4));
  EXPECT_EQ(bytes.substr(84, 9), "token end");
  EXPECT_EQ(bytes.substr(93, 6), "lm end");
  const std::string json_text = bytes.substr(config_offset + 4);
  EXPECT_EQ(bytes.substr(config_offset, 4), big(json_text.size(), 4));
  nlohmann::json config = nlohmann::json::parse(json_text);
  EXPECT_EQ(config["type"], "language_model");
  EXPECT_EQ(config["begin"], 33);
  EXPECT_EQ(config["end"], 99);
  EXPECT_EQ(config["tokens"]["type"], "token");
  EXPECT_EQ(config["tokens"]["begin"], 41);
  EXPECT_EQ(config["tokens"]["end"], 93);
  EXPECT_EQ(config["tokens"]["num_documents"], 2);
  EXPECT_EQ(config["tokens"]["num_tokens"], 4);
  EXPECT_EQ(config["tokens"]["data_type"], "uint16");
  for (const char* key : {"loss_masking_spans", "chosen_spans", "rejected_spans", "image_patches", "advantages",
                          "old_log_probabilities"})
    EXPECT_EQ(config[key]["type"], "none") << key;
}

TEST(Memmap, WriterOnAFullDiskIsAnErrorAndLeavesNoFile) {
  TemporaryFolder folder;
  const std::filesystem::path path = folder / "full.fast_llm_dataset";
  std::string message;
  {
    fast_llm::testing::FileSizeLimit limit(1000);  // the dataset takes about 3000 bytes
    message = error_message([&] { testing::write_dataset(path, testing::tagged_documents({300, 400})); });
  }
  EXPECT_NE(message.find(fmt::format("[memmap] {}: write failed after 1000 bytes (File too large)", path.string())),
            std::string::npos)
      << message;
  EXPECT_TRUE(std::filesystem::is_empty(folder.path()));
}

// ---------------------------------------------------------------------------------------------------------------
// A file built byte by byte from the format description: documents {3 1 4} {1 5} {9 2 6 5} in uint16, loss-masking
// spans {[0, 1)} {} {[1, 3), [3, 4)}.
//   0    "fast_llm_prepared_dataset"                           25
//   25   config_offset, big-endian uint64                       8
//   33   "lm begin"                                             8
//   41   token section: "token begin" 11, 9 x uint16 = 18, 4 x int64 cumsum = 32, "token end" 9  -> ends at 111
//   111  range section: "range begin" 11, 3 x (int32, int32) = 24, 4 x int32 cumsum = 16, "range end" 9 -> 171
//   171  "lm end"                                               6
//   177  config_size, big-endian uint32; then the JSON
struct SpecFile {
  std::string payload;  // bytes 33 to 177
  std::string json;
  std::string assemble() const {
    return std::string("fast_llm_prepared_dataset") + big(33 + payload.size(), 8) + payload + big(json.size(), 4) +
           json;
  }
};

SpecFile spec_file() {
  SpecFile file;
  std::string& p = file.payload;
  p += "lm begin";
  p += "token begin";
  for (uint16_t token : {3, 1, 4, 1, 5, 9, 2, 6, 5}) p += little(token);
  for (int64_t cumsum : {0, 3, 5, 9}) p += little(cumsum);
  p += "token end";
  p += "range begin";
  for (int32_t bound : {0, 1, 1, 3, 3, 4}) p += little(bound);
  for (int32_t count : {0, 1, 1, 3}) p += little(count);
  p += "range end";
  p += "lm end";
  file.json =
      R"({"type": "language_model", "begin": 33, "end": 177,)"
      R"( "tokens": {"type": "token", "begin": 41, "end": 111, "num_documents": 3, "num_tokens": 9, "data_type": "uint16"},)"
      R"( "loss_masking_spans": {"type": "range", "begin": 111, "end": 171, "num_documents": 3, "num_ranges": 3},)"
      R"( "chosen_spans": {"type": "none"}, "rejected_spans": {"type": "none"}, "image_patches": {"type": "none"},)"
      R"( "advantages": {"type": "none"}, "old_log_probabilities": {"type": "none"}})";
  return file;
}

TEST(Memmap, ReadsAFileBuiltFromTheSpec) {
  TemporaryFolder folder;
  SpecFile spec = spec_file();
  ASSERT_EQ(spec.payload.size(), 177u - 33u);
  write_file(folder / "spec.fast_llm_dataset", spec.assemble());
  MemmapDataset dataset("spec", folder / "spec.fast_llm_dataset");
  EXPECT_EQ(dataset.token_data_type(), TokenDataType::uint16);
  EXPECT_EQ(dataset.num_documents(), 3);
  EXPECT_EQ(dataset.num_tokens(), 9);
  EXPECT_EQ(dataset.document_sizes(), (std::vector<int64_t>{3, 2, 4}));
  EXPECT_EQ(dataset.get_document(0).tokens, (std::vector<int64_t>{3, 1, 4}));
  EXPECT_EQ(dataset.get_document(1).tokens, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(dataset.get_document(2).tokens, (std::vector<int64_t>{9, 2, 6, 5}));
  EXPECT_EQ(dataset.get_document(0).loss_masking_spans, (std::vector<Range>{{0, 1}}));
  EXPECT_TRUE(dataset.get_document(1).loss_masking_spans.empty());
  EXPECT_EQ(dataset.get_document(2).loss_masking_spans, (std::vector<Range>{{1, 3}, {3, 4}}));
  EXPECT_FALSE(dataset.has_preference_spans());
}

TEST(Memmap, ReadsAConfigWithoutTheNewerOptionalSections) {
  // Files from before the preference, image and GRPO sections existed have no such keys; the token section's type
  // is implied by its key.
  TemporaryFolder folder;
  SpecFile spec = spec_file();
  spec.json = R"({"type": "language_model", "begin": 33, "end": 177,)"
              R"( "tokens": {"begin": 41, "end": 111, "num_documents": 3, "num_tokens": 9, "data_type": "uint16"},)"
              R"( "loss_masking_spans": {"type": "range", "begin": 111, "end": 171, "num_documents": 3, "num_ranges": 3}})";
  write_file(folder / "old.fast_llm_dataset", spec.assemble());
  EXPECT_EQ(MemmapDataset("old", folder / "old.fast_llm_dataset").get_document(2).tokens,
            (std::vector<int64_t>{9, 2, 6, 5}));
}

// Writes `bytes` to a file and returns the error opening it gives (empty if none).
std::string open_error(const TemporaryFolder& folder, const std::string& name, const std::string& bytes) {
  std::filesystem::path path = folder / name;
  write_file(path, bytes);
  std::string message = error_message([&] { MemmapDataset("bad", path); });
  // Every error names the file.
  if (!message.empty()) {
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  }
  return message;
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  size_t position = text.find(from);
  EXPECT_NE(position, std::string::npos) << from;
  if (position != std::string::npos) text.replace(position, from.size(), to);
  return text;
}

TEST(Memmap, MalformedFilesAreErrorsNamingTheFile) {
  TemporaryFolder folder;
  const SpecFile good = spec_file();
  const std::string bytes = good.assemble();
  ASSERT_EQ(open_error(folder, "good.fast_llm_dataset", bytes), "");

  std::string bad_header = bytes;
  bad_header[0] = 'F';
  EXPECT_NE(open_error(folder, "header.fast_llm_dataset", bad_header).find("not a Fast-LLM dataset file"),
            std::string::npos);

  EXPECT_NE(open_error(folder, "short.fast_llm_dataset", bytes.substr(0, 20)).find("too short"), std::string::npos);

  // Cut inside the token section: the config offset now points past the end of the file.
  EXPECT_NE(open_error(folder, "truncated.fast_llm_dataset", bytes.substr(0, 90)).find("reader config offset 177"),
            std::string::npos);

  std::string offset_past_end = bytes;
  offset_past_end.replace(25, 8, big(bytes.size() + 10, 8));
  EXPECT_NE(open_error(folder, "offset.fast_llm_dataset", offset_past_end).find("is outside the file"),
            std::string::npos);

  std::string size_past_end = bytes;
  size_past_end.replace(177, 4, big(good.json.size() + 1, 4));
  EXPECT_NE(open_error(folder, "size.fast_llm_dataset", size_past_end).find("runs past the end of the file"),
            std::string::npos);

  SpecFile garbage = good;
  garbage.json = R"({"type": "language_model", "begin": 33, "end)";
  EXPECT_NE(open_error(folder, "garbage.fast_llm_dataset", garbage.assemble()).find("not valid JSON"),
            std::string::npos);

  // The token section claims to end past the end of the file.
  SpecFile token_end = good;
  token_end.json = replaced(good.json, R"("begin": 41, "end": 111)", R"("begin": 41, "end": 1024)");
  std::string message = open_error(folder, "token_end.fast_llm_dataset", token_end.assemble());
  EXPECT_NE(message.find(fmt::format("token section ends at 1024, file has {} bytes", token_end.assemble().size())),
            std::string::npos)
      << message;

  // More tokens than the section holds.
  SpecFile token_count = good;
  token_count.json = replaced(good.json, R"("num_tokens": 9)", R"("num_tokens": 10)");
  message = open_error(folder, "token_count.fast_llm_dataset", token_count.assemble());
  EXPECT_NE(message.find("token section is 70 bytes, expected 72"), std::string::npos) << message;

  SpecFile huge_count = good;
  huge_count.json = replaced(good.json, R"("num_tokens": 9)", R"("num_tokens": 123456789012)");
  EXPECT_NE(open_error(folder, "huge.fast_llm_dataset", huge_count.assemble()).find("cannot fit"), std::string::npos);

  SpecFile data_type = good;
  data_type.json = replaced(good.json, R"("data_type": "uint16")", R"("data_type": "float32")");
  EXPECT_NE(open_error(folder, "dtype.fast_llm_dataset", data_type.assemble()).find("unsupported data type 'float32'"),
            std::string::npos);

  // Cumulative sizes 0 3 5 9 -> 0 5 3 9.
  SpecFile cumsum = good;
  cumsum.payload.replace(8 + 11 + 18 + 8, 16, little<int64_t>(5) + little<int64_t>(3));
  message = open_error(folder, "cumsum.fast_llm_dataset", cumsum.assemble());
  EXPECT_NE(message.find("document size cumsum decreases at document 1"), std::string::npos) << message;

  // Span [1, 3) of document 2 (4 tokens) -> [1, 5).
  SpecFile span = good;
  span.payload.replace(78 + 11 + 8 + 4, 4, little<int32_t>(5));
  message = open_error(folder, "span.fast_llm_dataset", span.assemble());
  EXPECT_NE(message.find("span [1, 5) of document 2 is out of range"), std::string::npos) << message;

  // Span counts 0 1 1 3 -> 0 1 1 4 (more than num_ranges).
  SpecFile span_count = good;
  span_count.payload.replace(78 + 11 + 24 + 12, 4, little<int32_t>(4));
  EXPECT_NE(open_error(folder, "span_count.fast_llm_dataset", span_count.assemble()).find("more than num_ranges"),
            std::string::npos);

  SpecFile footer = good;
  footer.payload.replace(footer.payload.size() - 6, 6, "lm enD");
  EXPECT_NE(open_error(folder, "footer.fast_llm_dataset", footer.assemble()).find("missing 'lm end'"),
            std::string::npos);

  SpecFile section_marker = good;
  section_marker.payload.replace(8, 5, "TOKEN");
  EXPECT_NE(open_error(folder, "marker.fast_llm_dataset", section_marker.assemble()).find("missing 'token begin'"),
            std::string::npos);

  SpecFile unknown = good;
  unknown.json = replaced(good.json, R"("advantages")", R"("surprise")");
  EXPECT_NE(open_error(folder, "unknown.fast_llm_dataset", unknown.assemble()).find("unknown entry 'surprise'"),
            std::string::npos);

  EXPECT_NE(error_message([&] { MemmapDataset("missing", folder / "missing.fast_llm_dataset"); }).find("cannot open"),
            std::string::npos);
}

}  // namespace
}  // namespace fast_llm::data
