// Shape, Storage and Tensor: allocation, views, byte copies and printing. No math: that is kernels/.
#include "fast_llm/tensor/tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "fast_llm/core/logging.h"
#include "fast_llm/tensor/allocator.h"

namespace fast_llm {

// ---------------------------------------------------------------------------------------------------------------------
// Shape

namespace {
void check_rank(size_t rank) {
  FLM_CHECK(rank <= size_t(kMaxTensorRank), "tensor", "shape: rank {} exceeds the maximum of {}", rank,
            kMaxTensorRank);
}
}  // namespace

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  check_rank(dims.size());
  std::copy(dims.begin(), dims.end(), dims_.begin());
  rank_ = int(dims.size());
}

int64_t Shape::numel() const {
  int64_t count = 1;
  for (int64_t dim : *this) count *= dim;
  return count;
}

void Shape::push_back(int64_t dim) {
  check_rank(size_t(rank_) + 1);
  dims_[size_t(rank_++)] = dim;
}

bool Shape::operator==(const Shape& other) const { return std::equal(begin(), end(), other.begin(), other.end()); }

std::string Shape::str() const {
  // A single dimension prints as "(3)", not Python's "(3,)": these strings are for people, not for eval.
  return fmt::format("({})", fmt::join(begin(), end(), ", "));
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides = shape;
  int64_t stride = 1;
  for (int dim = shape.rank() - 1; dim >= 0; --dim) {
    strides[dim] = stride;
    stride *= shape[dim];
  }
  return strides;
}

// ---------------------------------------------------------------------------------------------------------------------
// Storage

namespace {
// `Stream{}` on a CUDA device means its compute stream; resolving it once here makes the allocation and the
// deallocation name the same pool.
Stream resolve_stream(Device device, Stream stream) {
  return device.is_cuda() && stream.handle == nullptr ? compute_stream(device) : stream;
}
}  // namespace

Storage::Storage(Device device, size_t bytes, Stream stream)
    : device_(device), bytes_(bytes), stream_(resolve_stream(device, stream)), owned_(true) {
  data_ = allocator_for(device).allocate(bytes, stream_);
}

Storage::Storage(Device device, void* data, size_t bytes, std::shared_ptr<void> keep_alive)
    : device_(device), data_(data), bytes_(bytes), keep_alive_(std::move(keep_alive)), owned_(false) {}

