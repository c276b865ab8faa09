// Tensor: shape, strides, dtype and device over shared storage with an offset.
//
// A Tensor is a cheap handle (copying it shares storage, like torch.Tensor); views (slice, select, reshape,
// transpose, flatten) share storage too. Shapes are row-major with strides in elements. Math lives in kernels/,
// not here: this file only allocates, views, and moves bytes (`to`, `copy_bytes_from`). Element-wise copy between
// different layouts or dtypes, fill and cast are kernels (kernels/copy.h).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "fast_llm/core/device.h"
#include "fast_llm/core/dtype.h"
#include "fast_llm/core/error.h"
#include "fast_llm/core/half.h"
#include "fast_llm/tensor/stream.h"

namespace fast_llm {

inline constexpr int kMaxTensorRank = 8;

// A small fixed-capacity list of dimensions (sizes or strides).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int dim) const { return dims_[size_t(dim)]; }
  int64_t& operator[](int dim) { return dims_[size_t(dim)]; }
  int64_t numel() const;
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + rank_; }
  void push_back(int64_t dim);
  bool operator==(const Shape& other) const;
  // "(2, 3, 4)"
  std::string str() const;

 private:
  std::array<int64_t, kMaxTensorRank> dims_{};
  int rank_ = 0;
};

// Owns one device allocation (or wraps foreign memory, e.g. a memory-mapped file, kept alive by `keep_alive`).
class Storage {
 public:
  Storage(Device device, size_t bytes, Stream stream);  // allocates through the device's allocator
  Storage(Device device, void* data, size_t bytes, std::shared_ptr<void> keep_alive);  // wraps, never frees
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // False for wrapped memory (never freed by fast-llm).
  bool owns_memory() const { return owned_; }
  // The stream the allocation is ordered on (CUDA: the caching allocator's pool it returns to).
  Stream stream() const { return stream_; }

 private:
  Device device_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Stream stream_;
  std::shared_ptr<void> keep_alive_;
  bool owned_ = false;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: `defined()` is false

  // Uninitialised memory. On CUDA the allocation is ordered on `stream` (caching allocator).
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu(), Stream stream = {});
  // Host memory a GPU copies from and to asynchronously: page-locked when a CUDA device is visible, ordinary host
  // memory otherwise. Page-locking and releasing are slow (and releasing may wait for the device): allocate such
  // tensors once and reuse them, never inside a training step.
  static Tensor empty_pinned(const Shape& shape, DType dtype);
  // Wraps existing memory without copying; `keep_alive` holds whatever owns it.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device,
                          std::shared_ptr<void> keep_alive = nullptr);
  // Host tensor holding a copy of `values` (fp32 values are rounded to `dtype` for floating types).
  static Tensor from_values(std::span<const float> values, const Shape& shape, DType dtype = DType::float32);
  // 1-d tensor of the integers `values` as int64 or int32 (token ids, positions, lengths, offsets), on `device`: built
  // on the host, then copied on `stream` when the device is a GPU.
  static Tensor from_indices(std::span<const int64_t> values, DType dtype, Device device = Device::cpu(),
                             Stream stream = {});

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int rank() const { return shape_.rank(); }
  // Size along `dim`; negative dims count from the end.
  int64_t size(int dim) const;
  int64_t stride(int dim) const;
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  size_t element_size() const { return dtype_size(dtype_); }
  size_t nbytes() const { return size_t(numel()) * element_size(); }
  int64_t offset() const { return offset_; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* data() const;
  // Typed pointer; checks that T matches the dtype (float, double, bfloat16, float16, int32_t, int64_t, uint8_t,
  // uint16_t, uint32_t).
  template <class T>
  T* data_as() const;

  // Views (share storage).
  Tensor slice(int dim, int64_t begin, int64_t end) const;
  Tensor select(int dim, int64_t index) const;  // removes `dim`
  Tensor transpose(int dim0, int dim1) const;
  Tensor reshape(const Shape& shape) const;  // contiguous tensors only; one dimension may be -1
  Tensor flatten() const { return reshape(Shape{numel()}); }
  Tensor unsqueeze(int dim) const;
  // Same bytes as another dtype of the same size (e.g. bf16 <-> uint16), contiguous only.
  Tensor view_as(DType dtype) const;

  // A contiguous copy on `device` (bytes only: dtype unchanged). Same device and contiguous returns *this. A copy to
  // the CPU waits for `stream`, so the host can read the result at once. Non-contiguous views are gathered on the
  // host (slow; for printing and tests: device-side strided copies are kernels/copy.h).
  Tensor to(Device device, Stream stream = {}) const;
  // Copies bytes from `source` (same shape, dtype; both contiguous; any devices), ordered on `stream`.
  void copy_bytes_from(const Tensor& source, Stream stream = {});
  // Marks the storage as also used on `stream`: the CUDA caching allocator reuses its memory only after the work
  // queued on `stream` so far has finished. Needed when a tensor allocated on one stream is used on another (e.g. the
  // communication stream) and may be freed before that work ends. No-op for CPU tensors and wrapped memory.
  void record_stream(Stream stream) const;

  // Host-side element access for tests and printing (CPU tensors, any strides; floats are widened to double).
  double item_as_double(std::span<const int64_t> index) const;
  double item() const;  // single-element tensor (any device: copies to host on the device's compute stream and waits)

  // "Tensor(shape=(2, 3), dtype=bfloat16, device=cuda:0)\n[[...]]", laid out like PyTorch. A tensor of more than
  // `max_elements` values shows the first and last values of each dimension around `...`, as many as fit in
  // `max_elements` (at least one at each end, so a tensor of rank r may show 2^r values).
  std::string str(int64_t max_elements = 64) const;

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;  // in elements
  DType dtype_ = DType::float32;
};

// Row-major contiguous strides for `shape`.
Shape contiguous_strides(const Shape& shape);

template <class T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::float32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::float64; };
template <> struct DTypeOf<bfloat16> { static constexpr DType value = DType::bfloat16; };
template <> struct DTypeOf<float16> { static constexpr DType value = DType::float16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::int32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::int64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::uint8; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = DType::uint16; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::uint32; };

template <class T>
T* Tensor::data_as() const {
  FLM_CHECK(dtype_ == DTypeOf<T>::value, "tensor", "data_as<{}> on a {} tensor", dtype_name(DTypeOf<T>::value),
            dtype_name(dtype_));
  return static_cast<T*>(data());
}

}  // namespace fast_llm
