// What create_communicator hands to the two engines (private to the distributed library): each engine's factory,
// called with options already checked (rank within size, a store when size > 1, a positive timeout), and the display
// name both give their groups. A build without Gloo or without CUDA links, in place of that engine, a factory that
// throws NotSupportedError, so that communicator.cpp chooses the engine without #ifdef.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "fast_llm/distributed/communicator.h"

namespace fast_llm::distributed::detail {

std::unique_ptr<Communicator> create_gloo_communicator(const CommunicatorOptions& options);
std::unique_ptr<Communicator> create_nccl_communicator(const CommunicatorOptions& options);

// "world (ranks 0-3)", "data (ranks 0, 2, 4, 6)", "tensor (rank 5)": `name` and the group's ranks in the communicator
// it was first created as (the world), in group order.
std::string group_display_name(const std::string& name, std::span<const int> world_ranks);

}  // namespace fast_llm::distributed::detail
