// Checkpoint folders on disk: how every checkpoint, export and conversion is written so that it never destroys data,
// and the filesystem queries the checkpoint code makes on paths the user gave.
//
// A checkpoint is written into a temporary sibling folder `.<name>.tmp-<pid>` and published only when complete:
//   - `<name>` absent: the temporary folder is renamed to it (one atomic step);
//   - `<name>` an existing folder (`convert` with exist_ok, a step folder left without `ok`): its `ok` is removed
//     first, then the files of the checkpoint it held (checkpoint_file: `*.safetensors`, `*.safetensors.index.json`,
//     `config.json`, `metadata.yaml`), then the new files are moved in; other files (a tokenizer, a README) are kept,
//     as Fast-LLM's convert keeps them;
// and `ok` is written last. A failure before publication leaves `<name>` as it was and removes the temporary folder;
// a crash leaves at worst a folder without `ok`, which no reader takes for a checkpoint. With `sync`, files and
// folders are flushed to disk before each step that depends on them.
//
// Filesystem failures on these paths (a component too long, permission denied, a read-only filesystem, a file where
// a folder belongs) are Errors naming the path and the system's reason, never std::filesystem exceptions.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/engine/distributed/process_groups.h"

namespace fast_llm::engine {

// Whether a file of this name is part of a checkpoint this program writes (replaced when another is published over
// it, see above).
bool checkpoint_file(std::string_view name);

// Writes the checkpoint folder `directory` atomically as described above: `write(temporary)` fills a fresh temporary
// folder, which is then published as `directory`, and `ok` is written last.
void write_checkpoint_directory(const std::filesystem::path& directory,
                                const std::function<void(const std::filesystem::path&)>& write, bool sync);
// The same, by every process of `groups` together: rank 0 prepares one temporary folder, every rank's `write` adds its
// own files to it, and rank 0 publishes it once every rank has finished (host barriers between the three).
void write_checkpoint_directory(const std::filesystem::path& directory,
                                const std::function<void(const std::filesystem::path&)>& write, bool sync,
                                const ProcessGroups& groups);

// Throws unless `output` (the folder a conversion writes) and `input` (the checkpoint it reads) are apart: the same
// folder, one inside the other, is refused, compared by filesystem identity so that symbolic links, `..` and bind
// mounts do not hide it. `output_field` and `input_field` name them in the message (`output.path`).
void check_separate_folders(const std::filesystem::path& output, std::string_view output_field,
                            const std::filesystem::path& input, std::string_view input_field);

// The type of the file at `path` (following symbolic links), `not_found` when there is none; an Error naming `path`
// when the system cannot tell (a component too long, a folder it may not search).
std::filesystem::file_type file_type_of(const std::filesystem::path& path, std::string_view component);
// Creates the folder `path` and its parents as needed; an Error naming `path` and the reason otherwise.
void create_folder(const std::filesystem::path& path, std::string_view component);
// The entries of the folder `path`, sorted; an Error naming it and the reason when it cannot be read.
std::vector<std::filesystem::path> folder_entries(const std::filesystem::path& path, std::string_view component);
// The whole content of the file `path` (config.json, an index); an Error naming it when it is missing, not a file or
// cannot be read.
std::string read_text_file(const std::filesystem::path& path, std::string_view component);

}  // namespace fast_llm::engine
