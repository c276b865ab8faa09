// Linked when Gloo is not compiled in (FAST_LLM_GLOO=OFF): the Gloo engine does not exist, and asking for it says so.
#include "fast_llm/core/error.h"
#include "fast_llm/distributed/engines.h"

namespace fast_llm::distributed::detail {

std::unique_ptr<Communicator> create_gloo_communicator(const CommunicatorOptions& options) {
  throw NotSupportedError("distributed", fmt::format("communicator '{}': this build has no Gloo (configure with "
                                                     "-DFAST_LLM_GLOO=ON)",
                                                     options.name));
}

}  // namespace fast_llm::distributed::detail
