// Streams and device memory primitives.
//
// A Stream names an ordered queue of device work: on CUDA a cudaStream_t (the legacy default stream is never used by
// fast-llm: `Stream{}` on a CUDA device means that device's compute stream from `compute_stream`), on the CPU nothing
// (work runs synchronously on the calling thread).
#pragma once

#include <cstddef>

#include "fast_llm/core/device.h"

namespace fast_llm {

struct Stream {
  void* handle = nullptr;  // cudaStream_t on CUDA
  bool operator==(const Stream&) const = default;
};

// The per-device stream fast-llm launches compute on (created on first use; non-blocking with respect to the
// legacy default stream). CPU: Stream{}.
Stream compute_stream(Device device);
// A new stream on `device` (CUDA: non-blocking, owned by the process until exit).
Stream create_stream(Device device);
void synchronize(Device device, Stream stream);
void synchronize_device(Device device);

// Event: records a point in a stream's work; another stream can wait for it without the host.
class Event {
 public:
  explicit Event(Device device);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(Stream stream);
  void wait(Stream stream) const;  // `stream` waits until the recorded point is reached
  void synchronize() const;        // the host waits
  // Milliseconds between two recorded events (CUDA only; both must have completed).
  float elapsed_ms(const Event& later) const;

 private:
  Device device_;
  void* handle_ = nullptr;  // cudaEvent_t
};

// Copies `bytes` between any two devices; asynchronous on `stream` where the devices allow.
void copy_bytes(void* destination, Device destination_device, const void* source, Device source_device, size_t bytes,
                Stream stream);
// Sets `bytes` bytes to `value` (used for zero-filling buffers).
void set_bytes(void* destination, Device device, int value, size_t bytes, Stream stream);

namespace detail {
// CUDA side of the above, implemented in tensor/cuda/, or by tensor/no_cuda_backend.cpp when CUDA is not compiled in.
Stream cuda_compute_stream(int device);
Stream cuda_create_stream(int device);
void cuda_synchronize(int device, Stream stream);
void cuda_synchronize_device(int device);
void* cuda_event_create(int device);
void cuda_event_destroy(void* event);
void cuda_event_record(void* event, Stream stream);
void cuda_event_wait(void* event, Stream stream);
void cuda_event_synchronize(void* event);
float cuda_event_elapsed_ms(void* start, void* end);
void cuda_copy_bytes(void* destination, Device destination_device, const void* source, Device source_device,
                     size_t bytes, Stream stream);
void cuda_set_bytes(void* destination, int device, int value, size_t bytes, Stream stream);
}  // namespace detail

}  // namespace fast_llm
