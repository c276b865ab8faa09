// safetensors: a file written here byte by byte from the format's description is read back; our writer's bytes are
// checked against the format; dtype conversion on load; every kind of corruption is an Error naming the file (and the
// tensor); sets of files with a Hugging Face index.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fast_llm/core/error.h"
#include "fast_llm/core/half.h"
#include "fast_llm/engine/checkpoint/safetensors.h"
#include "fast_llm/engine/checkpoint/state.h"

namespace fast_llm::engine {
namespace {

std::filesystem::path fresh_directory(const std::string& name) {
  auto path = std::filesystem::temp_directory_path() /
              ("fast_llm_safetensors_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return path;
}

std::string little_endian_u64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((value >> (8 * i)) & 0xff);
  return bytes;
}

template <class T>
std::string raw_bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A file made of an 8-byte length, `header` and `data`, exactly as given.
std::filesystem::path write_raw(const std::filesystem::path& path, const std::string& header, const std::string& data) {
  std::ofstream file(path, std::ios::binary);
  file << little_endian_u64(header.size()) << header << data;
  return path;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// The message of the Error that opening `path` throws.
std::string open_error(const std::filesystem::path& path) {
  try {
    SafetensorsFile file(path);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(Safetensors, ReadsAFileWrittenByHandFromTheFormatDescription) {
  const auto directory = fresh_directory("by_hand");
  // Two tensors in data order b (F32 [2, 2]) then a (I64 [3]), header padded with spaces to 8 bytes, metadata.
  const std::vector<float> b{1.5f, -2.0f, 3.25f, 0.0f};
  const std::vector<int64_t> a{7, -8, 1LL << 40};
  std::string header = R"({"__metadata__":{"format":"pt","note":"by hand"},)"
                       R"("b":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                       R"("a":{"dtype":"I64","shape":[3],"data_offsets":[16,40]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const auto path = write_raw(directory / "hand.safetensors", header, raw_bytes(b) + raw_bytes(a));

  SafetensorsFile file(path);
  EXPECT_EQ(file.data_offset(), 8 + header.size());
  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.tensors()[0].name, "b");  // data order
  EXPECT_EQ(file.tensors()[1].name, "a");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("note"), "by hand");
  Tensor read_b = file.read("b");
  EXPECT_EQ(read_b.dtype(), DType::float32);
  EXPECT_EQ(read_b.shape(), (Shape{2, 2}));
  EXPECT_EQ(std::vector<float>(read_b.data_as<float>(), read_b.data_as<float>() + 4), b);
  Tensor read_a = file.read("a");
  EXPECT_EQ(read_a.dtype(), DType::int64);
  EXPECT_EQ(std::vector<int64_t>(read_a.data_as<int64_t>(), read_a.data_as<int64_t>() + 3), a);
  EXPECT_EQ(file.info("a").begin, 16u);
  EXPECT_EQ(file.info("a").end, 40u);
  EXPECT_THROW(file.info("c"), Error);
}

TEST(Safetensors, AcceptsEmptyTensorsAndAnEmptyFile) {
  const auto directory = fresh_directory("empty");
  const auto path = write_raw(directory / "e.safetensors",
                              R"({"z":{"dtype":"F16","shape":[0,4],"data_offsets":[0,0]}})", "");
  SafetensorsFile file(path);
  EXPECT_EQ(file.read("z").numel(), 0);
  const auto nothing = write_raw(directory / "n.safetensors", "{}      ", "");
  EXPECT_TRUE(SafetensorsFile(nothing).tensors().empty());
}

TEST(Safetensors, WriterBytesFollowTheFormat) {
  const auto directory = fresh_directory("writer");
  Tensor first = Tensor::from_values(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::float32);
  Tensor second = Tensor::from_values(std::vector<float>{0.5f, -1.0f, 2.0f}, Shape{3}, DType::bfloat16);
  const auto path = directory / "w.safetensors";
  write_safetensors(path,
                    {{.name = "first", .dtype = DType::float32, .shape = Shape{2, 3}, .values = [&] { return first; }},
                     {.name = "second", .dtype = DType::bfloat16, .shape = Shape{3}, .values = [&] { return second; }}},
                    {{"format", "pt"}});
  const std::string bytes = read_file(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | uint8_t(bytes[size_t(i)]);
  EXPECT_EQ(header_size % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + header_size + 24 + 6);
  const std::string header = bytes.substr(8, header_size);
  const nlohmann::json parsed = nlohmann::json::parse(header);  // trailing spaces are allowed JSON whitespace
  EXPECT_EQ(header.find_first_not_of(' ', header.find_last_of('}') + 1), std::string::npos);
  EXPECT_EQ(parsed["__metadata__"], (nlohmann::json{{"format", "pt"}}));
  EXPECT_EQ(parsed["first"], (nlohmann::json{{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}));
  EXPECT_EQ(parsed["second"], (nlohmann::json{{"dtype", "BF16"}, {"shape", {3}}, {"data_offsets", {24, 30}}}));
  const std::string data = bytes.substr(8 + header_size);
  EXPECT_EQ(data.substr(0, 24), std::string(static_cast<const char*>(first.data()), 24));
  // bf16 bits of 0.5, -1, 2: 0x3F00, 0xBF80, 0x4000, little endian.
  EXPECT_EQ(data.substr(24), std::string("\x00\x3f\x80\xbf\x00\x40", 6));
}

TEST(Safetensors, RoundTripsEveryComputeDtype) {
  const auto directory = fresh_directory("round_trip");
  std::vector<float> values{0.0f, 1.0f, -3.5f, 1e-3f, 65504.0f, -0.25f};
  std::vector<SafetensorsEntry> entries;
  std::vector<Tensor> tensors;
  for (DType dtype : {DType::float32, DType::float64, DType::bfloat16, DType::float16}) {
    tensors.push_back(Tensor::from_values(values, Shape{3, 2}, dtype));
    Tensor tensor = tensors.back();
    entries.push_back({.name = std::string(dtype_name(dtype)), .dtype = dtype, .shape = Shape{3, 2},
                       .values = [tensor] { return tensor; }});
  }
  write_safetensors(directory / "all.safetensors", entries);
  SafetensorsFile file(directory / "all.safetensors");
  for (const Tensor& tensor : tensors) {
    Tensor read = file.read(std::string(dtype_name(tensor.dtype())));
    ASSERT_EQ(read.nbytes(), tensor.nbytes());
    EXPECT_EQ(std::memcmp(read.data(), tensor.data(), tensor.nbytes()), 0) << dtype_name(tensor.dtype());
  }
}

TEST(Safetensors, ConvertsFloatingDtypesOnLoad) {
  const auto directory = fresh_directory("convert");
  // bf16 -> fp32 is exact; fp32 -> bf16 rounds to nearest even; fp64 -> fp32 and fp16 -> fp64 as C++ does.
  Tensor bf16 = Tensor::from_values(std::vector<float>{1.0f, -2.5f, 3.140625f}, Shape{3}, DType::bfloat16);
  std::vector<float> fine{1.0f + 1.0f / 256.0f, 1.0f + 3.0f / 256.0f, 1.0f + 1.0f / 1024.0f};
  Tensor fp32 = Tensor::from_values(fine, Shape{3}, DType::float32);
  Tensor fp64 = Tensor::empty(Shape{2}, DType::float64);
  fp64.data_as<double>()[0] = 0.1;
  fp64.data_as<double>()[1] = -1e30;
  write_safetensors(directory / "c.safetensors",
                    {{.name = "bf16", .dtype = DType::bfloat16, .shape = Shape{3}, .values = [&] { return bf16; }},
                     {.name = "fp32", .dtype = DType::float32, .shape = Shape{3}, .values = [&] { return fp32; }},
                     {.name = "fp64", .dtype = DType::float64, .shape = Shape{2}, .values = [&] { return fp64; }}});
  SafetensorsFile file(directory / "c.safetensors");
  Tensor widened = file.read("bf16", DType::float32);
  EXPECT_EQ(widened.data_as<float>()[1], -2.5f);
  EXPECT_EQ(widened.data_as<float>()[2], 3.140625f);
  Tensor narrowed = file.read("fp32", DType::bfloat16);
  // 1 + 1/256 is a tie between 1 and 1 + 1/128: to even (1); 1 + 3/256 is a tie rounding up to 1 + 1/64.
  EXPECT_EQ(to_float(narrowed.data_as<bfloat16>()[0]), 1.0f);
  EXPECT_EQ(to_float(narrowed.data_as<bfloat16>()[1]), 1.0f + 1.0f / 64.0f);
  EXPECT_EQ(to_float(narrowed.data_as<bfloat16>()[2]), 1.0f);
  Tensor single = file.read("fp64", DType::float32);
  EXPECT_EQ(single.data_as<float>()[0], 0.1f);
  EXPECT_EQ(single.data_as<float>()[1], -1e30f);
  Tensor doubled = file.read("bf16", DType::float64);
  EXPECT_EQ(doubled.data_as<double>()[1], -2.5);
  Tensor half = file.read("fp64", DType::float16);
  EXPECT_TRUE(std::isinf(to_float(half.data_as<float16>()[1])));
}

TEST(Safetensors, RefusesToConvertIntegers) {
  const auto directory = fresh_directory("integers");
  const auto path = write_raw(directory / "i.safetensors", R"({"ids":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                              std::string(4, '\0'));
  SafetensorsFile file(path);
  EXPECT_EQ(file.read("ids").dtype(), DType::int32);
  try {
    file.read("ids", DType::float32);
    FAIL() << "converted integers";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("'ids'"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(path.string()), std::string::npos) << error.what();
  }
}

TEST(Safetensors, KnownDtypesWithoutOursReadButRefuseValues) {
  const auto directory = fresh_directory("other_dtypes");
  const auto path = write_raw(directory / "o.safetensors", R"({"mask":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})",
                              std::string("\x01\x00", 2));
  SafetensorsFile file(path);
  EXPECT_EQ(file.info("mask").dtype.name, "BOOL");
  EXPECT_EQ(file.bytes("mask").size(), 2u);
  EXPECT_THROW(file.read("mask"), Error);
}

struct Corruption {
  std::string name;
  std::string header;  // empty: use `raw` as the whole file
  std::string data;
  std::string expected;  // in the message, besides the file name
  std::string raw;
  bool header_length_override = false;
  uint64_t header_length = 0;
};

TEST(Safetensors, EveryCorruptionIsAnErrorNamingTheFileAndTensor) {
  const auto directory = fresh_directory("corrupt");
  const std::string ok_data(16, '\x01');
  const std::vector<Corruption> cases{
      {.name = "too_short", .expected = "too short", .raw = std::string("\x08\x00\x00", 3)},
      {.name = "header_past_end", .expected = "runs past the end", .raw = little_endian_u64(1000) + "{}"},
      {.name = "header_huge", .expected = "above the limit", .raw = little_endian_u64(uint64_t(1) << 62) + "{}"},
      {.name = "not_json", .header = "{\"a\": [", .expected = "not valid JSON"},
      // A number too large for a double: the JSON library's out_of_range, not its parse_error.
      {.name = "number_overflow", .header = "{\"a\": 1e999}", .expected = "not valid JSON"},
      {.name = "not_an_object_start", .header = "[1, 2]  ", .expected = "does not start with '{'"},
      {.name = "unknown_dtype", .header = R"({"w":{"dtype":"F33","shape":[4],"data_offsets":[0,16]}})",
       .data = ok_data, .expected = "tensor 'w': unknown dtype 'F33'"},
      {.name = "size_mismatch", .header = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})",
       .data = ok_data, .expected = "tensor 'w': shape [3] of F32 needs 12 bytes"},
      {.name = "out_of_range", .header = R"({"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})",
       .data = ok_data, .expected = "tensor 'w': data_offsets [0, 32] run past the end"},
      {.name = "truncated_data", .header = R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})",
       .data = ok_data.substr(0, 10), .expected = "tensor 'w': data_offsets [0, 16] run past the end"},
      {.name = "overlap",
       .header = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       .data = ok_data, .expected = "tensor 'b': data_offsets [8, 16] overlap tensor 'a'"},
      {.name = "gap",
       .header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
       .data = ok_data, .expected = "tensor 'b': data_offsets [12, 16] leave a gap"},
      {.name = "trailing_bytes", .header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       .data = ok_data, .expected = "extra bytes after the last tensor"},
      {.name = "reversed_offsets", .header = R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})",
       .data = ok_data, .expected = "tensor 'a': data_offsets [8, 0] end before they begin"},
      {.name = "negative_shape", .header = R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})",
       .data = ok_data, .expected = "tensor 'a': shape dimensions must be non-negative integers"},
      {.name = "fractional_offset", .header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0.5,16]}})",
       .data = ok_data, .expected = "tensor 'a': data_offsets must be non-negative integers"},
      {.name = "missing_offsets", .header = R"({"a":{"dtype":"F32","shape":[4]}})", .data = ok_data,
       .expected = "tensor 'a': missing 'data_offsets'"},
      {.name = "missing_dtype", .header = R"({"a":{"shape":[4],"data_offsets":[0,16]}})", .data = ok_data,
       .expected = "tensor 'a': missing or non-string 'dtype'"},
      {.name = "unknown_field", .header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"x":1}})",
       .data = ok_data, .expected = "tensor 'a': unknown field 'x'"},
      {.name = "bad_metadata", .header = R"({"__metadata__":{"step":3}})", .expected = "__metadata__ value of 'step'"},
      {.name = "shape_overflow",
       .header = R"({"a":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,16]}})",
       .data = ok_data, .expected = "tensor 'a': shape is too large"},
  };
  for (const Corruption& corruption : cases) {
    const auto path = directory / (corruption.name + ".safetensors");
    if (corruption.header.empty()) {
      std::ofstream(path, std::ios::binary) << corruption.raw;
    } else {
      write_raw(path, corruption.header, corruption.data);
    }
    const std::string message = open_error(path);
    EXPECT_NE(message.find(path.string()), std::string::npos) << corruption.name << ": " << message;
    EXPECT_NE(message.find(corruption.expected), std::string::npos) << corruption.name << ": " << message;
  }
  EXPECT_NE(open_error(directory / "absent.safetensors").find("cannot open"), std::string::npos);
}

