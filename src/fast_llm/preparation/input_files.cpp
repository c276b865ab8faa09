#include "fast_llm/preparation/input_files.h"

#include <fmt/format.h>
#include <fnmatch.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <set>

#include "fast_llm/core/error.h"

namespace fast_llm::preparation {

namespace fs = std::filesystem;

namespace {
constexpr std::string_view kComponent = "prepare";

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

enum class Compression { none, gzip, zstd };

struct FileKind {
  bool supported = false;
  RecordFormat format = RecordFormat::json_lines;
  Compression compression = Compression::none;
  std::string refusal;  // why a known but unsupported format is refused; empty for unknown files
};

FileKind kind_of(const fs::path& path) {
  std::string name = path.filename().string();
  FileKind kind;
  if (ends_with(name, ".gz")) {
    kind.compression = Compression::gzip;
    name.resize(name.size() - 3);
  } else if (ends_with(name, ".zst")) {
    kind.compression = Compression::zstd;
    name.resize(name.size() - 4);
  }
  if (ends_with(name, ".jsonl") || ends_with(name, ".json")) {
    kind.supported = true;
    kind.format = RecordFormat::json_lines;
  } else if (ends_with(name, ".txt")) {
    kind.supported = true;
    kind.format = RecordFormat::text_file;
  } else if (ends_with(name, ".parquet") || ends_with(name, ".arrow")) {
    kind.refusal = "Parquet and Arrow files need Apache Arrow, which Debian does not package; convert them to JSON "
                   "Lines (e.g. `datasets.load_dataset(...).to_json(\"data.jsonl\")`)";
  } else if (ends_with(name, ".csv") || ends_with(name, ".tsv")) {
    kind.refusal = "CSV is not read by fast-llm; convert it to JSON Lines";
  }
  return kind;
}

// Hugging Face's metadata files, found beside data files in exported datasets.
bool is_metadata_file(const fs::path& path) {
  static const std::set<std::string> names{"croissant.json", "dataset_info.json", "state.json", "dataset_dict.json"};
  return names.contains(path.filename().string());
}

bool has_wildcard(const std::string& text) { return text.find_first_of("*?[") != std::string::npos; }

// The paths matching `pattern`, component by component (wildcards match names within one folder), sorted.
std::vector<fs::path> expand_pattern(const fs::path& pattern) {
  std::vector<fs::path> current{pattern.has_root_path() ? pattern.root_path() : fs::path()};
  for (const auto& component : pattern.relative_path()) {
    const std::string part = component.string();
    std::vector<fs::path> next;
    for (const auto& base : current) {
      if (!has_wildcard(part)) {
        if (std::error_code error; fs::exists(base / component, error)) next.push_back(base / component);
        continue;
      }
      std::error_code error;
      const fs::path folder = base.empty() ? fs::path(".") : base;
      for (fs::directory_iterator entry(folder, error), end; !error && entry != end; entry.increment(error)) {
        const std::string name = entry->path().filename().string();
        if (::fnmatch(part.c_str(), name.c_str(), FNM_PERIOD) == 0) next.push_back(base / name);
      }
    }
    std::sort(next.begin(), next.end());
    current = std::move(next);
  }
  return current;
}

// The data files of one entry (file, folder or pattern); `entry` names it in errors.
void add_entry(const fs::path& path, const std::string& entry, std::vector<InputFile>& files,
               std::set<fs::path>& seen) {
  std::vector<fs::path> roots = has_wildcard(path.string()) ? expand_pattern(path) : std::vector<fs::path>{path};
  if (roots.empty()) throw Error(kComponent, fmt::format("dataset.path: no file matches `{}`", entry));
  auto add = [&](const fs::path& file, const FileKind& kind) {
    std::error_code error;
    fs::path canonical = fs::weakly_canonical(file, error);
    if (seen.insert(error ? file : canonical).second) files.push_back({file, kind.format});
  };
  for (const fs::path& root : roots) {
    std::error_code error;
    const fs::file_status status = fs::status(root, error);
    if (!fs::exists(status)) {
      // `owner/name` without an extension is how Fast-LLM configs name Hugging Face hub datasets.
      const bool hub_name =
          !root.has_extension() && !root.is_absolute() && std::distance(root.begin(), root.end()) == 2;
      throw Error(kComponent, fmt::format("dataset.path: {}: no such file or folder{}", root.string(),
                                          hub_name ? " (Hugging Face hub datasets are not downloaded by fast-llm: "
                                                     "download the dataset and give its JSON Lines files here)"
                                                   : ""));
    }
    if (fs::is_directory(status)) {
      std::vector<fs::path> found;
      std::vector<std::string> refused;
      for (fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, error), end;
           !error && it != end; it.increment(error)) {
        std::error_code file_error;
        if (!it->is_regular_file(file_error) || is_metadata_file(it->path())) continue;
        const FileKind kind = kind_of(it->path());
        if (kind.supported)
          found.push_back(it->path());
        else if (!kind.refusal.empty())
          refused.push_back(kind.refusal);
      }
      if (error) throw Error(kComponent, fmt::format("dataset.path: {}: {}", root.string(), error.message()));
      if (found.empty())
        throw Error(kComponent,
                    fmt::format("dataset.path: {}: no JSON Lines (.jsonl, .json) or text (.txt) files, plain, .gz or "
                                ".zst, in this folder{}",
                                root.string(), refused.empty() ? "" : ": " + refused.front()));
      std::sort(found.begin(), found.end());
      for (const auto& file : found) add(file, kind_of(file));
    } else {
      const FileKind kind = kind_of(root);
      if (!kind.supported)
        throw Error(kComponent,
                    fmt::format("dataset.path: {}: {}", root.string(),
                                kind.refusal.empty() ? "unknown format: expected .jsonl, .json or .txt, plain, .gz or "
                                                       ".zst"
                                                     : kind.refusal));
      add(root, kind);
    }
  }
}

}  // namespace

