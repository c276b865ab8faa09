// Checkpoint folders on disk (engine/checkpoint/directory.h) and the checked writes of every checkpoint file: a save is
// published whole or not at all, a failed one (a writer that throws, a full disk) leaves no temporary folder or file
// and the previous folder as it was, publishing over an existing folder replaces the previous checkpoint's files and
// keeps the others, the folders a conversion reads and writes must be apart, and filesystem failures are Errors
// naming the path and the reason.
//
// A read-only filesystem cannot be made here (the tests run as root, where permissions do not stop writes, and
// mounting needs privileges CI lacks): its error path is the one a folder whose parent is a regular file takes
// (ENOTDIR instead of EROFS, from the same calls).
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "checkpoint/checkpoint_test_util.h"
#include "core/full_disk.h"
#include "fast_llm/engine/checkpoint/directory.h"
#include "fast_llm/engine/checkpoint/metadata.h"
#include "fast_llm/engine/checkpoint/safetensors.h"
#include "fast_llm/engine/checkpoint/state.h"

namespace fast_llm::engine {
namespace {

using testing::error_of;

std::filesystem::path directory(const std::string& name) { return testing::fresh_directory("directory_test", name); }

std::set<std::string> names_in(const std::filesystem::path& folder) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) names.insert(entry.path().filename().string());
  return names;
}

std::string content(const std::filesystem::path& path) {
  std::ifstream stream(path);
  std::stringstream text;
  text << stream.rdbuf();
  return text.str();
}

void write_text(const std::filesystem::path& path, const std::string& text) { std::ofstream(path) << text; }

// A writer filling a checkpoint folder with the given files.
auto files(std::map<std::string, std::string> contents) {
  return [contents](const std::filesystem::path& folder) {
    for (const auto& [name, text] : contents) write_text(folder / name, text);
  };
}

// Some float tensors as a TensorSource, `count` of them of 64 values each.
std::shared_ptr<TensorList> tensors(int count) {
  auto list = std::make_shared<TensorList>("test tensors");
  for (int index = 0; index < count; ++index) {
    Tensor tensor = testing::pseudo_random(Shape{64}, DType::float32, uint64_t(index) + 1);
    list->add(fmt::format("layers.{}.weight", index), {DType::float32, Shape{64}}, [tensor] { return tensor; });
  }
  return list;
}

TEST(CheckpointDirectory, AFailedWriteLeavesNothingBehindAndThePreviousFolderAsItWas) {
  const auto root = directory("failed");
  write_checkpoint_directory(root / "5", files({{"rank_0.safetensors", "old"}}), true);
  ASSERT_TRUE(checkpoint_complete(root / "5"));

  auto failing = [](const std::filesystem::path& folder) {
    write_text(folder / "rank_0.safetensors", "partial");
    throw Error("test", "disk full");
  };
  EXPECT_THROW(write_checkpoint_directory(root / "5", failing, true), Error);
  EXPECT_THROW(write_checkpoint_directory(root / "6", failing, true), Error);
  // No temporary folder left for the next save to clean, no folder for the new step, the old one untouched.
  EXPECT_EQ(names_in(root), std::set<std::string>{"5"});
  EXPECT_EQ(names_in(root / "5"), (std::set<std::string>{"ok", "rank_0.safetensors"}));
  EXPECT_EQ(content(root / "5" / "rank_0.safetensors"), "old");
}

TEST(CheckpointDirectory, PublishingOverAFolderReplacesTheCheckpointAndKeepsOtherFiles) {
  const auto folder = directory("publish") / "model";
  std::filesystem::create_directories(folder / "extra");
  // A previous sharded Hugging Face checkpoint, and files that are not part of it.
  for (const auto& [name, text] : std::map<std::string, std::string>{{"config.json", "{\"old\": true}"},
                                                                     {"model.safetensors.index.json", "{}"},
                                                                     {"model-00001-of-00002.safetensors", "old 1"},
                                                                     {"model-00002-of-00002.safetensors", "old 2"},
                                                                     {"metadata.yaml", "format: fast_llm"},
                                                                     {"ok", ""},
                                                                     {"tokenizer.json", "{\"vocab\": 1}"},
                                                                     {"README.md", "my model"}})
    write_text(folder / name, text);
  write_text(folder / "extra" / "notes.txt", "kept");

  write_checkpoint_directory(folder, files({{"config.json", "{\"new\": true}"}, {"model.safetensors", "new"}}), true);
  // The stale index would have made readers load the old shards: it goes with them.
  EXPECT_EQ(names_in(folder),
            (std::set<std::string>{"README.md", "config.json", "extra", "model.safetensors", "ok", "tokenizer.json"}));
  EXPECT_EQ(content(folder / "config.json"), "{\"new\": true}");
  EXPECT_EQ(content(folder / "model.safetensors"), "new");
  EXPECT_EQ(content(folder / "tokenizer.json"), "{\"vocab\": 1}");
  EXPECT_EQ(content(folder / "extra" / "notes.txt"), "kept");
  EXPECT_EQ(names_in(folder.parent_path()), std::set<std::string>{"model"});

  // Through a symbolic link to the folder, and with a trailing separator: the same folder is written.
  std::filesystem::create_directory_symlink(folder, folder.parent_path() / "link");
  write_checkpoint_directory(folder.parent_path() / "link" / "", files({{"model.safetensors", "newer"}}), false);
  EXPECT_EQ(content(folder / "model.safetensors"), "newer");
  EXPECT_TRUE(std::filesystem::is_symlink(folder.parent_path() / "link"));
  EXPECT_EQ(names_in(folder.parent_path()), (std::set<std::string>{"link", "model"}));
}

