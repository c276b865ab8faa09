// Element types for CPU kernels: dispatch from a runtime DType to the C++ type, and the compute type of each.
//
// CPU kernels compute 16-bit inputs in fp32 (load, compute, round on store, as the GPU does) and fp64 inputs in fp64:
//
//   visit_floating_dtype(input.dtype(), [&]<class T>(std::type_identity<T>) {
//     using Compute = ComputeType<T>;
//     const T* x = input.data_as<T>();
//     Compute value = load_value(x[0]);
//     output.data_as<T>()[0] = store_value<T>(value * 2);
//   });
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "fast_llm/core/dtype.h"
#include "fast_llm/core/error.h"
#include "fast_llm/core/half.h"

namespace fast_llm::kernels::cpu {

// The type arithmetic on T happens in: double for double, float for float, bfloat16 and float16.
template <class T>
using ComputeType = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The wider of two compute types (mixed-dtype ops such as axpy compute in fp64 when either side is fp64).
template <class A, class B>
using WiderComputeType =
    std::conditional_t<std::is_same_v<ComputeType<A>, double> || std::is_same_v<ComputeType<B>, double>, double, float>;

inline float load_value(float value) { return value; }
inline double load_value(double value) { return value; }
inline float load_value(bfloat16 value) { return to_float(value); }
inline float load_value(float16 value) { return to_float(value); }

// Rounds a computed value to the element type T (16-bit types round to nearest even from fp32).
template <class T>
T store_value(double value) {
  if constexpr (std::is_same_v<T, double>)
    return value;
  else if constexpr (std::is_same_v<T, float>)
    return float(value);
  else if constexpr (std::is_same_v<T, bfloat16>)
    return to_bfloat16(float(value));
  else {
    static_assert(std::is_same_v<T, float16>);
    return to_float16(float(value));
  }
}

// Calls `function(std::type_identity<T>{})` with the element type T of a floating dtype (float32, float64, bfloat16,
// float16) and returns its result. Any other dtype is a bug in the caller: the op's contract rejects it first.
template <class Function>
decltype(auto) visit_floating_dtype(DType dtype, Function&& function) {
  switch (dtype) {
    case DType::float32: return function(std::type_identity<float>{});
    case DType::float64: return function(std::type_identity<double>{});
    case DType::bfloat16: return function(std::type_identity<bfloat16>{});
    case DType::float16: return function(std::type_identity<float16>{});
    default: break;
  }
  throw InternalError("kernels", fmt::format("visit_floating_dtype: {} is not a floating dtype", dtype_name(dtype)));
}

// The same for fp32 / fp64 only (saved statistics, parameter gradients, rotary tables).
template <class Function>
decltype(auto) visit_float32_or_float64(DType dtype, Function&& function) {
  switch (dtype) {
    case DType::float32: return function(std::type_identity<float>{});
    case DType::float64: return function(std::type_identity<double>{});
    default: break;
  }
  throw InternalError("kernels",
                      fmt::format("visit_float32_or_float64: {} is not float32 or float64", dtype_name(dtype)));
}

// The same for index types (int32, int64).
template <class Function>
decltype(auto) visit_index_dtype(DType dtype, Function&& function) {
  switch (dtype) {
    case DType::int32: return function(std::type_identity<int32_t>{});
    case DType::int64: return function(std::type_identity<int64_t>{});
    default: break;
  }
  throw InternalError("kernels", fmt::format("visit_index_dtype: {} is not int32 or int64", dtype_name(dtype)));
}

}  // namespace fast_llm::kernels::cpu
