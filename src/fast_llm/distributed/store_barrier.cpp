// A barrier through a store: each participant increments the counter `name/arrived`; the one that brings it to a
// multiple of `world_size` sets `name/done/<generation>`, which everyone waits for. The generation (arrivals before
// this one, divided by the world size) lets one name serve successive barriers of the same participants; the wait
// gives up at the store's timeout with an Error naming the key, so a missing participant ends the run, not hangs it.
#include <fmt/format.h>

#include "fast_llm/core/error.h"
#include "fast_llm/distributed/store.h"

namespace fast_llm::distributed {

void store_barrier(Store& store, const std::string& name, int world_size) {
  FLM_CHECK(world_size >= 1, "distributed", "barrier '{}' on {}: world size {} must be at least 1", name,
            store.describe(), world_size);
  const int64_t arrived = store.add(name + "/arrived", 1);
  const std::string done = fmt::format("{}/done/{}", name, (arrived - 1) / world_size);
  if (arrived % world_size == 0) store.set(done, {});
  store.wait({done});
}

}  // namespace fast_llm::distributed
