// create_communicator: checks what every engine relies on (a rank within the group, a store when there are peers to
// meet, a positive timeout, a device the engine can move), then hands the options to the chosen engine.
#include "fast_llm/distributed/communicator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fast_llm/distributed/engines.h"

namespace fast_llm::distributed {

namespace detail {

std::string group_display_name(const std::string& name, std::span<const int> world_ranks) {
  if (world_ranks.size() == 1) return fmt::format("{} (rank {})", name, world_ranks[0]);
  bool consecutive = true;
  for (size_t index = 1; index < world_ranks.size(); ++index)
    consecutive = consecutive && world_ranks[index] == world_ranks[index - 1] + 1;
  if (consecutive) return fmt::format("{} (ranks {}-{})", name, world_ranks.front(), world_ranks.back());
  return fmt::format("{} (ranks {})", name, fmt::join(world_ranks, ", "));
}

}  // namespace detail

std::unique_ptr<Communicator> create_communicator(const CommunicatorOptions& options) {
  FLM_CHECK(!options.name.empty(), "distributed", "a communicator needs a name (for its store keys and messages)");
  FLM_CHECK(options.size >= 1, "distributed", "communicator '{}': size {} (at least 1)", options.name,
            options.size);
  FLM_CHECK(options.rank >= 0 && options.rank < options.size, "distributed",
            "communicator '{}': rank {} outside the group of {}", options.name, options.rank, options.size);
  FLM_CHECK(options.size == 1 || options.store != nullptr, "distributed",
            "communicator '{}' of {} ranks needs a rendezvous store", options.name, options.size);
  FLM_CHECK(options.timeout.count() > 0, "distributed", "communicator '{}': timeout {} ms (must be positive)",
            options.name, options.timeout.count());
  switch (options.backend) {
    case CommunicationBackend::gloo:
      return detail::create_gloo_communicator(options);
    case CommunicationBackend::nccl:
      FLM_CHECK(options.device.is_cuda(), "distributed",
                "communicator '{}': NCCL moves CUDA tensors, not {} ones (Gloo serves the CPU)", options.name,
                options.device.str());
      return detail::create_nccl_communicator(options);
  }
  FLM_ASSERT(false, "unknown communication backend {}", int(options.backend));
  return nullptr;
}

}  // namespace fast_llm::distributed