TEST(CheckpointDirectory, AFullDiskIsAnErrorNamingTheFileAndLeavesNothing) {
  const auto root = directory("full_disk");
  std::string message;
  {
    testing::FileSizeLimit limit(1000);
    message = error_of([&] {
      write_checkpoint_directory(
          root / "3",
          [](const std::filesystem::path& folder) {
            const auto source = tensors(8);  // 8 x 256 bytes of data: above the limit
            write_safetensors_set(folder, *source, source->names(), 1 << 20, SafetensorsSetLayout::numbered);
          },
          true);
    });
  }
  EXPECT_NE(message.find("model_0.safetensors: write failed"), std::string::npos) << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_TRUE(names_in(root).empty());

  // The index of a sharded export, larger than each of its shards.
  const auto sharded = directory("full_disk_index");
  {
    testing::FileSizeLimit limit(500);
    const auto source = tensors(16);
    message = error_of(
        [&] { write_safetensors_set(sharded, *source, source->names(), 64, SafetensorsSetLayout::huggingface); });
  }
  EXPECT_NE(message.find("model.safetensors.index.json: write failed"), std::string::npos) << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_FALSE(names_in(sharded).contains("model.safetensors.index.json"));
  for (const std::string& name : names_in(sharded)) EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;

  // metadata.yaml.
  const auto metadata_folder = directory("full_disk_metadata");
  {
    testing::FileSizeLimit limit(16);
    message = error_of([&] {
      write_checkpoint_metadata(metadata_folder, {.format = CheckpointFormat::fast_llm, .model = "gpt",
                                                  .shards = state_shards(false)});
    });
  }
  EXPECT_NE(message.find("metadata.yaml: write failed"), std::string::npos) << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_TRUE(names_in(metadata_folder).empty());
}

TEST(CheckpointDirectory, ConversionFoldersMustBeApart) {
  const auto base = directory("apart");
  const auto input = base / "model";
  std::filesystem::create_directories(input);
  std::filesystem::create_directory_symlink(input, base / "link");
  auto refusal = [&](const std::filesystem::path& output, const std::filesystem::path& from) {
    return error_of([&] { check_separate_folders(output, "output.path", from, "input.path"); });
  };
  EXPECT_NE(refusal(input, input).find("output.path " + input.string() + " is the checkpoint being read (input.path"),
            std::string::npos)
      << refusal(input, input);
  EXPECT_NE(refusal(base / "link", input).find("is the checkpoint being read"), std::string::npos);
  EXPECT_NE(refusal(base / "other" / ".." / "model" / "", input).find("is the checkpoint being read"),
            std::string::npos);
  EXPECT_NE(refusal(input / "converted", input).find("is inside the checkpoint being read"), std::string::npos);
  EXPECT_NE(refusal(base / "link" / "converted", input).find("is inside"), std::string::npos);
  EXPECT_NE(refusal(base, input).find("holds the checkpoint being read"), std::string::npos);
  EXPECT_NE(refusal(base, base / "link").find("holds the checkpoint being read"), std::string::npos);
  EXPECT_NE(refusal(input, input / "checkpoint" / "7").find("holds"), std::string::npos);
  // Neighbours are apart, even when one name starts with the other.
  EXPECT_EQ(refusal(base / "model2", input), "");
  EXPECT_EQ(refusal(base / "converted" / "model", input), "");
}

TEST(CheckpointDirectory, FilesystemFailuresNameThePathAndTheReason) {
  const auto base = directory("failures");
  write_text(base / "a_file", "text");
  // A parent that is a regular file (the error path of a read-only filesystem, see the file's comment).
  std::string message = error_of([&] { create_folder(base / "a_file" / "out", "checkpoint"); });
  EXPECT_NE(message.find("[checkpoint] " + (base / "a_file" / "out").string() + ": cannot create the folder (Not a "
                                                                                 "directory)"),
            std::string::npos)
      << message;
  message = error_of([&] { write_checkpoint_directory(base / "a_file" / "out", files({}), false); });
  EXPECT_NE(message.find("a_file: is a file, not a folder"), std::string::npos) << message;
  message = error_of([&] { create_folder(base / "a_file", "prepare"); });
  EXPECT_NE(message.find("[prepare] " + (base / "a_file").string() + ": is a file, not a folder"), std::string::npos)
      << message;

  const std::string too_long(300, 'x');
  message = error_of([&] { file_type_of(base / too_long / "config.json", "huggingface"); });
  EXPECT_NE(message.find("[huggingface]"), std::string::npos) << message;
  EXPECT_NE(message.find("File name too long"), std::string::npos) << message;
  message = error_of([&] { write_checkpoint_directory(base / too_long, files({}), false); });
  EXPECT_NE(message.find("File name too long"), std::string::npos) << message;
  message = error_of([&] { folder_entries(base / "missing", "checkpoint"); });
  EXPECT_NE(message.find("missing: cannot list the folder (No such file or directory)"), std::string::npos) << message;

  std::filesystem::create_directories(base / "config.json");
  message = error_of([&] { read_text_file(base / "config.json", "huggingface"); });
  EXPECT_NE(message.find("config.json: is a folder, not a file"), std::string::npos) << message;
  message = error_of([&] { read_text_file(base / "nothing.json", "huggingface"); });
  EXPECT_NE(message.find("nothing.json: no such file"), std::string::npos) << message;
  EXPECT_EQ(read_text_file(base / "a_file", "huggingface"), "text");
}

}  // namespace
}  // namespace fast_llm::engine