TEST(Safetensors, TruncatingAValidFileAnywhereIsAnError) {
  const auto directory = fresh_directory("truncate");
  Tensor values = Tensor::from_values(std::vector<float>(64, 1.0f), Shape{8, 8});
  const auto path = directory / "full.safetensors";
  write_safetensors(path, {{.name = "w", .dtype = DType::float32, .shape = Shape{8, 8}, .values = [&] { return values; }},
                           {.name = "v", .dtype = DType::float32, .shape = Shape{8, 8}, .values = [&] { return values; }}});
  const std::string bytes = read_file(path);
  for (size_t size = 0; size < bytes.size(); size += 7) {
    const auto cut = directory / "cut.safetensors";
    std::ofstream(cut, std::ios::binary | std::ios::trunc) << bytes.substr(0, size);
    EXPECT_FALSE(open_error(cut).empty()) << "truncated to " << size << " bytes was accepted";
  }
}

TEST(Safetensors, RandomlyDamagedFilesOpenOrFailCleanly) {
  const auto directory = fresh_directory("damaged");
  Tensor values = Tensor::from_values(std::vector<float>(12, 0.5f), Shape{3, 4});
  const auto path = directory / "good.safetensors";
  write_safetensors(path, {{.name = "alpha", .dtype = DType::float32, .shape = Shape{3, 4}, .values = [&] { return values; }},
                           {.name = "beta", .dtype = DType::bfloat16, .shape = Shape{2, 2},
                            .values = [] { return Tensor::from_values(std::vector<float>(4, 1.0f), Shape{2, 2}, DType::bfloat16); }}},
                    {{"format", "pt"}});
  const std::string bytes = read_file(path);
  uint64_t state = 12345;
  int opened = 0, refused = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string damaged = bytes;
    // One to three bytes changed, mostly in the length and the header, where the structure is.
    const int changes = 1 + trial % 3;
    for (int change = 0; change < changes; ++change) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      const size_t position = (state >> 33) % std::min<size_t>(damaged.size(), 200);
      damaged[position] = char((state >> 17) & 0xff);
    }
    const auto cut = directory / "damaged.safetensors";
    std::ofstream(cut, std::ios::binary | std::ios::trunc) << damaged;
    try {
      SafetensorsFile file(cut);
      for (const auto& info : file.tensors())
        if (info.dtype.dtype) file.read(info.name);
      ++opened;
    } catch (const Error&) {
      ++refused;
    }
  }
  EXPECT_EQ(opened + refused, 400);
  EXPECT_GT(refused, 100);
}

