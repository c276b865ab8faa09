// CUDA variant "rows" of dpo_forward_backward (kernels/dpo.h): logits of float32, bfloat16 or float16 with the last
// dimension contiguous, the reference model's of float32 (contiguous), fp32 math.
//
// The pairs come from the host: the rows their spans cover (each once) and the pairs' bounds are uploaded, then
//   1. one block per covered row: the logsumexp of the scaled logits, log pi(label) and log pi_ref(label), or nothing
//      for a masked label (the row then counts in no sum);
//   2. one thread, in pair order (fp64): each pair's margin, its loss into loss_sum, and its gradient coefficient added
//      to each row of its spans;
//   3. one block per row: the gradient, coefficient * (onehot - softmax) * s * weight, or 0 (or nothing when
//      accumulating) for the other rows.
// With row_coefficients (fp32), pass 3 is replaced or joined by adding -weight * coefficient to them for the valid
// rows (the head's cross-entropy pass then writes the gradient).
// Reductions go through shared memory in a fixed order: results are bitwise reproducible. The gradient may be the
// logits themselves: pass 3 reads each element before writing it, and passes 1-2 write no logits.
#include "fast_llm/kernels/cuda/common.cuh"

#include <algorithm>
#include <vector>

#include "fast_llm/kernels/dpo.h"

namespace fast_llm::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// The logsumexp of a row of `count` values times `scale`.
template <class T>
__device__ float row_logsumexp(const T* row, int64_t count, float scale, float* scratch) {
  float maximum = -INFINITY;
  for (int64_t column = threadIdx.x; column < count; column += kThreads)
    maximum = fmaxf(maximum, load(row[column]) * scale);
  maximum = block_reduce_in_thread_order(maximum, scratch, true);
  float sum = 0.0f;
  for (int64_t column = threadIdx.x; column < count; column += kThreads)
    sum += expf(load(row[column]) * scale - maximum);
  return maximum + logf(block_reduce_in_thread_order(sum, scratch, false));
}

struct RowParams {
  const void* logits;
  int64_t logits_stride;
  const float* reference;  // (rows, vocab)
  const int64_t* labels;
  int64_t label_stride;
  const int64_t* covered;  // (covered rows)
  int64_t covered_rows, vocab;
  float scale;
  float* logsumexp;   // (rows)
  float* policy;      // (rows) log pi(label)
  float* reference_log_probability;  // (rows)
  int* valid;         // (rows) 1 where a covered row has a label
};

template <class T>
__global__ void dpo_rows(RowParams p) {
  __shared__ float scratch[kThreads];
  for (int64_t index = blockIdx.x; index < p.covered_rows; index += gridDim.x) {
    const int64_t row = p.covered[index];
    const int64_t label = p.labels[row * p.label_stride];
    if (label < 0 || label >= p.vocab) continue;
    const T* logits = static_cast<const T*>(p.logits) + row * p.logits_stride;
    const float* reference = p.reference + row * p.vocab;
    const float lse = row_logsumexp(logits, p.vocab, p.scale, scratch);
    const float reference_lse = row_logsumexp(reference, p.vocab, 1.0f, scratch);
    if (threadIdx.x == 0) {
      p.logsumexp[row] = lse;
      p.policy[row] = load(logits[label]) * p.scale - lse;
      p.reference_log_probability[row] = reference[label] - reference_lse;
      p.valid[row] = 1;
    }
  }
}

template <class Sum>
__global__ void dpo_pairs(const int64_t* pairs, int64_t count, const float* policy, const float* reference,
                          const int* valid, double beta, float* row_coefficient, Sum* loss_sum) {
  auto span_sum = [&](const float* values, int64_t begin, int64_t end) {
    double sum = 0.0;
    for (int64_t row = begin; row < end; ++row)
      if (valid[row]) sum += double(values[row]);
    return sum;
  };
  double loss = 0.0;
  for (int64_t pair = 0; pair < count; ++pair) {
    const int64_t* bounds = pairs + 4 * pair;  // chosen begin, end, rejected begin, end
    const double margin = (span_sum(policy, bounds[0], bounds[1]) - span_sum(policy, bounds[2], bounds[3])) -
                          (span_sum(reference, bounds[0], bounds[1]) - span_sum(reference, bounds[2], bounds[3]));
    const double x = -beta * margin;  // loss = softplus(x)
    loss += x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
    const double sigmoid = x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));  // sigmoid(-beta m)
    const double coefficient = -beta * sigmoid;
    for (int64_t row = bounds[0]; row < bounds[1]; ++row) row_coefficient[row] += float(coefficient);
    for (int64_t row = bounds[2]; row < bounds[3]; ++row) row_coefficient[row] -= float(coefficient);
  }
  *loss_sum = Sum(double(*loss_sum) + loss);
}

