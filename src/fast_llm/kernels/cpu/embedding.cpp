// CPU reference of embedding_forward / embedding_backward (kernels/embedding.h).
//
// indices (tokens) int32 / int64, any stride; weight, output and grad tensors (.., hidden) of any strides. Every index
// is checked against [0, rows) before anything is written (with first_row: an index outside the slice is a zero row in
// the forward and skipped in the backward). Forward math in fp32 (fp64 for fp64 weights), rounded on
// store into output (the weight's dtype). Backward adds into grad_weight (fp32 or fp64) token by token in order, on
// one thread: repeated indices accumulate deterministically.
#include "fast_llm/kernels/embedding.h"

#include "fast_llm/kernels/cpu/dtype_dispatch.h"

namespace fast_llm::kernels::cpu {
namespace {

// Checks indices (tokens) against [0, rows).
void check_indices(std::string_view op, const Tensor& indices, int64_t rows) {
  visit_index_dtype(indices.dtype(), [&]<class I>(std::type_identity<I>) {
    const I* data = indices.data_as<I>();
    for (int64_t token = 0; token < indices.size(0); ++token) {
      const int64_t index = int64_t(data[token * indices.stride(0)]);
      FLM_CHECK(index >= 0 && index < rows, op, "index {} at position {} is outside [0, {})", index, token, rows);
    }
  });
}

void embedding_forward_reference(const EmbeddingForwardArgs& args) {
  const int64_t tokens = args.indices.size(0), rows = args.weight.size(0), hidden = args.weight.size(1);
  if (!args.first_row) check_indices("embedding_forward", args.indices, rows);
  const int64_t first_row = args.first_row.value_or(0);

  visit_index_dtype(args.indices.dtype(), [&]<class I>(std::type_identity<I>) {
    visit_floating_dtype(args.weight.dtype(), [&]<class T>(std::type_identity<T>) {
      using Compute = ComputeType<T>;
      const I* indices = args.indices.data_as<I>();  // (tokens)
      const T* weight = args.weight.data_as<T>();    // (rows, hidden)
      T* output = args.output.data_as<T>();          // (tokens, hidden)
      const int64_t index_stride = args.indices.stride(0);
      const int64_t weight_row = args.weight.stride(0), weight_column = args.weight.stride(1);
      const int64_t output_row = args.output.stride(0), output_column = args.output.stride(1);
      const Compute scale = Compute(args.scale);
#pragma omp parallel for
      for (int64_t token = 0; token < tokens; ++token) {
        // output[t] (+)= scale * weight[index[t]] (zeros for an index outside the slice)
        const int64_t index = int64_t(indices[token * index_stride]) - first_row;
        const bool inside = index >= 0 && index < rows;
        for (int64_t column = 0; column < hidden; ++column) {
          T& element = output[token * output_row + column * output_column];
          Compute value = inside ? scale * load_value(weight[index * weight_row + column * weight_column]) : Compute(0);
          if (args.accumulate) value += load_value(element);
          element = store_value<T>(value);
        }
      }
    });
  });
}

void embedding_backward_reference(const EmbeddingBackwardArgs& args) {
  const int64_t tokens = args.indices.size(0), rows = args.grad_weight.size(0), hidden = args.grad_weight.size(1);
  if (!args.first_row) check_indices("embedding_backward", args.indices, rows);
  const int64_t first_row = args.first_row.value_or(0);

  visit_index_dtype(args.indices.dtype(), [&]<class I>(std::type_identity<I>) {
    visit_floating_dtype(args.grad_output.dtype(), [&]<class T>(std::type_identity<T>) {
      visit_float32_or_float64(args.grad_weight.dtype(), [&]<class G>(std::type_identity<G>) {
        using Compute = WiderComputeType<T, G>;
        const I* indices = args.indices.data_as<I>();          // (tokens)
        const T* grad_output = args.grad_output.data_as<T>();  // (tokens, hidden)
        G* grad_weight = args.grad_weight.data_as<G>();        // (rows, hidden)
        const int64_t index_stride = args.indices.stride(0);
        const int64_t grad_output_row = args.grad_output.stride(0), grad_output_column = args.grad_output.stride(1);
        const int64_t grad_weight_row = args.grad_weight.stride(0), grad_weight_column = args.grad_weight.stride(1);
        const Compute scale = Compute(args.scale);
        for (int64_t token = 0; token < tokens; ++token) {
          // grad_weight[index[t]] += scale * grad_output[t] (nothing for an index outside the slice)
          const int64_t index = int64_t(indices[token * index_stride]) - first_row;
          if (index < 0 || index >= rows) continue;
          for (int64_t column = 0; column < hidden; ++column) {
            G& element = grad_weight[index * grad_weight_row + column * grad_weight_column];
            element =
                G(Compute(element) +
                  scale * Compute(load_value(grad_output[token * grad_output_row + column * grad_output_column])));
          }
        }
      });
    });
  });
}

}  // namespace

FLM_REGISTER_KERNEL(EmbeddingForward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &embedding_forward_reference, "row gather, indices checked; fp32 math (fp64 for fp64 weights)");
FLM_REGISTER_KERNEL(EmbeddingBackward, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline, nullptr,
                    &embedding_backward_reference,
                    "sequential scatter-add in token order (deterministic with repeated indices)");

}  // namespace fast_llm::kernels::cpu
