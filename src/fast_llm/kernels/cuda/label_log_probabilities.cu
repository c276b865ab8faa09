// CUDA variant of label_log_probabilities (kernels/label_log_probabilities.h), "rows": one block of 256 threads per
// row (the blocks walk the rows grid-stride), which reads the row once. Each thread keeps the online softmax state
// (max, sum exp(z - max)) of its columns, read with 16-byte loads when every row starts 16-byte aligned, and the block
// merges the states in a fixed order (kernels/cuda/softmax_state.cuh, shared with dpo.cu and policy_gradient.cu); then
// thread 0 writes logits[label] - (max + log(sum)). The statistics are fp32, their combination fp64 (one thread per
// row, so it costs nothing and adds no fp32 rounding of the logsumexp, which is large for large logits). The op is
// memory-bound: one read of the logits, one store per row. Logits float32 / bfloat16 / float16 with contiguous rows
// (any row stride), output float32 or float64. A label not below the vocabulary is treated as masked (output 0), as
// cross_entropy.cu and dpo.cu do (the CPU reference reports it; checking on the GPU would need the labels on the
// host). Bitwise reproducible: a row's sums have an order fixed by its length and alignment.
#include "fast_llm/kernels/cuda/common.cuh"
#include "fast_llm/kernels/cuda/softmax_state.cuh"

#include "fast_llm/kernels/label_log_probabilities.h"

namespace fast_llm::kernels::cuda {
namespace {

constexpr int kThreads = 256;

struct Params {
  const void* logits;  // (rows, vocab) T, unit column stride
  int64_t logits_stride;
  const int64_t* labels;
  int64_t label_stride;
  void* output;  // (rows) Output
  int64_t output_stride;
  int64_t rows, vocab;
  bool vectorized;  // every row starts 16-byte aligned
};

template <class T, class Output>
__global__ void __launch_bounds__(kThreads) label_log_probability_rows(Params p) {
  __shared__ SoftmaxState scratch[kThreads / 32];
  const auto logit = [](float x) { return x; };
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    Output* output = static_cast<Output*>(p.output) + row * p.output_stride;
    // Every thread reads the same label, so the block takes the branch as one (block_softmax_state synchronises it).
    const int64_t label = p.labels[row * p.label_stride];
    if (label < 0 || label >= p.vocab) {
      if (threadIdx.x == 0) *output = Output(0);
      continue;
    }
    const T* logits = static_cast<const T*>(p.logits) + row * p.logits_stride;
    const SoftmaxState state =
        block_softmax_state<kThreads>(thread_softmax_state<kThreads>(logits, p.vocab, p.vectorized, logit), scratch);
    if (threadIdx.x == 0)
      *output = Output(double(load(logits[label])) - (double(state.max) + ::log(double(state.sum))));
  }
}

std::optional<std::string> supports_label_log_probabilities(const LabelLogProbabilitiesArgs& args) {
  if (auto reason = cuda_floating_reason("logits", args.logits)) return reason;
  return inner_contiguous_reason("logits", args.logits);
}

void label_log_probabilities_rows(const LabelLogProbabilitiesArgs& args) {
  const int64_t rows = args.logits.size(0);
  if (rows == 0) return;
  LaunchScope scope("label_log_probabilities", args.logits.device(), args.stream);
  visit_floating(args.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    const Params params{.logits = args.logits.data(),
                        .logits_stride = row_stride(args.logits),
                        .labels = args.labels.data_as<int64_t>(),
                        .label_stride = args.labels.stride(0),
                        .output = args.output.data(),
                        .output_stride = args.output.stride(0),
                        .rows = rows,
                        .vocab = args.logits.size(1),
                        .vectorized = rows_aligned<T>(args.logits)};
    const unsigned blocks = grid_for(rows, 1, scope);
    if (args.output.dtype() == DType::float64)
      label_log_probability_rows<T, double><<<blocks, kThreads, 0, scope.stream()>>>(params);
    else
      label_log_probability_rows<T, float><<<blocks, kThreads, 0, scope.stream()>>>(params);
    scope.check_launch();
  });
}

}  // namespace

FLM_REGISTER_KERNEL(LabelLogProbabilities, DeviceType::cuda, "rows", /*priority=*/100, KernelKind::baseline,
                    &supports_label_log_probabilities, &label_log_probabilities_rows,
                    "one block per row reading it once (online softmax statistics, 16-byte loads where rows are "
                    "aligned, fixed-order merges), fp32 statistics combined in fp64; a label >= vocab gives 0");

}  // namespace fast_llm::kernels::cuda