struct GradParams {
  const void* logits;
  int64_t logits_stride;
  const int64_t* labels;
  int64_t label_stride;
  void* grad;
  int64_t grad_stride;
  const float* logsumexp;
  const float* row_coefficient;
  const int* valid;
  int64_t rows, vocab;
  float scale, weight;
  bool accumulate;
};

template <class T>
__global__ void dpo_gradient(GradParams p) {
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    T* grad = static_cast<T*>(p.grad) + row * p.grad_stride;
    if (!p.valid[row]) {
      if (!p.accumulate)
        for (int64_t column = threadIdx.x; column < p.vocab; column += kThreads) grad[column] = store<T>(0.0f);
      continue;
    }
    const T* logits = static_cast<const T*>(p.logits) + row * p.logits_stride;
    const int64_t label = p.labels[row * p.label_stride];
    const float factor = p.weight * p.row_coefficient[row] * p.scale, lse = p.logsumexp[row];
    for (int64_t column = threadIdx.x; column < p.vocab; column += kThreads) {
      const float softmax = expf(load(logits[column]) * p.scale - lse);
      float value = factor * ((column == label ? 1.0f : 0.0f) - softmax);
      if (p.accumulate) value += load(grad[column]);
      grad[column] = store<T>(value);
    }
  }
}

// row_coefficients[row] += -weight * coefficient[row] on valid rows: the gradient as cross-entropy row weights.
__global__ void dpo_row_weights(const float* row_coefficient, const int* valid, int64_t rows, float weight,
                                float* row_weights, int64_t row_weight_stride) {
  for (int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; row < rows; row += int64_t(gridDim.x) * blockDim.x)
    if (valid[row]) row_weights[row * row_weight_stride] += -(weight * row_coefficient[row]);
}

std::optional<std::string> supports_dpo(const DpoArgs& args) {
  if (auto reason = cuda_floating_reason("logits", args.logits)) return reason;
  if (auto reason = inner_contiguous_reason("logits", args.logits)) return reason;
  if (auto reason = float32_reason("reference_logits", args.reference_logits)) return reason;
  if (auto reason = contiguous_reason("reference_logits", args.reference_logits)) return reason;
  if (args.row_coefficients != nullptr)
    if (auto reason = float32_reason("row_coefficients", *args.row_coefficients)) return reason;
  if (args.grad_logits != nullptr) return inner_contiguous_reason("grad_logits", *args.grad_logits);
  return std::nullopt;
}

