// Linked when the CUDA backend is not compiled in: the NCCL engine does not exist, and asking for it says so.
#include "fast_llm/core/error.h"
#include "fast_llm/distributed/engines.h"

namespace fast_llm::distributed::detail {

std::unique_ptr<Communicator> create_nccl_communicator(const CommunicatorOptions& options) {
  throw NotSupportedError("distributed", fmt::format("communicator '{}': NCCL needs the CUDA backend, which this "
                                                     "build does not have (configure with -DFAST_LLM_CUDA=ON)",
                                                     options.name));
}

}  // namespace fast_llm::distributed::detail