std::vector<InputFile> resolve_input_files(const std::vector<std::string>& paths,
                                           const std::vector<std::string>& data_files) {
  FLM_CHECK(!paths.empty(), kComponent, "dataset.path: no input given");
  std::vector<InputFile> files;
  std::set<fs::path> seen;
  if (!data_files.empty()) {
    FLM_CHECK(paths.size() == 1, kComponent, "dataset.data_files: needs a single folder in dataset.path, got {}",
              paths.size());
    std::error_code error;
    const bool folder = fs::is_directory(paths.front(), error);
    for (const std::string& entry : data_files) {
      const fs::path path = folder && fs::path(entry).is_relative() ? fs::path(paths.front()) / entry : fs::path(entry);
      add_entry(path, entry, files, seen);
    }
    return files;
  }
  for (const std::string& entry : paths) add_entry(entry, entry, files, seen);
  return files;
}

std::string Record::location() const {
  if (file == nullptr) return "?";
  if (file->format == RecordFormat::text_file) return file->path.string();
  return fmt::format("{}:{}", file->path.string(), line);
}

// ---------------------------------------------------------------------------------------------------------------
// Streams: bytes of a file, decompressed, and lines of them.

class RecordReader::Stream {
 public:
  Stream(const fs::path& path, Compression compression) : path_(path), compression_(compression) {
    if (compression == Compression::gzip) {
      gz_ = gzopen(path.c_str(), "rb");
      if (gz_ == nullptr) fail_errno("cannot open");
      gzbuffer(gz_, 1 << 20);
    } else {
      file_ = std::fopen(path.c_str(), "rb");
      if (file_ == nullptr) fail_errno("cannot open");
      if (compression == Compression::zstd) {
        zstd_ = ZSTD_createDStream();
        FLM_CHECK(zstd_ != nullptr, kComponent, "{}: cannot start the zstd decoder", path.string());
        input_.resize(ZSTD_DStreamInSize());
      }
    }
  }
  ~Stream() {
    if (gz_ != nullptr) gzclose(gz_);
    if (file_ != nullptr) std::fclose(file_);
    if (zstd_ != nullptr) ZSTD_freeDStream(zstd_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // The next line without its '\n' (a final line without one included); false at the end.
  bool getline(std::string& line) {
    line.clear();
    while (true) {
      const char* begin = buffer_.data() + position_;
      const char* end = buffer_.data() + buffer_.size();
      const char* newline = static_cast<const char*>(std::memchr(begin, '\n', size_t(end - begin)));
      if (newline != nullptr) {
        line.append(begin, newline);
        position_ = size_t(newline - buffer_.data()) + 1;
        return true;
      }
      line.append(begin, end);
      position_ = buffer_.size();
      if (!refill()) return !line.empty();
    }
  }

  // The rest of the file.
  std::string read_all() {
    std::string text(buffer_.begin() + std::ptrdiff_t(position_), buffer_.end());
    position_ = buffer_.size();
    while (refill()) {
      text.append(buffer_);
      position_ = buffer_.size();
    }
    return text;
  }

 private:
  [[noreturn]] void fail_errno(std::string_view what) const {
    throw Error(kComponent, fmt::format("{}: {}: {}", path_.string(), what, std::strerror(errno)));
  }

  // Replaces the buffer with the next decompressed bytes; false at the end of the file.
  bool refill() {
    buffer_.resize(1 << 20);
    position_ = 0;
    size_t produced = 0;
    if (compression_ == Compression::gzip) {
      const int count = gzread(gz_, buffer_.data(), unsigned(buffer_.size()));
      if (count < 0) {
        int code = 0;
        const char* message = gzerror(gz_, &code);
        throw Error(kComponent, fmt::format("{}: not a valid gzip file ({})", path_.string(), message));
      }
      produced = size_t(count);
    } else if (compression_ == Compression::none) {
      produced = std::fread(buffer_.data(), 1, buffer_.size(), file_);
      if (produced == 0 && std::ferror(file_)) fail_errno("read error");
    } else {
      produced = refill_zstd();
    }
    buffer_.resize(produced);
    return produced > 0;
  }

  size_t refill_zstd() {
    ZSTD_outBuffer output{buffer_.data(), buffer_.size(), 0};
    while (output.pos == 0) {
      if (in_.pos == in_.size) {
        const size_t count = std::fread(input_.data(), 1, input_.size(), file_);
        if (count == 0) {
          if (std::ferror(file_)) fail_errno("read error");
          FLM_CHECK(frame_done_, kComponent, "{}: truncated zstd file (ends inside a frame)", path_.string());
          return 0;
        }
        in_ = {input_.data(), count, 0};
      }
      const size_t result = ZSTD_decompressStream(zstd_, &output, &in_);
      if (ZSTD_isError(result))
        throw Error(kComponent, fmt::format("{}: not a valid zstd file ({})", path_.string(),
                                            ZSTD_getErrorName(result)));
      frame_done_ = result == 0;
    }
    return output.pos;
  }

  fs::path path_;
  Compression compression_;
  gzFile gz_ = nullptr;
  std::FILE* file_ = nullptr;
  ZSTD_DStream* zstd_ = nullptr;
  std::vector<char> input_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  bool frame_done_ = true;
  std::string buffer_;
  size_t position_ = 0;
};

RecordReader::RecordReader(const std::vector<InputFile>& files) : files_(files) {}
RecordReader::~RecordReader() = default;

bool RecordReader::open_next_file() {
  if (stream_ && records_in_file_ == 0) empty_files_.push_back(current_->path);
  stream_.reset();
  if (next_file_ >= files_.size()) return false;
  current_ = &files_[next_file_++];
  stream_ = std::make_unique<Stream>(current_->path, kind_of(current_->path).compression);
  line_ = 0;
  records_in_file_ = 0;
  return true;
}

bool RecordReader::next(Record& record) {
  while (true) {
    if (!stream_ && !open_next_file()) return false;
    if (current_->format == RecordFormat::text_file) {
      if (line_ == 0) {
        line_ = 1;
        record.text = stream_->read_all();
        // Whitespace only is an empty document: skipped with the file reported, as an empty file.
        if (record.text.find_first_not_of(" \t\r\n\f\v") != std::string::npos) {
          record.file = current_;
          record.line = 0;
          ++records_in_file_;
          return true;
        }
      }
    } else {
      while (stream_->getline(record.text)) {
        ++line_;
        if (!record.text.empty() && record.text.back() == '\r') record.text.pop_back();
        if (record.text.find_first_not_of(" \t\r\f\v") == std::string::npos) continue;
        record.file = current_;
        record.line = line_;
        ++records_in_file_;
        return true;
      }
    }
    if (!open_next_file()) return false;
  }
}

std::vector<int64_t> count_records(const std::vector<InputFile>& files) {
  std::vector<int64_t> counts;
  for (const InputFile& file : files) {
    std::vector<InputFile> one{file};
    RecordReader reader(one);
    Record record;
    int64_t count = 0;
    while (reader.next(record)) ++count;
    counts.push_back(count);
  }
  return counts;
}

}  // namespace fast_llm::preparation
