// CUDA streams, events and byte copies through the CUDA runtime API (no kernels: compiled by the host compiler).
#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

#include "fast_llm/core/cuda/check.h"
#include "fast_llm/core/logging.h"
#include "fast_llm/tensor/cuda/device_guard.h"
#include "fast_llm/tensor/stream.h"

namespace fast_llm::detail {

namespace {

cudaStream_t new_stream(int device) {
  CudaDeviceGuard guard(device);
  cudaStream_t stream = nullptr;
  // Non-blocking: fast-llm never uses the legacy default stream, and must not be serialised against code that does.
  FLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

cudaStream_t resolve(int device, Stream stream) {
  return static_cast<cudaStream_t>(stream.handle != nullptr ? stream.handle : cuda_compute_stream(device).handle);
}

}  // namespace

Stream cuda_compute_stream(int device) {
  // device_info checks the index against the probed devices, with a message naming how many there are.
  device_info(Device::cuda(device));
  // Streams live until the process exits (destroying them during static destruction races the runtime's own
  // teardown), so they are created once and never freed.
  static std::mutex mutex;
  static std::vector<cudaStream_t> streams(cuda_devices().size(), nullptr);
  std::lock_guard lock(mutex);
  cudaStream_t& stream = streams[size_t(device)];
  if (stream == nullptr) stream = new_stream(device);
  return Stream{stream};
}

Stream cuda_create_stream(int device) {
  device_info(Device::cuda(device));
  return Stream{new_stream(device)};
}

void cuda_synchronize(int device, Stream stream) {
  CudaDeviceGuard guard(device);
  FLM_CUDA_CHECK(cudaStreamSynchronize(resolve(device, stream)));
}

void cuda_synchronize_device(int device) {
  CudaDeviceGuard guard(device);
  FLM_CUDA_CHECK(cudaDeviceSynchronize());
}

void* cuda_event_create(int device) {
  device_info(Device::cuda(device));
  CudaDeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  // With timing: Event::elapsed_ms needs it, and the allocator uses its own events without.
  FLM_CUDA_CHECK(cudaEventCreate(&event));
  return event;
}

void cuda_event_destroy(void* event) {
  // Called from Event's destructor, which cannot throw; a failure here means the runtime is already broken or gone
  // (process exit), and the next checked call reports the real problem.
  cudaError_t status = cudaEventDestroy(static_cast<cudaEvent_t>(event));
  if (status != cudaSuccess && status != cudaErrorCudartUnloading) {
    log_error("[cuda] cudaEventDestroy failed: {}", cudaGetErrorString(status));
    cudaGetLastError();
  }
}

void cuda_event_record(void* event, Stream stream) {
  FLM_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream.handle)));
}

void cuda_event_wait(void* event, Stream stream) {
  FLM_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle), static_cast<cudaEvent_t>(event), 0));
}

void cuda_event_synchronize(void* event) { FLM_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }

float cuda_event_elapsed_ms(void* start, void* end) {
  float milliseconds = 0;
  FLM_CUDA_CHECK(
      cudaEventElapsedTime(&milliseconds, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return milliseconds;
}

void cuda_copy_bytes(void* destination, Device destination_device, const void* source, Device source_device,
                     size_t bytes, Stream stream) {
  // The copy is queued on a stream of the CUDA side (the destination's when both are GPUs, as a consumer's stream
  // is what later work on the result is ordered on); unified addressing lets the runtime infer the direction.
  int device = destination_device.is_cuda() ? destination_device.index : source_device.index;
  CudaDeviceGuard guard(device);
  FLM_CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDefault, resolve(device, stream)));
}

void cuda_set_bytes(void* destination, int device, int value, size_t bytes, Stream stream) {
  CudaDeviceGuard guard(device);
  FLM_CUDA_CHECK(cudaMemsetAsync(destination, value, bytes, resolve(device, stream)));
}

}  // namespace fast_llm::detail