TEST(SafetensorsSet, ShardsWithAnIndexAndChecksIt) {
  const auto directory = fresh_directory("set");
  TensorList source("test tensors");
  std::vector<Tensor> tensors;
  for (int index = 0; index < 5; ++index) {
    std::vector<float> values(size_t(6 + index), float(index));
    tensors.push_back(Tensor::from_values(values, Shape{int64_t(values.size())}));
    Tensor tensor = tensors.back();
    source.add("t" + std::to_string(index), {DType::float32, tensor.shape()}, [tensor] { return tensor; });
  }
  // 6 + 7 = 13 <= 14, 8 > 14 - 0: [t0, t1], [t2], [t3], [t4].
  auto files = write_safetensors_set(directory, source, source.names(), 14, SafetensorsSetLayout::huggingface,
                                     {{"format", "pt"}});
  EXPECT_EQ(files.at("t0"), "model-00001-of-00004.safetensors");
  EXPECT_EQ(files.at("t1"), "model-00001-of-00004.safetensors");
  EXPECT_EQ(files.at("t4"), "model-00004-of-00004.safetensors");
  std::ifstream index_stream(directory / "model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(index_stream);
  EXPECT_EQ(index["metadata"]["total_size"], (6 + 7 + 8 + 9 + 10) * 4);
  EXPECT_EQ(index["weight_map"]["t2"], "model-00002-of-00004.safetensors");

  auto set = SafetensorsSet::open_huggingface(directory);
  EXPECT_EQ(set->names(), source.names());
  for (int index = 0; index < 5; ++index) {
    Tensor read = set->load("t" + std::to_string(index));
    EXPECT_EQ(std::memcmp(read.data(), tensors[size_t(index)].data(), read.nbytes()), 0);
  }

  auto expect_index_error = [&](const nlohmann::json& broken, const std::string& expected) {
    std::ofstream(directory / "model.safetensors.index.json", std::ios::trunc) << broken.dump();
    try {
      SafetensorsSet::open_huggingface(directory);
      ADD_FAILURE() << "accepted: " << broken.dump();
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  };
  nlohmann::json wrong_file = index;
  wrong_file["weight_map"]["t4"] = "model-00003-of-00004.safetensors";
  expect_index_error(wrong_file, "tensor 't4' is listed in model-00003-of-00004.safetensors");
  nlohmann::json missing_file = index;
  missing_file["weight_map"]["t4"] = "model-00009-of-00004.safetensors";
  expect_index_error(missing_file, "does not exist");
  nlohmann::json unlisted = index;
  unlisted["weight_map"].erase("t1");  // its file is still listed (for t0)
  expect_index_error(unlisted, "tensor 't1' of");
  nlohmann::json escaping = index;
  escaping["weight_map"]["t0"] = "../model.safetensors";
  expect_index_error(escaping, "not a plain file name");
  expect_index_error(nlohmann::json{{"metadata", {}}}, "no `weight_map`");

  // One file when everything fits, and no index.
  const auto single = fresh_directory("single");
  write_safetensors_set(single, source, source.names(), int64_t(1) << 20, SafetensorsSetLayout::huggingface);
  EXPECT_TRUE(std::filesystem::exists(single / "model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(single / "model.safetensors.index.json"));
  EXPECT_EQ(SafetensorsSet::open_huggingface(single)->names().size(), 5u);
}

}  // namespace
}  // namespace fast_llm::engine