void dpo_rows_launch(const DpoArgs& args) {
  const int64_t rows = args.logits.size(0), vocab = args.logits.size(1);
  if (rows == 0) return;
  LaunchScope scope("dpo_forward_backward", args.logits.device(), args.stream);
  const Stream stream = scope.tensor_stream();
  std::vector<int64_t> bounds, covered;
  std::vector<uint8_t> seen(size_t(rows), 0);
  for (const PreferencePair& pair : args.pairs) {
    bounds.insert(bounds.end(), {pair.chosen_begin, pair.chosen_end, pair.rejected_begin, pair.rejected_end});
    for (const auto& [begin, end] : {std::pair(pair.chosen_begin, pair.chosen_end),
                                     std::pair(pair.rejected_begin, pair.rejected_end)})
      for (int64_t row = begin; row < end; ++row)
        if (!seen[size_t(row)]) {
          seen[size_t(row)] = 1;
          covered.push_back(row);
        }
  }
  // (rows) per-row values, zeroed: rows outside the spans or masked stay invalid.
  Tensor floats = Tensor::empty(Shape{4, rows}, DType::float32, scope.device(), stream);
  Tensor valid = Tensor::empty(Shape{rows}, DType::int32, scope.device(), stream);
  FLM_CUDA_CHECK(cudaMemsetAsync(floats.data(), 0, size_t(floats.nbytes()), scope.stream()));
  FLM_CUDA_CHECK(cudaMemsetAsync(valid.data(), 0, size_t(valid.nbytes()), scope.stream()));
  float* logsumexp = floats.data_as<float>();
  float* policy = logsumexp + rows;
  float* reference = policy + rows;
  float* row_coefficient = reference + rows;
  const unsigned blocks_cap = unsigned(scope.multiprocessors()) * 8;
  visit_floating(args.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    if (!covered.empty()) {
      const Tensor covered_rows = Tensor::from_indices(covered, DType::int64, scope.device(), stream);
      const RowParams params{.logits = args.logits.data(),
                             .logits_stride = row_stride(args.logits),
                             .reference = args.reference_logits.data_as<float>(),
                             .labels = args.labels.data_as<int64_t>(),
                             .label_stride = args.labels.stride(0),
                             .covered = covered_rows.data_as<int64_t>(),
                             .covered_rows = int64_t(covered.size()),
                             .vocab = vocab,
                             .scale = float(args.logits_scale_factor),
                             .logsumexp = logsumexp,
                             .policy = policy,
                             .reference_log_probability = reference,
                             .valid = valid.data_as<int>()};
      dpo_rows<T><<<std::min<unsigned>(blocks_cap, unsigned(covered.size())), kThreads, 0, scope.stream()>>>(params);
      scope.check_launch();
    }
    const Tensor pairs =
        bounds.empty() ? Tensor() : Tensor::from_indices(bounds, DType::int64, scope.device(), stream);
    const int64_t* pair_data = bounds.empty() ? nullptr : pairs.data_as<int64_t>();
    if (args.loss_sum.dtype() == DType::float64)
      dpo_pairs<<<1, 1, 0, scope.stream()>>>(pair_data, int64_t(args.pairs.size()), policy, reference,
                                             valid.data_as<int>(), args.beta, row_coefficient,
                                             args.loss_sum.data_as<double>());
    else
      dpo_pairs<<<1, 1, 0, scope.stream()>>>(pair_data, int64_t(args.pairs.size()), policy, reference,
                                             valid.data_as<int>(), args.beta, row_coefficient,
                                             args.loss_sum.data_as<float>());
    scope.check_launch();
    if (args.row_coefficients != nullptr) {
      dpo_row_weights<<<unsigned(std::min<int64_t>(ceil_div(rows, kThreads), blocks_cap)), kThreads, 0,
                        scope.stream()>>>(row_coefficient, valid.data_as<int>(), rows, float(args.weight),
                                          args.row_coefficients->data_as<float>(), args.row_coefficients->stride(0));
      scope.check_launch();
    }
    if (args.grad_logits == nullptr) return;
    const GradParams params{.logits = args.logits.data(),
                            .logits_stride = row_stride(args.logits),
                            .labels = args.labels.data_as<int64_t>(),
                            .label_stride = args.labels.stride(0),
                            .grad = args.grad_logits->data(),
                            .grad_stride = row_stride(*args.grad_logits),
                            .logsumexp = logsumexp,
                            .row_coefficient = row_coefficient,
                            .valid = valid.data_as<int>(),
                            .rows = rows,
                            .vocab = vocab,
                            .scale = float(args.logits_scale_factor),
                            .weight = float(args.weight),
                            .accumulate = args.accumulate_gradient};
    dpo_gradient<T><<<std::min<unsigned>(blocks_cap, unsigned(rows)), kThreads, 0, scope.stream()>>>(params);
    scope.check_launch();
  });
}

}  // namespace

FLM_REGISTER_KERNEL(DpoForwardBackward, DeviceType::cuda, "rows", /*priority=*/100, KernelKind::baseline,
                    &supports_dpo, &dpo_rows_launch,
                    "one block per spanned row, the pairs on one thread in order, one block per row for the gradient; "
                    "fp32 math, float32 reference logits");

}  // namespace fast_llm::kernels::cuda
