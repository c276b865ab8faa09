// The process layout and global numerics of a run (`model.distributed`), as Fast-LLM's DistributedConfig.
//
// world_size, rank and local_world_size default to the launcher's (distributed/launch.h: torchrun, Slurm, OpenMPI; 1,
// 0, 1 without one), resolved in derive(). Derived layout (reference/fast-llm.md §6.1): data_parallel = world_size /
// (tensor_parallel * pipeline_parallel); tensor_rank = rank % tp; data and pipeline ranks follow, swapped when
// pipeline_first. Note Fast-LLM's default compute_dtype is float32.
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

enum class DistributedBackend { nccl, gloo };

// Where the processes of a run meet to set up their communicators: a TCP store served by rank 0 (at MASTER_ADDR, on
// the port distributed/launch.h gives), or files in `rendezvous_directory`, a folder every process sees.
enum class RendezvousKind { tcp, file };

// A seed shift. Fast-LLM's defaults are primes above 2^64 and every seed it derives from them is reduced modulo 2^64,
// so keeping the value modulo 2^64 gives the same derived seeds; integers of any length are accepted.
struct SeedShift {
  uint64_t value = 0;
  bool operator==(const SeedShift&) const = default;
};

// `digits` (decimal, optionally with a leading '-') modulo 2^64; nothing if it is not an integer.
constexpr std::optional<uint64_t> decimal_modulo_2_64(std::string_view digits) {
  bool negative = !digits.empty() && digits.front() == '-';
  if (negative || (!digits.empty() && digits.front() == '+')) digits.remove_prefix(1);
  if (digits.empty()) return std::nullopt;
  uint64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + uint64_t(c - '0');  // unsigned arithmetic wraps modulo 2^64
  }
  return negative ? uint64_t(0) - value : value;
}

constexpr SeedShift seed_shift(std::string_view digits) { return {decimal_modulo_2_64(digits).value()}; }

struct DistributedConfig : config::Config {
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  bool sequence_tensor_parallel = false;
  int sequence_data_parallel = 1;
  std::optional<int> world_size;
  std::optional<int> rank;
  std::optional<int> local_world_size;
  bool pipeline_first = false;
  DistributedBackend backend = DistributedBackend::nccl;
  RendezvousKind rendezvous = RendezvousKind::tcp;
  std::optional<std::filesystem::path> rendezvous_directory;
  double timeout = 60.0;
  bool use_cuda = true;
  bool force_cpu_initialization = false;
  int64_t seed = 1234;
  DType compute_dtype = DType::float32;
  DType optimization_dtype = DType::float32;
  // Fast-LLM's seed shifts (its _BIG_PRIMES), kept modulo 2^64.
  SeedShift dp_seed_shift = seed_shift("317767863445754100075399033823");
  SeedShift pp_seed_shift = seed_shift("811026271858507938190098775099");
  SeedShift pp_gen_seed_shift = seed_shift("500460795349110443334056239993");
  SeedShift pp_gen_init_seed_shift = seed_shift("631112027069964424381239824623");
  SeedShift tp_seed_shift = seed_shift("705275193289568515128435800471");
  SeedShift tp_gen_seed_shift = seed_shift("278779420836085904093221202933");
  SeedShift tp_gen_init_seed_shift = seed_shift("894750739684993243926471979237");
  SeedShift sample_seed_shift = seed_shift("751127116949963770353413160199");
  SeedShift train_seed_shift = seed_shift("938219878163699459065752841447");
  SeedShift valid_seed_shift = seed_shift("683552447587140661489672773353");
  SeedShift inference_seed_shift = seed_shift("220111337975202516901860145957");
  bool reproducible_init = false;

  void visit(config::Visitor& v) override;

  // Derived layout; valid after validation.
  int model_parallel() const { return tensor_parallel * pipeline_parallel; }
  int data_parallel() const { return *world_size / model_parallel(); }
  int batch_data_parallel() const { return data_parallel() / sequence_data_parallel; }
  int local_rank() const { return *rank % *local_world_size; }
  int tensor_rank() const { return *rank % tensor_parallel; }
  int data_rank() const {
    return pipeline_first ? (*rank / tensor_parallel) / pipeline_parallel : (*rank / tensor_parallel) % data_parallel();
  }
  int pipeline_rank() const {
    return pipeline_first ? (*rank / tensor_parallel) % pipeline_parallel : (*rank / tensor_parallel) / data_parallel();
  }
  int sequence_data_rank() const { return data_rank() % sequence_data_parallel; }
  int batch_data_rank() const { return data_rank() / sequence_data_parallel; }

 protected:
  void derive() override;
  void check() const override;
};

}  // namespace fast_llm::engine

template <>
struct fast_llm::config::EnumNames<fast_llm::engine::DistributedBackend> {
  using E = fast_llm::engine::DistributedBackend;
  static constexpr std::array<std::pair<E, std::string_view>, 2> values{{{E::nccl, "nccl"}, {E::gloo, "gloo"}}};
};

template <>
struct fast_llm::config::EnumNames<fast_llm::engine::RendezvousKind> {
  using E = fast_llm::engine::RendezvousKind;
  static constexpr std::array<std::pair<E, std::string_view>, 2> values{{{E::tcp, "tcp"}, {E::file, "file"}}};
};

template <>
struct fast_llm::config::Codec<fast_llm::engine::SeedShift> {
  static constexpr bool holds_configs = false;
  static void read(fast_llm::engine::SeedShift& value, const YAML::Node& node, const std::string& path);
  static YAML::Node write(const fast_llm::engine::SeedShift& value, const WriteOptions& options);
};
