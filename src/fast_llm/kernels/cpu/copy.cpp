// CPU reference of fill / copy / cast (kernels/copy.h): one loop over the row-major linear index, each element found
// through the tensor's strides, every dtype. The conversions follow copy.h (kernels/cpu/cast_conversion.h); the CUDA
// variants must match them bit for bit.
#include "fast_llm/kernels/copy.h"

#include <cstring>
#include <type_traits>

#include "fast_llm/kernels/cpu/cast_conversion.h"
#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/kernels/cpu/reference_helpers.h"

namespace fast_llm::kernels::cpu {
namespace {

template <class Function>
decltype(auto) visit_any_dtype(DType dtype, Function&& function) {
  switch (dtype) {
    case DType::float32: return function(std::type_identity<float>{});
    case DType::float64: return function(std::type_identity<double>{});
    case DType::bfloat16: return function(std::type_identity<bfloat16>{});
    case DType::float16: return function(std::type_identity<float16>{});
    case DType::int32: return function(std::type_identity<int32_t>{});
    case DType::int64: return function(std::type_identity<int64_t>{});
    case DType::uint8: return function(std::type_identity<uint8_t>{});
    case DType::uint16: return function(std::type_identity<uint16_t>{});
    case DType::uint32: return function(std::type_identity<uint32_t>{});
  }
  throw InternalError("kernels", fmt::format("visit_any_dtype: dtype {} is not handled", int(dtype)));
}

// Element loads and stores through memcpy: tensors viewing a file (safetensors data starts at any byte offset) need
// not be aligned to their element size, and a plain access would be undefined behaviour there. For aligned data the
// compiler emits the same single load or store.
template <class T>
T load_element(const T* pointer) {
  T value;
  std::memcpy(&value, pointer, sizeof(T));
  return value;
}
template <class T>
void store_element(T* pointer, T value) {
  std::memcpy(pointer, &value, sizeof(T));
}

void fill_reference(const FillArgs& args) {
  visit_any_dtype(args.tensor.dtype(), [&]<class T>(std::type_identity<T>) {
    const T value = cast_from_double<T>(args.value);
    T* data = args.tensor.data_as<T>();
    const Shape& shape = args.tensor.shape();
    const Shape& strides = args.tensor.strides();
#pragma omp parallel for
    for (int64_t index = 0; index < args.tensor.numel(); ++index)
      store_element(data + strided_offset(shape, strides, index), value);
  });
}

void copy_reference(const CopyArgs& args) {
  // Bytes of the element size: the same for every dtype of that size, and NaN payloads survive untouched.
  auto copy_elements = [&]<class Word>(std::type_identity<Word>) {
    const Word* source = static_cast<const Word*>(args.source.data());
    Word* destination = static_cast<Word*>(args.destination.data());
    const Shape& shape = args.source.shape();
#pragma omp parallel for
    for (int64_t index = 0; index < args.source.numel(); ++index)
      store_element(destination + strided_offset(shape, args.destination.strides(), index),
                    load_element(source + strided_offset(shape, args.source.strides(), index)));
  };
  switch (args.source.element_size()) {
    case 1: copy_elements(std::type_identity<uint8_t>{}); return;
    case 2: copy_elements(std::type_identity<uint16_t>{}); return;
    case 4: copy_elements(std::type_identity<uint32_t>{}); return;
    case 8: copy_elements(std::type_identity<uint64_t>{}); return;
  }
  throw InternalError("kernels", fmt::format("copy: element size {} is not handled", args.source.element_size()));
}

void cast_reference(const CastArgs& args) {
  visit_any_dtype(args.source.dtype(), [&]<class From>(std::type_identity<From>) {
    visit_any_dtype(args.destination.dtype(), [&]<class To>(std::type_identity<To>) {
      const From* source = args.source.data_as<From>();
      To* destination = args.destination.data_as<To>();
      const Shape& shape = args.source.shape();
#pragma omp parallel for
      for (int64_t index = 0; index < args.source.numel(); ++index)
        store_element(destination + strided_offset(shape, args.destination.strides(), index),
                      cast_element<To>(load_element(source + strided_offset(shape, args.source.strides(), index))));
    });
  });
}

}  // namespace

FLM_REGISTER_KERNEL(Fill, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr, &fill_reference,
                    "element by element, any dtype and strides");
FLM_REGISTER_KERNEL(Copy, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr, &copy_reference,
                    "element by element, any dtype and strides");
FLM_REGISTER_KERNEL(Cast, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr, &cast_reference,
                    "element by element between any dtypes: round to nearest even, saturating float -> integer");

}  // namespace fast_llm::kernels::cpu
