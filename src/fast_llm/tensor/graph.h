// CUDA graphs: the device work queued on a stream, captured once and replayed with one launch.
//
//   Graph graph;
//   {
//     GraphCapture capture(device, stream);  // from here on, work queued on `stream` is recorded, not run
//     ... queue the work on `stream` ...
//     graph = capture.finish();              // instantiated; throws fast_llm::Error when the capture failed
//   }
//   graph.launch(stream);                    // runs the recorded work, as often as wanted
//
// A graph replays the kernels with the arguments they were launched with: the same pointers, sizes and host scalars.
// So the memory a graph touches must stay where it was: while a capture lasts, the device's caching allocator serves
// every allocation ordered on the captured stream from its graph pool (tensor/allocator.h), whose blocks are never
// handed to ordinary allocations nor given back to the driver. Work queued during a capture must not wait on the host
// (no copy to the host, no stream or event synchronisation, no cudaFree); host values the work was queued with are
// baked in. The capture runs in relaxed mode (cudaStreamCaptureModeRelaxed), so that the allocator may still reach
// the driver for new segments. CUDA devices only; in a build without CUDA these throw "this build has no CUDA backend".
#pragma once

#include "fast_llm/core/device.h"
#include "fast_llm/tensor/stream.h"

namespace fast_llm {

// An instantiated graph (cudaGraphExec_t). Destroying it while a launch is still running is safe: the runtime frees it
// once that launch ends.
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  bool defined() const { return handle_ != nullptr; }
  // Queues the whole graph on `stream` (`Stream{}`: the device's compute stream).
  void launch(Stream stream = {}) const;

 private:
  friend class GraphCapture;
  Graph(Device device, void* handle) : device_(device), handle_(handle) {}

  Device device_;
  void* handle_ = nullptr;  // cudaGraphExec_t
};

// The capture of `stream` on a CUDA `device`, from construction to `finish`. A capture that is not finished (an
// exception left the scope) is ended and thrown away by the destructor, and the stream runs work again.
class GraphCapture {
 public:
  GraphCapture(Device device, Stream stream = {});
  ~GraphCapture();
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

  // Ends the capture and instantiates the graph. Throws (with the CUDA error) when something queued during the capture
  // was not allowed in one; the capture is over either way.
  Graph finish();

 private:
  Device device_;
  Stream stream_;
  bool capturing_ = false;
};

// Whether work queued on `stream` is being captured now (false on the CPU).
bool is_capturing(Device device, Stream stream = {});

namespace detail {
// CUDA side of the above (tensor/cuda/graph.cpp, or tensor/no_cuda_backend.cpp without CUDA). `cuda_end_capture`
// returns the instantiated graph or throws; `cuda_abort_capture` never throws.
void cuda_begin_capture(int device, Stream stream);
void* cuda_end_capture(int device, Stream stream);
void cuda_abort_capture(int device, Stream stream);
void cuda_graph_launch(int device, void* graph, Stream stream);
void cuda_graph_destroy(void* graph);
bool cuda_is_capturing(int device, Stream stream);
}  // namespace detail

}  // namespace fast_llm
