// CUDA graph capture, instantiation and launch through the CUDA runtime API (tensor/graph.h), with the caching
// allocator's graph pool switched on for the captured stream while a capture lasts.
#include <cuda_runtime_api.h>

#include <exception>

#include "fast_llm/core/cuda/check.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/tensor/allocator.h"
#include "fast_llm/tensor/cuda/device_guard.h"
#include "fast_llm/tensor/graph.h"

namespace fast_llm::detail {

namespace {

cudaStream_t cuda_stream(Stream stream) { return static_cast<cudaStream_t>(stream.handle); }

// Ends the capture of `stream`, whatever state it is in, and returns the captured graph (null when the capture was
// invalidated) with the status of cudaStreamEndCapture.
cudaError_t end_capture(Stream stream, cudaGraph_t& graph) {
  graph = nullptr;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(cuda_stream(stream), &status) != cudaSuccess || status == cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return cudaErrorStreamCaptureUnmatched;
  }
  // An invalidated capture ends here too, with an error and no graph.
  return cudaStreamEndCapture(cuda_stream(stream), &graph);
}

}  // namespace

void cuda_begin_capture(int device, Stream stream) {
  CudaDeviceGuard guard(device);
  cuda_allocator_begin_graph_capture(device, stream);
  // Relaxed: the allocator may call cudaMalloc for new graph-pool segments while the capture lasts.
  const cudaError_t status = cudaStreamBeginCapture(cuda_stream(stream), cudaStreamCaptureModeRelaxed);
  if (status != cudaSuccess) {
    cuda_allocator_end_graph_capture(device);
    throw_cuda_error("cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed)", status);
  }
}

void* cuda_end_capture(int device, Stream stream) {
  CudaDeviceGuard guard(device);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = end_capture(stream, graph);
  cuda_allocator_end_graph_capture(device);
  if (ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    throw_cuda_error("cudaStreamEndCapture(stream, &graph)", ended);
  }
  cudaGraphExec_t executable = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiateWithFlags(&executable, graph, 0);
  // The executable graph does not need the graph it was made from.
  cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess)
    throw_cuda_error("cudaGraphInstantiateWithFlags(&executable, graph, 0)", instantiated);
  return executable;
}

void cuda_abort_capture(int device, Stream stream) {
  // Runs from GraphCapture's destructor while an exception unwinds: it must not throw, and the exception in flight
  // says what went wrong, so failures here are only logged.
  int previous = 0;
  const bool switched =
      cudaGetDevice(&previous) == cudaSuccess && previous != device && cudaSetDevice(device) == cudaSuccess;
  cudaGraph_t graph = nullptr;
  end_capture(stream, graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
  try {
    cuda_allocator_end_graph_capture(device);
  } catch (const std::exception& error) {
    log_error("[cuda] ending the graph pool of an abandoned capture failed: {}", error.what());
  }
  if (switched) cudaSetDevice(previous);
}

void cuda_graph_launch(int device, void* graph, Stream stream) {
  CudaDeviceGuard guard(device);
  FLM_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), cuda_stream(stream)));
}

void cuda_graph_destroy(void* graph) {
  // From Graph's destructor, which cannot throw; as for events, a failure means the runtime is broken or gone.
  const cudaError_t status = cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
  if (status != cudaSuccess && status != cudaErrorCudartUnloading) {
    log_error("[cuda] cudaGraphExecDestroy failed: {}", cudaGetErrorString(status));
    cudaGetLastError();
  }
}

bool cuda_is_capturing(int device, Stream stream) {
  CudaDeviceGuard guard(device);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FLM_CUDA_CHECK(cudaStreamIsCapturing(cuda_stream(stream), &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace fast_llm::detail
