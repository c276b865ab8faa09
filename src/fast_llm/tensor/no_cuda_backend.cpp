// Linked when the CUDA backend is not compiled in: every CUDA entry point says so.
#include "fast_llm/core/error.h"
#include "fast_llm/tensor/allocator.h"
#include "fast_llm/tensor/graph.h"
#include "fast_llm/tensor/stream.h"

namespace fast_llm::detail {

namespace {
[[noreturn]] void no_cuda() {
  throw NotSupportedError("cuda", "this build has no CUDA backend (configure with -DFAST_LLM_CUDA=ON)");
}
}  // namespace

Stream cuda_compute_stream(int device) { no_cuda(); }
Stream cuda_create_stream(int device) { no_cuda(); }
void cuda_synchronize(int device, Stream stream) { no_cuda(); }
void cuda_synchronize_device(int device) { no_cuda(); }
void* cuda_event_create(int device) { no_cuda(); }
void cuda_event_destroy(void* event) { no_cuda(); }
void cuda_event_record(void* event, Stream stream) { no_cuda(); }
void cuda_event_wait(void* event, Stream stream) { no_cuda(); }
void cuda_event_synchronize(void* event) { no_cuda(); }
float cuda_event_elapsed_ms(void* start, void* end) { no_cuda(); }
void cuda_copy_bytes(void* destination, Device destination_device, const void* source, Device source_device,
                     size_t bytes, Stream stream) {
  no_cuda();
}
void cuda_set_bytes(void* destination, int device, int value, size_t bytes, Stream stream) { no_cuda(); }
Allocator& cuda_caching_allocator(int device) { no_cuda(); }
void* cuda_host_allocate(size_t bytes) { no_cuda(); }
// Nothing can have been allocated.
void cuda_host_free(void* pointer) {}
void cuda_allocator_begin_graph_capture(int device, Stream stream) { no_cuda(); }
void cuda_allocator_end_graph_capture(int device) { no_cuda(); }
void cuda_begin_capture(int device, Stream stream) { no_cuda(); }
void* cuda_end_capture(int device, Stream stream) { no_cuda(); }
// No capture can have begun.
void cuda_abort_capture(int device, Stream stream) {}
void cuda_graph_launch(int device, void* graph, Stream stream) { no_cuda(); }
// No graph can exist.
void cuda_graph_destroy(void* graph) {}
bool cuda_is_capturing(int device, Stream stream) { no_cuda(); }

}  // namespace fast_llm::detail
