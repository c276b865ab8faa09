// Checkpoint reading and writing settings, as Fast-LLM's checkpoint configs: `pretrained` (CheckpointLoadConfig),
// `training.export` (via CheckpointStateSaveOptions) and the output of `convert` (CheckpointSaveConfig).
//
// Formats: `distributed` (per-rank shards, exact resume), `fast_llm` (layout-independent), and Hugging Face formats
// (config.json + safetensors): `llama`, `mistral`, `qwen2`, `mixtral`, and `auto` (loading only: picks the format
// from config.json's model_type). Fast-LLM's other GPT formats are accepted by name and rejected as not supported yet.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>
#include <utility>

#include "fast_llm/config/config.h"
#include "fast_llm/config/dtype_codec.h"
#include "fast_llm/core/dtype.h"

namespace fast_llm::engine {

enum class CheckpointFormat {
  distributed,
  fast_llm,
  auto_,
  llama,
  qwen2,
  mistral,
  mixtral,
  mtp_llama,
  dream,
  diffusion_llama,
  apriel_hybrid_ssm,
  apriel2_text,
  gemma4,
};

// Whether the checkpoint engine reads and writes the format itself (distributed, fast_llm); the others are the model
// type's (external.h).
bool checkpoint_format_is_native(CheckpointFormat format);
// Whether the format stores optimizer state (only the native formats do).
bool checkpoint_format_supports_optimizer(CheckpointFormat format);
// Why the format has no reader or writer yet, or nothing when it has.
std::optional<std::string_view> checkpoint_format_not_supported_reason(CheckpointFormat format);

// Which parts of a pretrained checkpoint's configuration are loaded: none, the base model (`model`), or also the
// multi-stage and distributed sections (`fast_llm`). Explicit values of the run's own config take precedence.
enum class ModelConfigType { none, model, fast_llm };

struct CheckpointLoadConfig : config::Config {
  CheckpointFormat format = CheckpointFormat::fast_llm;
  std::optional<std::filesystem::path> path;
  std::optional<double> timeout;
  ModelConfigType load_config = ModelConfigType::model;
  bool model_weights = true;
  bool optimizer_state = false;
  void visit(config::Visitor& v) override;

 protected:
  void check() const override;
};

// What a save in an external (Hugging Face) format holds of a model with PEFT adapters (LoRA): the model with the
// adapters merged into its weights (W + alpha / rank * B A), loadable as a plain model, or the adapters alone in
// Hugging Face PEFT's format (adapter_config.json + adapter_model.safetensors), to apply on the base model.
enum class PeftExport { merged, adapter };

// The fields of a checkpoint save shared by `training.export` and CheckpointSaveConfig (a mixin: the owner visits,
// resolves and checks them).
struct CheckpointStateSaveOptions {
  CheckpointFormat format = CheckpointFormat::fast_llm;
  bool model_weights = true;
  // Unset: saved when the format can hold it; resolved by resolve_save_options().
  std::optional<bool> optimizer_state;
  int64_t parameters_per_file = int64_t(1) << 32;
  std::optional<DType> data_type;
  PeftExport peft = PeftExport::merged;

 protected:
  void visit_save_options(config::Visitor& v);
  void resolve_save_options();
  void check_save_options(const config::Config& owner) const;
};

// Which saves of a folder prune_checkpoints keeps: the newest `keep` (all when unset), for ever the save at step s
// when (s - offset) is a multiple of keep_every * interval, and the newest save before step `keep_newest_before` when
// set. The training loop takes these from the `keep`, `keep_every`, `interval` and `offset` of `training.checkpoint`
// and `training.export`, and sets `keep_newest_before` to the first step of a streak of skipped steps, so that the
// last save from before a divergence survives however many saves follow it.
struct CheckpointRetention {
  std::optional<int> keep;
  std::optional<int> keep_every;
  std::optional<int> interval;
  int offset = 0;
  std::optional<int64_t> keep_newest_before;
};

struct CheckpointSaveConfig : config::Config, CheckpointStateSaveOptions {
  std::optional<std::filesystem::path> path;
  std::optional<double> timeout;
  void visit(config::Visitor& v) override;

 protected:
  void derive() override;
  void check() const override;
};

}  // namespace fast_llm::engine

template <>
struct fast_llm::config::EnumNames<fast_llm::engine::CheckpointFormat> {
  using E = fast_llm::engine::CheckpointFormat;
  static constexpr std::array<std::pair<E, std::string_view>, 13> values{{{E::distributed, "distributed"},
                                                                           {E::fast_llm, "fast_llm"},
                                                                           {E::auto_, "auto"},
                                                                           {E::llama, "llama"},
                                                                           {E::qwen2, "qwen2"},
                                                                           {E::mistral, "mistral"},
                                                                           {E::mixtral, "mixtral"},
                                                                           {E::mtp_llama, "mtp_llama"},
                                                                           {E::dream, "dream"},
                                                                           {E::diffusion_llama, "diffusion_llama"},
                                                                           {E::apriel_hybrid_ssm, "apriel_hybrid_ssm"},
                                                                           {E::apriel2_text, "apriel2_text"},
                                                                           {E::gemma4, "gemma4"}}};
};

template <>
struct fast_llm::config::EnumNames<fast_llm::engine::ModelConfigType> {
  using E = fast_llm::engine::ModelConfigType;
  static constexpr std::array<std::pair<E, std::string_view>, 3> values{
      {{E::none, "none"}, {E::model, "model"}, {E::fast_llm, "fast_llm"}}};
};

template <>
struct fast_llm::config::EnumNames<fast_llm::engine::PeftExport> {
  using E = fast_llm::engine::PeftExport;
  static constexpr std::array<std::pair<E, std::string_view>, 2> values{
      {{E::merged, "merged"}, {E::adapter, "adapter"}}};
};
