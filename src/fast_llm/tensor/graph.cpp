// Graphs and captures: checks and ownership here, the CUDA calls in detail::cuda_* (tensor/cuda/graph.cpp, or
// tensor/no_cuda_backend.cpp in a build without CUDA).
#include "fast_llm/tensor/graph.h"

#include <utility>

#include "fast_llm/core/error.h"

namespace fast_llm {

Graph::~Graph() {
  if (handle_ != nullptr) detail::cuda_graph_destroy(handle_);
}

Graph::Graph(Graph&& other) noexcept
    : device_(other.device_), handle_(std::exchange(other.handle_, nullptr)) {}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) detail::cuda_graph_destroy(handle_);
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void Graph::launch(Stream stream) const {
  FLM_ASSERT(handle_ != nullptr, "launch of an empty graph");
  detail::cuda_graph_launch(device_.index, handle_, stream.handle ? stream : compute_stream(device_));
}

GraphCapture::GraphCapture(Device device, Stream stream) : device_(device) {
  FLM_CHECK(device.is_cuda(), "graph", "CUDA graphs need a CUDA device, got {}", device.str());
  stream_ = stream.handle ? stream : compute_stream(device);
  detail::cuda_begin_capture(device.index, stream_);
  capturing_ = true;
}

GraphCapture::~GraphCapture() {
  if (capturing_) detail::cuda_abort_capture(device_.index, stream_);
}

Graph GraphCapture::finish() {
  FLM_ASSERT(capturing_, "finish of a graph capture that already ended");
  capturing_ = false;
  return Graph(device_, detail::cuda_end_capture(device_.index, stream_));
}

bool is_capturing(Device device, Stream stream) {
  if (!device.is_cuda()) return false;
  return detail::cuda_is_capturing(device.index, stream.handle ? stream : compute_stream(device));
}

}  // namespace fast_llm
