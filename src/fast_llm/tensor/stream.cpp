// Streams, events and byte copies: the CPU runs everything synchronously on the calling thread; CUDA devices are
// handed to detail::cuda_* (tensor/cuda/stream.cpp, or tensor/no_cuda_backend.cpp in a build without CUDA).
#include "fast_llm/tensor/stream.h"

#include <cstring>

#include "fast_llm/core/error.h"

namespace fast_llm {

Stream compute_stream(Device device) { return device.is_cpu() ? Stream{} : detail::cuda_compute_stream(device.index); }

Stream create_stream(Device device) { return device.is_cpu() ? Stream{} : detail::cuda_create_stream(device.index); }

void synchronize(Device device, Stream stream) {
  if (device.is_cuda()) detail::cuda_synchronize(device.index, stream);
}

void synchronize_device(Device device) {
  if (device.is_cuda()) detail::cuda_synchronize_device(device.index);
}

Event::Event(Device device) : device_(device) {
  if (device.is_cuda()) handle_ = detail::cuda_event_create(device.index);
}

Event::~Event() {
  if (handle_ != nullptr) detail::cuda_event_destroy(handle_);
}

// `Stream{}` means the event's device's compute stream; the CUDA side gets a real stream.
void Event::record(Stream stream) {
  if (handle_ != nullptr) detail::cuda_event_record(handle_, stream.handle ? stream : compute_stream(device_));
}

void Event::wait(Stream stream) const {
  if (handle_ != nullptr) detail::cuda_event_wait(handle_, stream.handle ? stream : compute_stream(device_));
}

void Event::synchronize() const {
  if (handle_ != nullptr) detail::cuda_event_synchronize(handle_);
}

float Event::elapsed_ms(const Event& later) const {
  FLM_CHECK(device_.is_cuda() && later.device_.is_cuda(), "stream",
            "elapsed_ms: timing events exist on CUDA devices only (events on {} and {})", device_.str(),
            later.device_.str());
  return detail::cuda_event_elapsed_ms(handle_, later.handle_);
}

void copy_bytes(void* destination, Device destination_device, const void* source, Device source_device, size_t bytes,
                Stream stream) {
  if (bytes == 0) return;
  if (destination_device.is_cpu() && source_device.is_cpu()) {
    std::memcpy(destination, source, bytes);
    return;
  }
  detail::cuda_copy_bytes(destination, destination_device, source, source_device, bytes, stream);
}

void set_bytes(void* destination, Device device, int value, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    std::memset(destination, value, bytes);
    return;
  }
  detail::cuda_set_bytes(destination, device.index, value, bytes, stream);
}

}  // namespace fast_llm
