#include "fast_llm/engine/checkpoint/directory.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <system_error>

#include "fast_llm/core/error.h"
#include "fast_llm/core/file_writer.h"
#include "fast_llm/engine/checkpoint/metadata.h"

namespace fast_llm::engine {

namespace {

constexpr std::string_view kComponent = "checkpoint";

[[noreturn]] void fail(std::string_view component, const std::filesystem::path& path, std::string_view what,
                       const std::error_code& error) {
  throw Error(component, fmt::format("{}: {} ({})", path.string(), what, error.message()));
}

void sync_path(const std::filesystem::path& path, bool folder) {
  const int descriptor = ::open(path.c_str(), (folder ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (descriptor < 0) fail(kComponent, path, "cannot open it to flush it to disk", {errno, std::generic_category()});
  const int result = ::fsync(descriptor);
  const int error = errno;
  ::close(descriptor);
  if (result != 0) fail(kComponent, path, "cannot flush it to disk", {error, std::generic_category()});
}

void sync_tree(const std::filesystem::path& folder) {
  for (const std::filesystem::path& entry : folder_entries(folder, kComponent))
    if (file_type_of(entry, kComponent) == std::filesystem::file_type::directory)
      sync_tree(entry);
    else
      sync_path(entry, false);
  sync_path(folder, true);
}

void remove_tree(const std::filesystem::path& path) {
  std::error_code error;
  std::filesystem::remove_all(path, error);
  if (error) fail(kComponent, path, "cannot remove it", error);
}

void move(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code error;
  std::filesystem::rename(from, to, error);
  if (error) fail(kComponent, to, fmt::format("cannot move {} here", from.string()), error);
}

// `path` absolute, with `.`, `..` and symbolic links resolved as far as it exists: the temporary folder is then a
// sibling of the real folder (the same filesystem, so renaming works), and `out/` names the folder `out`.
std::filesystem::path resolved(const std::filesystem::path& path) {
  std::error_code error;
  std::filesystem::path result = std::filesystem::absolute(path, error);
  if (!error) result = std::filesystem::weakly_canonical(result, error);
  if (error) fail(kComponent, path, "cannot resolve the path", error);
  if (result.filename().empty()) result = result.parent_path();
  if (result == result.root_path())
    throw Error(kComponent, fmt::format("{}: a checkpoint cannot be the root folder", path.string()));
  return result;
}

// The temporary folder of a write. It is removed when the write fails (the writer throws, or publication does), so a
// failed save leaves nothing behind; its removal then is best effort, the write's own error being the one reported.
class TemporaryFolder {
 public:
  explicit TemporaryFolder(std::filesystem::path path) : path_(std::move(path)) {
    remove_tree(path_);  // left by a process of the same id that was killed
    std::error_code error;
    std::filesystem::create_directory(path_, error);
    if (error) fail(kComponent, path_, "cannot create the temporary folder of the checkpoint", error);
  }
  ~TemporaryFolder() {
    if (published_) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;

  const std::filesystem::path& path() const { return path_; }
  void mark_published() { published_ = true; }

 private:
  std::filesystem::path path_;
  bool published_ = false;
};

// Publishes the files of `temporary` into the existing folder `directory`: its `ok` goes first (so readers see it
// incomplete from the first change on), then the files of the checkpoint it held, then the new files move in.
void publish_into(const std::filesystem::path& temporary, const std::filesystem::path& directory, bool sync) {
  std::error_code error;
  std::filesystem::remove(directory / kCompleteMarker, error);
  if (error) fail(kComponent, directory / kCompleteMarker, "cannot remove it", error);
  if (sync) sync_path(directory, true);
  for (const std::filesystem::path& entry : folder_entries(directory, kComponent)) {
    if (!checkpoint_file(entry.filename().string())) continue;
    if (std::filesystem::symlink_status(entry, error).type() == std::filesystem::file_type::directory) continue;
    std::filesystem::remove(entry, error);
    if (error) fail(kComponent, entry, "cannot remove this file of the previous checkpoint", error);
  }
  for (const std::filesystem::path& file : folder_entries(temporary, kComponent))
    move(file, directory / file.filename());
  std::filesystem::remove(temporary, error);
  if (error) fail(kComponent, temporary, "cannot remove it", error);
  if (sync) sync_path(directory, true);
}

}  // namespace

bool checkpoint_file(std::string_view name) {
  return name == kMetadataFile || name == "config.json" || name.ends_with(".safetensors") ||
         name.ends_with(".safetensors.index.json");
}

namespace {

// Moves the complete temporary folder to `target` (see the header) and writes `ok`.
void publish(TemporaryFolder& temporary, const std::filesystem::path& directory, const std::filesystem::path& target,
             bool sync) {
  const std::filesystem::path parent = target.parent_path();
  switch (file_type_of(target, kComponent)) {
    case std::filesystem::file_type::not_found: move(temporary.path(), target); break;
    case std::filesystem::file_type::directory: publish_into(temporary.path(), target, sync); break;
    default:
      throw Error(kComponent, fmt::format("{}: exists and is not a folder; the checkpoint is not written there",
                                          directory.string()));
  }
  temporary.mark_published();
  if (sync) sync_path(parent, true);
  write_file(target / kCompleteMarker, "", {.component = kComponent, .sync = sync});
}

}  // namespace

void write_checkpoint_directory(const std::filesystem::path& directory,
                                const std::function<void(const std::filesystem::path&)>& write, bool sync) {
  const std::filesystem::path target = resolved(directory);
  create_folder(target.parent_path(), kComponent);
  TemporaryFolder temporary(target.parent_path() / fmt::format(".{}.tmp-{}", target.filename().string(), ::getpid()));
  write(temporary.path());
  if (sync) sync_tree(temporary.path());
  publish(temporary, directory, target, sync);
}

void write_checkpoint_directory(const std::filesystem::path& directory,
                                const std::function<void(const std::filesystem::path&)>& write, bool sync,
                                const ProcessGroups& groups) {
  if (groups.world_size() == 1) return write_checkpoint_directory(directory, write, sync);
  const std::filesystem::path target = resolved(directory);
  // One name every rank knows; a folder of that name is a leftover of a killed run (the experiment lock keeps two
  // runs apart), which rank 0 replaces.
  const std::filesystem::path path = target.parent_path() / fmt::format(".{}.tmp-ranks", target.filename().string());
  std::optional<TemporaryFolder> temporary;
  if (groups.is_main()) {
    create_folder(target.parent_path(), kComponent);
    temporary.emplace(path);
  }
  groups.barrier();
  write(path);
  // Every rank's files are complete (a rank that failed never arrives: the others stop at the barrier's timeout and
  // the folder stays unpublished); rank 0 flushes them all, which it can only do once none is being renamed.
  groups.barrier();
  if (temporary) {
    if (sync) sync_tree(path);
    publish(*temporary, directory, target, sync);
  }
  groups.barrier();
}

void check_separate_folders(const std::filesystem::path& output, std::string_view output_field,
                            const std::filesystem::path& input, std::string_view input_field) {
  const std::filesystem::path output_folder = resolved(output), input_folder = resolved(input);
  // Whether `outer` is `inner` or one of the folders above it.
  auto within = [](const std::filesystem::path& inner, const std::filesystem::path& outer) {
    for (std::filesystem::path folder = inner;; folder = folder.parent_path()) {
      std::error_code error;
      if (folder == outer || std::filesystem::equivalent(folder, outer, error)) return true;
      if (folder == folder.root_path()) return false;
    }
  };
  auto refuse = [&](std::string_view relation) {
    throw Error(kComponent, fmt::format("{} {} {} the checkpoint being read ({} {}): a conversion never writes where "
                                        "it reads; choose another {}",
                                        output_field, output.string(), relation, input_field, input.string(),
                                        output_field));
  };
  if (within(output_folder, input_folder)) {
    std::error_code error;
    const bool same = output_folder == input_folder || std::filesystem::equivalent(output_folder, input_folder, error);
    refuse(same ? "is" : "is inside");
  }
  if (within(input_folder, output_folder)) refuse("holds");
}

std::filesystem::file_type file_type_of(const std::filesystem::path& path, std::string_view component) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (status.type() == std::filesystem::file_type::none) fail(component, path, "cannot access it", error);
  return status.type();
}

void create_folder(const std::filesystem::path& path, std::string_view component) {
  const std::filesystem::file_type type = file_type_of(path, component);
  if (type == std::filesystem::file_type::directory) return;
  if (type != std::filesystem::file_type::not_found)
    throw Error(component, fmt::format("{}: is a file, not a folder", path.string()));
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) fail(component, path, "cannot create the folder", error);
}

std::vector<std::filesystem::path> folder_entries(const std::filesystem::path& path, std::string_view component) {
  std::error_code error;
  std::vector<std::filesystem::path> entries;
  for (std::filesystem::directory_iterator entry(path, error), end; !error && entry != end; entry.increment(error))
    entries.push_back(entry->path());
  if (error) fail(component, path, "cannot list the folder", error);
  std::sort(entries.begin(), entries.end());
  return entries;
}

std::string read_text_file(const std::filesystem::path& path, std::string_view component) {
  const std::filesystem::file_type type = file_type_of(path, component);
  if (type == std::filesystem::file_type::not_found)
    throw Error(component, fmt::format("{}: no such file", path.string()));
  if (type != std::filesystem::file_type::regular)
    throw Error(component, fmt::format("{}: is a {}, not a file", path.string(),
                                       type == std::filesystem::file_type::directory ? "folder" : "special file"));
  const int descriptor = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (descriptor < 0) fail(component, path, "cannot open it", {errno, std::generic_category()});
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const ssize_t count = ::read(descriptor, buffer, sizeof(buffer));
    if (count < 0 && errno == EINTR) continue;
    if (count <= 0) {
      const int error = count < 0 ? errno : 0;
      ::close(descriptor);
      if (error != 0) fail(component, path, "cannot read it", {error, std::generic_category()});
      return text;
    }
    text.append(buffer, size_t(count));
  }
}

}  // namespace fast_llm::engine
