// CPU reference of label_log_probabilities (kernels/label_log_probabilities.h): per row the stable logsumexp the
// reference heads share (cpu/reference_helpers.h) in fp64 whatever the logits' dtype, rows in parallel. A label
// >= vocab is an error here (the labels are on the host); the CUDA variant gives 0 for it.
#include "fast_llm/kernels/label_log_probabilities.h"

#include <vector>

#include "fast_llm/kernels/cpu/dtype_dispatch.h"
#include "fast_llm/kernels/cpu/reference_helpers.h"

namespace fast_llm::kernels::cpu {
namespace {

void label_log_probabilities_reference(const LabelLogProbabilitiesArgs& args) {
  const int64_t rows = args.logits.size(0), vocab = args.logits.size(1);
  const int64_t* labels = args.labels.data_as<int64_t>();
  const int64_t label_stride = args.labels.stride(0);
  for (int64_t row = 0; row < rows; ++row)
    FLM_CHECK(labels[row * label_stride] < vocab, "label_log_probabilities",
              "label {} of row {} is outside the vocabulary of {} logits", labels[row * label_stride], row, vocab);
  std::vector<double> output(size_t(rows), 0.0);
  visit_floating_dtype(args.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    const T* logits = args.logits.data_as<T>();
    const int64_t row_stride = args.logits.stride(0), column_stride = args.logits.stride(1);
#pragma omp parallel for
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t label = labels[row * label_stride];
      if (label < 0) continue;
      const T* values = logits + row * row_stride;
      std::vector<double> z(static_cast<size_t>(vocab));
      for (int64_t column = 0; column < vocab; ++column)
        z[size_t(column)] = double(load_value(values[column * column_stride]));
      output[size_t(row)] = z[size_t(label)] - logsumexp(z);
    }
  });
  write_values<double>(args.output, output, /*accumulate=*/false);
}

}  // namespace

FLM_REGISTER_KERNEL(LabelLogProbabilities, DeviceType::cpu, "reference", /*priority=*/0, KernelKind::baseline,
                    nullptr, &label_log_probabilities_reference,
                    "per row: stable logsumexp in fp64, then the label's logit minus it");

}  // namespace fast_llm::kernels::cpu