Storage::~Storage() {
  if (!owned_) return;
  // A destructor cannot propagate an error (it would terminate the process in the middle of unwinding another one);
  // a failed free leaks the block, which is the least harmful outcome, and is reported.
  try {
    allocator_for(device_).deallocate(data_, stream_);
  } catch (const std::exception& error) {
    log_error("[tensor] freeing {} bytes on {} failed: {}", bytes_, device_.str(), error.what());
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Element access helpers

namespace {

double read_element(const void* pointer, DType dtype) {
  switch (dtype) {
    case DType::float32: return *static_cast<const float*>(pointer);
    case DType::float64: return *static_cast<const double*>(pointer);
    case DType::bfloat16: return to_float(*static_cast<const bfloat16*>(pointer));
    case DType::float16: return to_float(*static_cast<const float16*>(pointer));
    case DType::int32: return *static_cast<const int32_t*>(pointer);
    case DType::int64: return double(*static_cast<const int64_t*>(pointer));
    case DType::uint8: return *static_cast<const uint8_t*>(pointer);
    case DType::uint16: return *static_cast<const uint16_t*>(pointer);
    case DType::uint32: return *static_cast<const uint32_t*>(pointer);
  }
  FLM_ASSERT(false, "unknown dtype {}", int(dtype));
  return 0;
}

template <class T>
void write_integer(void* pointer, float value, DType dtype) {
  FLM_CHECK(std::nearbyint(value) == value && double(value) >= double(std::numeric_limits<T>::lowest()) &&
                double(value) <= double(std::numeric_limits<T>::max()),
            "tensor", "from_values: {} is not representable as {}", value, dtype_name(dtype));
  *static_cast<T*>(pointer) = T(value);
}

void write_element(void* pointer, DType dtype, float value) {
  switch (dtype) {
    case DType::float32: *static_cast<float*>(pointer) = value; return;
    case DType::float64: *static_cast<double*>(pointer) = value; return;
    case DType::bfloat16: *static_cast<bfloat16*>(pointer) = to_bfloat16(value); return;
    case DType::float16: *static_cast<float16*>(pointer) = to_float16(value); return;
    case DType::int32: write_integer<int32_t>(pointer, value, dtype); return;
    case DType::int64: write_integer<int64_t>(pointer, value, dtype); return;
    case DType::uint8: write_integer<uint8_t>(pointer, value, dtype); return;
    case DType::uint16: write_integer<uint16_t>(pointer, value, dtype); return;
    case DType::uint32: write_integer<uint32_t>(pointer, value, dtype); return;
  }
  FLM_ASSERT(false, "unknown dtype {}", int(dtype));
}

// Normalises a possibly negative dimension into [0, rank).
int normalize_dim(int dim, int rank, const Shape& shape, std::string_view op) {
  int normalized = dim < 0 ? dim + rank : dim;
  FLM_CHECK(normalized >= 0 && normalized < rank, "tensor", "{}: dim {} out of range for shape {}", op, dim,
            shape.str());
  return normalized;
}

// Elements between the first and one past the last element a view can reach (all strides are non-negative).
int64_t view_extent(const Shape& shape, const Shape& strides) {
  if (shape.numel() == 0) return 0;
  int64_t extent = 1;
  for (int dim = 0; dim < shape.rank(); ++dim) extent += (shape[dim] - 1) * strides[dim];
  return extent;
}

// Calls `visit(element_offset)` for every element of a strided view in row-major order.
template <class Visit>
void for_each_offset(const Shape& shape, const Shape& strides, int64_t offset, Visit&& visit) {
  int64_t count = shape.numel();
  if (count == 0) return;
  std::array<int64_t, kMaxTensorRank> index{};
  int64_t position = offset;
  for (int64_t element = 0; element < count; ++element) {
    visit(position);
    for (int dim = shape.rank() - 1; dim >= 0; --dim) {
      if (++index[size_t(dim)] < shape[dim]) {
        position += strides[dim];
        break;
      }
      position -= (shape[dim] - 1) * strides[dim];
      index[size_t(dim)] = 0;
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------------
// Construction

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, Stream stream) {
  for (int64_t dim : shape)
    FLM_CHECK(dim >= 0, "tensor", "empty: negative size in shape {}", shape.str());
  Tensor tensor;
  tensor.storage_ = std::make_shared<Storage>(device, size_t(shape.numel()) * dtype_size(dtype), stream);
  tensor.shape_ = shape;
  tensor.strides_ = contiguous_strides(shape);
  tensor.dtype_ = dtype;
  return tensor;
}

Tensor Tensor::empty_pinned(const Shape& shape, DType dtype) {
  if (cuda_devices().empty()) return empty(shape, dtype);
  for (int64_t dim : shape)
    FLM_CHECK(dim >= 0, "tensor", "empty_pinned: negative size in shape {}", shape.str());
  const size_t bytes = size_t(shape.numel()) * dtype_size(dtype);
  void* data = detail::cuda_host_allocate(bytes);
  return from_blob(data, shape, dtype, Device::cpu(), std::shared_ptr<void>(data, detail::cuda_host_free));
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, Device device,
                         std::shared_ptr<void> keep_alive) {
  for (int64_t dim : shape)
    FLM_CHECK(dim >= 0, "tensor", "from_blob: negative size in shape {}", shape.str());
  Tensor tensor;
  tensor.storage_ =
      std::make_shared<Storage>(device, data, size_t(shape.numel()) * dtype_size(dtype), std::move(keep_alive));
  tensor.shape_ = shape;
  tensor.strides_ = contiguous_strides(shape);
  tensor.dtype_ = dtype;
  return tensor;
}

Tensor Tensor::from_values(std::span<const float> values, const Shape& shape, DType dtype) {
  FLM_CHECK(int64_t(values.size()) == shape.numel(), "tensor", "from_values: {} values for shape {} ({} elements)",
            values.size(), shape.str(), shape.numel());
  Tensor tensor = empty(shape, dtype);
  auto* bytes = static_cast<char*>(tensor.data());
  for (size_t index = 0; index < values.size(); ++index)
    write_element(bytes + index * dtype_size(dtype), dtype, values[index]);
  return tensor;
}

Tensor Tensor::from_indices(std::span<const int64_t> values, DType dtype, Device device, Stream stream) {
  FLM_CHECK(dtype == DType::int64 || dtype == DType::int32, "tensor", "from_indices: dtype {} is not int64 or int32",
            dtype_name(dtype));
  Tensor host = empty(Shape{int64_t(values.size())}, dtype);
  for (size_t index = 0; index < values.size(); ++index) {
    if (dtype == DType::int64)
      host.data_as<int64_t>()[index] = values[index];
    else
      host.data_as<int32_t>()[index] = int32_t(values[index]);
  }
  return device.is_cpu() ? host : host.to(device, stream);
}

// ---------------------------------------------------------------------------------------------------------------------
// Properties

int64_t Tensor::size(int dim) const { return shape_[normalize_dim(dim, rank(), shape_, "size")]; }

int64_t Tensor::stride(int dim) const { return strides_[normalize_dim(dim, rank(), shape_, "stride")]; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;
  // Dimensions of size 1 never move the pointer, so their stride does not matter (as in PyTorch).
  int64_t expected = 1;
  for (int dim = rank() - 1; dim >= 0; --dim) {
    if (shape_[dim] == 1) continue;
    if (strides_[dim] != expected) return false;
    expected *= shape_[dim];
  }
  return true;
}

void* Tensor::data() const {
  FLM_CHECK(defined(), "tensor", "data: the tensor is undefined");
  return static_cast<char*>(storage_->data()) + offset_ * int64_t(element_size());
}

// ---------------------------------------------------------------------------------------------------------------------
// Views

Tensor Tensor::slice(int dim, int64_t begin, int64_t end) const {
  FLM_CHECK(defined(), "tensor", "slice: the tensor is undefined");
  int d = normalize_dim(dim, rank(), shape_, "slice");
  int64_t size = shape_[d];
  // Negative bounds count from the end, as in Python.
  int64_t first = begin < 0 ? begin + size : begin;
  int64_t last = end < 0 ? end + size : end;
  FLM_CHECK(first >= 0 && first <= last && last <= size, "tensor",
            "slice: range [{}, {}) out of bounds for dim {} of size {} (shape {})", begin, end, dim, size,
            shape_.str());
  Tensor view = *this;
  view.shape_[d] = last - first;
  view.offset_ += first * strides_[d];
  return view;
}

Tensor Tensor::select(int dim, int64_t index) const {
  FLM_CHECK(defined(), "tensor", "select: the tensor is undefined");
  int d = normalize_dim(dim, rank(), shape_, "select");
  int64_t position = index < 0 ? index + shape_[d] : index;
  FLM_CHECK(position >= 0 && position < shape_[d], "tensor", "select: index {} out of range for dim {} of size {} "
            "(shape {})", index, dim, shape_[d], shape_.str());
  Tensor view = *this;
  view.offset_ += position * strides_[d];
  view.shape_ = Shape();
  view.strides_ = Shape();
  for (int other = 0; other < rank(); ++other) {
    if (other == d) continue;
    view.shape_.push_back(shape_[other]);
    view.strides_.push_back(strides_[other]);
  }
  return view;
}

Tensor Tensor::transpose(int dim0, int dim1) const {
  FLM_CHECK(defined(), "tensor", "transpose: the tensor is undefined");
  int first = normalize_dim(dim0, rank(), shape_, "transpose");
  int second = normalize_dim(dim1, rank(), shape_, "transpose");
  Tensor view = *this;
  std::swap(view.shape_[first], view.shape_[second]);
  std::swap(view.strides_[first], view.strides_[second]);
  return view;
}

Tensor Tensor::reshape(const Shape& shape) const {
  FLM_CHECK(defined(), "tensor", "reshape: the tensor is undefined");
  FLM_CHECK(is_contiguous(), "tensor",
            "reshape: tensor with shape {} and strides {} is not contiguous; make a contiguous copy first",
            shape_.str(), strides_.str());
  Shape resolved = shape;
  int inferred = -1;
  int64_t known = 1;
  for (int dim = 0; dim < shape.rank(); ++dim) {
    if (shape[dim] == -1) {
      FLM_CHECK(inferred < 0, "tensor", "reshape: only one dimension can be -1 in {}", shape.str());
      inferred = dim;
      continue;
    }
    FLM_CHECK(shape[dim] >= 0, "tensor", "reshape: invalid size {} in {}", shape[dim], shape.str());
    known *= shape[dim];
  }
  if (inferred >= 0) {
    FLM_CHECK(known != 0 && numel() % known == 0, "tensor", "reshape: cannot reshape {} ({} elements) into {}",
              shape_.str(), numel(), shape.str());
    resolved[inferred] = numel() / known;
  }
  FLM_CHECK(resolved.numel() == numel(), "tensor", "reshape: cannot reshape {} ({} elements) into {}", shape_.str(),
            numel(), shape.str());
  Tensor view = *this;
  view.shape_ = resolved;
  view.strides_ = contiguous_strides(resolved);
  return view;
}

Tensor Tensor::unsqueeze(int dim) const {
  FLM_CHECK(defined(), "tensor", "unsqueeze: the tensor is undefined");
  // The new dimension can go anywhere in [0, rank], so the valid range is one wider than for the other views.
  int d = normalize_dim(dim, rank() + 1, shape_, "unsqueeze");
  FLM_CHECK(rank() < kMaxTensorRank, "tensor", "unsqueeze: shape {} already has the maximum rank {}", shape_.str(),
            kMaxTensorRank);
  Tensor view = *this;
  view.shape_ = Shape();
  view.strides_ = Shape();
  for (int other = 0; other <= rank(); ++other) {
    if (other == d) {
      view.shape_.push_back(1);
      view.strides_.push_back(d < rank() ? strides_[d] * shape_[d] : 1);
    }
    if (other < rank()) {
      view.shape_.push_back(shape_[other]);
      view.strides_.push_back(strides_[other]);
    }
  }
  return view;
}

Tensor Tensor::view_as(DType dtype) const {
  FLM_CHECK(defined(), "tensor", "view_as: the tensor is undefined");
  FLM_CHECK(dtype_size(dtype) == element_size(), "tensor", "view_as: {} ({} bytes) cannot view {} ({} bytes)",
            dtype_name(dtype), dtype_size(dtype), dtype_name(dtype_), element_size());
  FLM_CHECK(is_contiguous(), "tensor", "view_as: tensor with shape {} and strides {} is not contiguous",
            shape_.str(), strides_.str());
  Tensor view = *this;
  view.dtype_ = dtype;
  return view;
}

// ---------------------------------------------------------------------------------------------------------------------
// Moving bytes

Tensor Tensor::to(Device device, Stream stream) const {
  FLM_CHECK(defined(), "tensor", "to: the tensor is undefined");
  Device source_device = this->device();
  if (is_contiguous()) {
    if (device == source_device) return *this;
    Tensor result = empty(shape_, dtype_, device, stream);
    result.copy_bytes_from(*this, stream);
    // The caller reads a host result next; the copy must have landed.
    if (device.is_cpu()) synchronize(source_device, stream);
    return result;
  }
  // A strided view: bring the span of storage it covers to the host, gather it there, then move the contiguous
  // result. Element-wise device copies are kernels (kernels/copy.h); this path serves printing and tests.
  Tensor host_view = *this;
  if (source_device.is_cuda()) {
    int64_t extent = view_extent(shape_, strides_);
    Tensor span = empty(Shape{extent}, dtype_, Device::cpu());
    copy_bytes(span.data(), Device::cpu(), data(), source_device, size_t(extent) * element_size(), stream);
    synchronize(source_device, stream);
    host_view.storage_ = span.storage_;
    host_view.offset_ = 0;
  }
  Tensor gathered = empty(shape_, dtype_, Device::cpu());
  const auto* source = static_cast<const char*>(host_view.storage_->data());
  auto* destination = static_cast<char*>(gathered.data());
  size_t size = element_size();
  for_each_offset(shape_, strides_, host_view.offset_, [&](int64_t position) {
    std::memcpy(destination, source + position * int64_t(size), size);
    destination += size;
  });
  return device.is_cpu() ? gathered : gathered.to(device, stream);
}

void Tensor::copy_bytes_from(const Tensor& source, Stream stream) {
  FLM_CHECK(defined() && source.defined(), "tensor", "copy_bytes_from: undefined tensor");
  FLM_CHECK(shape_ == source.shape_, "tensor", "copy_bytes_from: shape {} differs from the source's {}", shape_.str(),
            source.shape_.str());
  FLM_CHECK(dtype_ == source.dtype_, "tensor", "copy_bytes_from: dtype {} differs from the source's {}",
            dtype_name(dtype_), dtype_name(source.dtype_));
  FLM_CHECK(is_contiguous() && source.is_contiguous(), "tensor",
            "copy_bytes_from: both tensors must be contiguous (destination strides {}, source strides {})",
            strides_.str(), source.strides_.str());
  if (nbytes() == 0) return;
  copy_bytes(data(), device(), source.data(), source.device(), nbytes(), stream);
}

void Tensor::record_stream(Stream stream) const {
  FLM_CHECK(defined(), "tensor", "record_stream: the tensor is undefined");
  if (device().is_cpu() || !storage_->owns_memory()) return;
  allocator_for(device()).record_stream(storage_->data(), stream);
}

// ---------------------------------------------------------------------------------------------------------------------
// Host element access

double Tensor::item_as_double(std::span<const int64_t> index) const {
  FLM_CHECK(defined(), "tensor", "item_as_double: the tensor is undefined");
  FLM_CHECK(device().is_cpu(), "tensor", "item_as_double: tensor is on {}; copy it to the CPU first",
            device().str());
  FLM_CHECK(int(index.size()) == rank(), "tensor", "item_as_double: {} indices for shape {}", index.size(),
            shape_.str());
  int64_t position = offset_;
  for (int dim = 0; dim < rank(); ++dim) {
    FLM_CHECK(index[size_t(dim)] >= 0 && index[size_t(dim)] < shape_[dim], "tensor",
              "item_as_double: index {} out of range for dim {} of shape {}", index[size_t(dim)], dim, shape_.str());
    position += index[size_t(dim)] * strides_[dim];
  }
  return read_element(static_cast<const char*>(storage_->data()) + position * int64_t(element_size()), dtype_);
}

double Tensor::item() const {
  FLM_CHECK(defined(), "tensor", "item: the tensor is undefined");
  FLM_CHECK(numel() == 1, "tensor", "item: tensor with shape {} has {} elements, not 1", shape_.str(), numel());
  if (device().is_cpu()) return read_element(data(), dtype_);
  alignas(8) unsigned char buffer[8];
  Stream stream = compute_stream(device());
  copy_bytes(buffer, Device::cpu(), data(), device(), element_size(), stream);
  synchronize(device(), stream);
  return read_element(buffer, dtype_);
}

// ---------------------------------------------------------------------------------------------------------------------
// Printing

namespace {

// Indices shown along one dimension: all of them, or `edge` from each end around an ellipsis (-1).
std::vector<int64_t> shown_indices(int64_t size, int64_t edge, bool summarize) {
  std::vector<int64_t> indices;
  if (!summarize || size <= 2 * edge) {
    for (int64_t index = 0; index < size; ++index) indices.push_back(index);
    return indices;
  }
  for (int64_t index = 0; index < edge; ++index) indices.push_back(index);
  indices.push_back(-1);
  for (int64_t index = size - edge; index < size; ++index) indices.push_back(index);
  return indices;
}

// One number format for the whole tensor, as PyTorch does, so that columns line up.
struct NumberFormat {
  enum class Kind { integer, whole, fixed, scientific } kind;
  size_t width = 0;

  std::string format(double value) const {
    if (!std::isfinite(value)) return fmt::format("{}", value);
    switch (kind) {
      case Kind::integer: return fmt::format("{}", int64_t(value));
      case Kind::whole: return fmt::format("{:.0f}.", value);
      case Kind::fixed: return fmt::format("{:.4f}", value);
      case Kind::scientific: return fmt::format("{:.4e}", value);
    }
    return {};
  }
};

NumberFormat choose_format(const std::vector<double>& values, DType dtype) {
  NumberFormat number{NumberFormat::Kind::integer};
  if (is_floating(dtype)) {
    bool all_whole = true;
    double largest = 0, smallest = std::numeric_limits<double>::infinity();
    for (double value : values) {
      if (!std::isfinite(value)) continue;
      double magnitude = std::fabs(value);
      all_whole = all_whole && std::nearbyint(value) == value;
      largest = std::max(largest, magnitude);
      if (magnitude > 0) smallest = std::min(smallest, magnitude);
    }
    if (largest >= 1e8 || (!all_whole && (smallest < 1e-4 || largest / smallest >= 1e3)))
      number.kind = NumberFormat::Kind::scientific;
    else if (all_whole)
      number.kind = NumberFormat::Kind::whole;
    else
      number.kind = NumberFormat::Kind::fixed;
  }
  for (double value : values) number.width = std::max(number.width, number.format(value).size());
  return number;
}

class Printer {
 public:
  Printer(const Tensor& host, int64_t edge, bool summarize) : host_(host), edge_(edge), summarize_(summarize) {}

  std::vector<double> collect() {
    std::vector<double> values;
    std::array<int64_t, kMaxTensorRank> index{};
    collect(0, index, values);
    return values;
  }

  std::string render(const NumberFormat& number) {
    std::array<int64_t, kMaxTensorRank> index{};
    std::string out;
    render(0, index, number, out);
    return out;
  }

 private:
  double value_at(const std::array<int64_t, kMaxTensorRank>& index) const {
    return host_.item_as_double(std::span<const int64_t>(index.data(), size_t(host_.rank())));
  }

  void collect(int dim, std::array<int64_t, kMaxTensorRank>& index, std::vector<double>& values) const {
    if (dim == host_.rank()) {
      values.push_back(value_at(index));
      return;
    }
    for (int64_t position : shown_indices(host_.size(dim), edge_, summarize_)) {
      if (position < 0) continue;
      index[size_t(dim)] = position;
      collect(dim + 1, index, values);
    }
  }

  void render(int dim, std::array<int64_t, kMaxTensorRank>& index, const NumberFormat& number,
              std::string& out) const {
    if (dim == host_.rank()) {
      out += fmt::format("{:>{}}", number.format(value_at(index)), number.width);
      return;
    }
    // Inner rows are separated by one newline, blocks of rows by one more per level, as PyTorch prints them.
    int levels_below = host_.rank() - dim - 1;
    std::string separator = levels_below == 0 ? std::string(", ")
                                              : fmt::format(",{:\n<{}}{:<{}}", "", levels_below, "", dim + 1);
    out += '[';
    bool first = true;
    for (int64_t position : shown_indices(host_.size(dim), edge_, summarize_)) {
      if (!first) out += separator;
      first = false;
      if (position < 0) {
        out += "...";
        continue;
      }
      index[size_t(dim)] = position;
      render(dim + 1, index, number, out);
    }
    out += ']';
  }

  const Tensor& host_;
  int64_t edge_;
  bool summarize_;
};

}  // namespace

std::string Tensor::str(int64_t max_elements) const {
  if (!defined()) return "Tensor(undefined)";
  std::string header =
      fmt::format("Tensor(shape={}, dtype={}, device={})", shape_.str(), dtype_name(dtype_), device().str());
  Tensor host = device().is_cpu() ? *this : to(Device::cpu());
  // Show `edge` values from each end of every long dimension, the largest edge that fits in `max_elements` (at least
  // one from each end, so a high-rank tensor may show up to 2^rank values).
  bool summarize = numel() > max_elements;
  int64_t edge = 1;
  if (summarize) {
    for (int64_t candidate = 2;; ++candidate) {
      int64_t shown = 1;
      for (int64_t dim : shape_) shown *= std::min(dim, 2 * candidate);
      if (shown > max_elements || candidate > *std::max_element(shape_.begin(), shape_.end())) break;
      edge = candidate;
    }
  }
  Printer printer(host, edge, summarize);
  NumberFormat number = choose_format(printer.collect(), dtype_);
  return header + "\n" + printer.render(number);
}

}  // namespace fast_llm
