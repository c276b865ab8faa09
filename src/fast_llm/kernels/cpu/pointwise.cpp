// CPU reference of axpy and dropout (kernels/pointwise.h).
//
// Both work on contiguous tensors element by element. axpy mixes any floating dtypes: math in fp32, or fp64 when
// either side is fp64, rounded on store into output. dropout keeps element i when random_uniform(seed, i) >= p, the
// comparison made in fp32 (float(p)) so every device draws the same mask bit for bit, and scales kept elements by
// 1 / (1 - p) in fp32 (fp64 for fp64 tensors).
#include "fast_llm/kernels/pointwise.h"

#include "fast_llm/core/random.h"
#include "fast_llm/kernels/cpu/dtype_dispatch.h"

namespace fast_llm::kernels::cpu {
namespace {

std::optional<std::string> contiguous_reason(std::string_view name, const Tensor& tensor) {
  if (tensor.is_contiguous()) return std::nullopt;
  return fmt::format("{} is not contiguous (shape {}, strides {})", name, tensor.shape().str(), tensor.strides().str());
}

std::optional<std::string> supports_axpy(const AxpyArgs& args) {
  if (auto reason = contiguous_reason("input", args.input)) return reason;
  return contiguous_reason("output", args.output);
}

void axpy_reference(const AxpyArgs& args) {
  visit_floating_dtype(args.input.dtype(), [&]<class In>(std::type_identity<In>) {
    visit_floating_dtype(args.output.dtype(), [&]<class Out>(std::type_identity<Out>) {
      using Compute = WiderComputeType<In, Out>;
      const In* input = args.input.data_as<In>();
      Out* output = args.output.data_as<Out>();
      const Compute alpha = Compute(args.alpha);
      const int64_t count = args.output.numel();
#pragma omp parallel for
      for (int64_t i = 0; i < count; ++i) {
        // output += alpha * input
        output[i] = store_value<Out>(Compute(load_value(output[i])) + alpha * Compute(load_value(input[i])));
      }
    });
  });
}

std::optional<std::string> supports_dropout(const DropoutArgs& args) {
  return contiguous_reason("tensor", args.tensor);
}

void dropout_reference(const DropoutArgs& args) {
  visit_floating_dtype(args.tensor.dtype(), [&]<class T>(std::type_identity<T>) {
    using Compute = ComputeType<T>;
    T* data = args.tensor.data_as<T>();
    const float threshold = float(args.probability);
    const Compute scale = Compute(1.0 / (1.0 - args.probability));
    const int64_t count = args.tensor.numel();
#pragma omp parallel for
    for (int64_t i = 0; i < count; ++i) {
      // x = x * mask / (1 - p),  mask = uniform(seed, i) >= p  (a dropped NaN stays NaN, as x * 0)
      const bool keep = random_uniform(args.seed, uint64_t(i)) >= threshold;
      data[i] = store_value<T>(load_value(data[i]) * (keep ? scale : Compute(0)));
    }
  });
}

}  // namespace

FLM_REGISTER_KERNEL(Axpy, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, &supports_axpy,
                    &axpy_reference, "element by element; fp32 math (fp64 when either side is fp64)");
FLM_REGISTER_KERNEL(Dropout, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, &supports_dropout,
                    &dropout_reference, "element by element, Philox mask keyed by (seed, element index)");

}  // namespace fast_llm::kernels::cpu
