// A model's state as named tensors read on demand, and how it moves between stages and safetensors files.
//
// Names: the state of parameter P is stored under "P/<shard>", where the shard is `weights` (master weights),
// `exp_avg` or `exp_avg_sq` (Adam's moments), as in Fast-LLM's `fast_llm` format. Hugging Face converters read and
// write the `weights` entries only.
//
// A TensorSource lists its tensors (name, dtype, shape) without reading them and loads one when asked, so a
// conversion or an export holds one tensor (or one output file) in memory at a time, never the whole model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/core/dtype.h"
#include "fast_llm/engine/checkpoint/safetensors.h"
#include "fast_llm/engine/multi_stage/multi_stage.h"
#include "fast_llm/tensor/tensor.h"

namespace fast_llm::engine {

inline constexpr std::string_view kWeightsShard = "weights";
inline constexpr std::string_view kExpAvgShard = "exp_avg";
inline constexpr std::string_view kExpAvgSqShard = "exp_avg_sq";
// The shards of a checkpoint: weights only, or weights and Adam's moments.
std::vector<std::string> state_shards(bool optimizer_state);
// "<parameter>/<shard>".
std::string state_key(std::string_view parameter, std::string_view shard);

struct TensorSpec {
  DType dtype = DType::float32;
  Shape shape;
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // Names in a stable order: the order they are written in.
  virtual const std::vector<std::string>& names() const = 0;
  virtual bool contains(const std::string& name) const = 0;
  // Throws an Error naming describe() if there is no such tensor.
  virtual TensorSpec spec(const std::string& name) const = 0;
  // A contiguous CPU tensor with spec(name).
  virtual Tensor load(const std::string& name) const = 0;
  // Where the tensors come from ("checkpoint /x/y (llama)"), for error messages.
  virtual std::string describe() const = 0;
};

// A TensorSource built entry by entry, each with the function that produces its tensor.
class TensorList : public TensorSource {
 public:
  explicit TensorList(std::string description) : description_(std::move(description)) {}
  // Throws InternalError on a duplicate name.
  void add(std::string name, TensorSpec spec, std::function<Tensor()> load);

  const std::vector<std::string>& names() const override { return names_; }
  bool contains(const std::string& name) const override { return entries_.contains(name); }
  TensorSpec spec(const std::string& name) const override;
  Tensor load(const std::string& name) const override;
  std::string describe() const override { return description_; }

 private:
  struct Entry {
    TensorSpec spec;
    std::function<Tensor()> load;
  };
  std::string description_;
  std::vector<std::string> names_;
  std::map<std::string, Entry> entries_;
};

// The floating tensors of `source` converted to `dtype` (others unchanged), loaded from `source` on demand.
std::shared_ptr<TensorSource> convert_source(std::shared_ptr<const TensorSource> source, DType dtype);

// The tensors of a checkpoint's safetensors files (e.g. a sharded Hugging Face checkpoint); a name may appear in one
// file only, and every tensor is floating point (weights and optimizer state are), so a tensor stored as integers is
// refused when the files are opened, naming it and its file, not when something later fails to convert it.
class SafetensorsSet : public TensorSource {
 public:
  // `files` are opened (and checked) now.
  SafetensorsSet(std::string description, const std::vector<std::filesystem::path>& files);
  // A Hugging Face directory: `model.safetensors.index.json` (its `weight_map` must name existing files, each listing
  // exactly the tensors the index gives it) or else `model.safetensors`.
  static std::unique_ptr<SafetensorsSet> open_huggingface(const std::filesystem::path& directory);

  const std::vector<std::string>& names() const override { return names_; }
  bool contains(const std::string& name) const override { return owner_.contains(name); }
  TensorSpec spec(const std::string& name) const override;
  Tensor load(const std::string& name) const override;
  std::string describe() const override { return description_; }

  // The file holding `name`.
  const SafetensorsFile& file_of(const std::string& name) const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::string description_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::string> names_;
  std::map<std::string, size_t> owner_;
};

// How `write_safetensors_set` names its files.
enum class SafetensorsSetLayout {
  // `model.safetensors` when everything fits in one file, else `model-0000i-of-0000n.safetensors` and
  // `model.safetensors.index.json` ({"metadata": {"total_size": bytes}, "weight_map": {name: file}}).
  huggingface,
  // `model_<i>.safetensors`, no index file (the fast_llm format's metadata lists the files).
  numbered,
};

// Writes `names` of `source` (in that order) into `directory`, starting a new file whenever the next tensor would
// take a file above `parameters_per_file` elements (a larger tensor gets a file of its own). Returns the file of each
// tensor.
std::map<std::string, std::string> write_safetensors_set(const std::filesystem::path& directory,
                                                         const TensorSource& source,
                                                         const std::vector<std::string>& names,
                                                         int64_t parameters_per_file, SafetensorsSetLayout layout,
                                                         const std::map<std::string, std::string>& metadata = {},
                                                         bool sync = false);

// Tensor parallelism (layers::TensorSplit): the part of a one-process host tensor `global` that tensor rank
// `split.rank` holds, of shape `local`; and the reverse, the one-process host tensor put together from the parts
// (`part_of(rank)`: tensor rank `rank`'s host part, of shape `local` and dtype `dtype`) of every rank of `split`.
Tensor tensor_parallel_part(const Tensor& global, const layers::TensorSplit& split, const Shape& local);
Tensor join_tensor_parallel_parts(const layers::TensorSplit& split, const Shape& local, DType dtype,
                                  const std::function<Tensor(int)>& part_of);

// The state of every parameter of `multi_stage`, in the optimization dtype: `P/weights` for every parameter, and with
// `optimizer_state` `P/exp_avg` and `P/exp_avg_sq` for trainable ones, as one process holds them (tensor-parallel
// parameters whole). With one rank tensors are read from the stage buffers when loaded; with several data-parallel or
// tensor-parallel ranks, every rank must call it: the shards are gathered from all ranks into this process's memory
// first (the whole state in the optimization dtype).
std::shared_ptr<TensorSource> multi_stage_source(MultiStage& multi_stage, bool optimizer_state);

// Loads the state of every parameter of `multi_stage` from `source`: `P/weights` for every parameter (converted to
// the optimization dtype), with `optimizer_state` also the Adam moments of trainable parameters, into this rank's
// shards (a tensor-parallel parameter takes this tensor rank's part of the one-process tensor); then refreshes the
// compute weights. A missing tensor, a shape that differs from the parameter's, or a tensor
// of `source` that no parameter takes is an Error naming the tensor and source.describe().
void load_multi_stage_state(MultiStage& multi_stage, const TensorSource& source, bool optimizer_state);

}  // namespace fast_llm::engine
