// CUDA variant "rows" of policy_gradient_forward_backward (kernels/policy_gradient.h): the CPU reference's three passes
// on the device, fp32 math on float32, bfloat16 or float16 logits with the last dimension contiguous.
//
// (1) one block per row: the row's logsumexp, the label's new log-prob and (for the metrics) the entropy;
// (2) one thread, in token order and in fp64: per-document counts and means, each token's ratio, advantage and
//     gradient coefficient, the loss sum, the metric sums and the advantage extremes (a few operations per token: the
//     rows dominate);
// (3) one block per row: the gradient grad_weight c_t (softmax - onehot) dz/dx from the saved logsumexp, each element
//     read by the thread that writes it, so grad_logits may be the logits themselves.
// With row_coefficients (fp32), grad_weight c_t is added to them (pass 3 runs only when grad_logits is given).
// Every sum is taken in a fixed order, so the results are bitwise reproducible.
#include "fast_llm/kernels/cuda/common.cuh"

#include "fast_llm/kernels/policy_gradient.h"

namespace fast_llm::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__device__ float scaled_logit(const T* row, int64_t column, float scale, float softcap, float* derivative) {
  return scaled_softcapped_logit(load(row[column]), scale, softcap, derivative);
}

struct RowParams {
  const void* logits;
  int64_t logits_stride;
  const int64_t* labels;
  int64_t label_stride;
  void* grad;  // (rows, vocab) or nullptr
  int64_t grad_stride;
  float* logsumexp;          // (rows)
  float* new_log_probs;      // (rows)
  float* entropies;          // (rows) or nullptr (no metrics)
  const double* coefficients;  // (rows) c_t, for the gradient pass
  int64_t rows, vocab;
  float scale, softcap, grad_weight;
};

template <class T>
__global__ void log_probability_rows(RowParams p) {
  __shared__ float scratch[kThreads];
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t label = p.labels[row * p.label_stride];
    if (label < 0 || label >= p.vocab) {
      if (threadIdx.x == 0) {
        p.logsumexp[row] = 0.0f;
        p.new_log_probs[row] = 0.0f;
        if (p.entropies != nullptr) p.entropies[row] = 0.0f;
      }
      continue;
    }
    const T* logits = static_cast<const T*>(p.logits) + row * p.logits_stride;
    float max_z = -INFINITY;
    for (int64_t column = threadIdx.x; column < p.vocab; column += kThreads)
      max_z = fmaxf(max_z, scaled_logit(logits, column, p.scale, p.softcap, nullptr));
    max_z = block_reduce_in_thread_order(max_z, scratch, true);
    float sum = 0.0f;
    for (int64_t column = threadIdx.x; column < p.vocab; column += kThreads)
      sum += expf(scaled_logit(logits, column, p.scale, p.softcap, nullptr) - max_z);
    const float logsumexp = max_z + logf(block_reduce_in_thread_order(sum, scratch, false));
    if (p.entropies != nullptr) {
      // H = lse - sum_k softmax_k z_k
      float expected = 0.0f;
      for (int64_t column = threadIdx.x; column < p.vocab; column += kThreads) {
        const float z = scaled_logit(logits, column, p.scale, p.softcap, nullptr);
        expected += expf(z - logsumexp) * z;
      }
      expected = block_reduce_in_thread_order(expected, scratch, false);
      if (threadIdx.x == 0) p.entropies[row] = logsumexp - expected;
    }
    if (threadIdx.x == 0) {
      p.logsumexp[row] = logsumexp;
      p.new_log_probs[row] = scaled_logit(logits, label, p.scale, p.softcap, nullptr) - logsumexp;
    }
  }
}

template <class T>
__global__ void gradient_rows(RowParams p) {
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t label = p.labels[row * p.label_stride];
    T* grad = static_cast<T*>(p.grad) + row * p.grad_stride;
    if (label < 0 || label >= p.vocab) {
      for (int64_t column = threadIdx.x; column < p.vocab; column += kThreads) grad[column] = store<T>(0.0f);
      continue;
    }
    const T* logits = static_cast<const T*>(p.logits) + row * p.logits_stride;
    const float coefficient = float(double(p.grad_weight) * p.coefficients[row]);
    const float logsumexp = p.logsumexp[row];
    for (int64_t column = threadIdx.x; column < p.vocab; column += kThreads) {
      float derivative;
      const float z = scaled_logit(logits, column, p.scale, p.softcap, &derivative);
      const float softmax = expf(z - logsumexp);
      grad[column] = store<T>(coefficient * (softmax - (column == label ? 1.0f : 0.0f)) * derivative);
    }
  }
}

struct TokenParams {
  const int64_t* labels;
  int64_t label_stride;
  const float* advantages;
  int64_t advantage_stride;
  const float* old_log_probs;
  int64_t old_log_prob_stride;
  const int32_t* documents;
  int64_t document_stride;
  const float* new_log_probs;  // (rows)
  const float* entropies;      // (rows) or nullptr (no metrics)
  double* coefficients;        // (rows)
  double* document_sums;       // (3 * documents): counts, log-ratio sums, advantage sums; or nullptr
  int64_t rows, documents_count;
  bool sequence_level;
  double low, high;
  void* loss_sum;
  bool loss_sum_double;
  void* metric_sums;  // or nullptr
  bool metric_sums_double;
  void* max_advantage;  // (1) or nullptr, as min_advantage
  bool max_advantage_double;
  void* min_advantage;
  bool min_advantage_double;
};

__device__ void add_to(void* sums, bool is_double, int index, double value) {
  if (is_double) static_cast<double*>(sums)[index] += value;
  else static_cast<float*>(sums)[index] = float(double(static_cast<float*>(sums)[index]) + value);
}

// extreme = max(extreme, value), or min, in fp64 (fmax / fmin: as the CPU reference's std::fmax / std::fmin).
__device__ void take_extreme(void* extreme, bool is_double, double value, bool largest) {
  if (extreme == nullptr) return;
  const double current = is_double ? *static_cast<double*>(extreme) : double(*static_cast<float*>(extreme));
  const double result = largest ? fmax(current, value) : fmin(current, value);
  if (is_double) *static_cast<double*>(extreme) = result;
  else *static_cast<float*>(extreme) = float(result);
}

// Whether token's label is unmasked and, where documents matter, its document is in range (the CPU reference
// refuses such data; here a token outside the documents is skipped rather than written out of bounds).
__device__ bool token_counts(const TokenParams& p, int64_t token, bool per_document) {
  if (p.labels[token * p.label_stride] < 0) return false;
  if (!per_document) return true;
  const int32_t document = p.documents[token * p.document_stride];
  return p.document_sums != nullptr && document >= 0 && document < p.documents_count;
}

// One thread: the CPU reference's second pass, in the same order and precision.
__global__ void token_coefficients(TokenParams p) {
  const bool metrics = p.metric_sums != nullptr;
  const bool per_document = p.sequence_level || metrics;
  double* counts = p.document_sums;
  double* log_ratio_sums = per_document ? p.document_sums + p.documents_count : nullptr;
  double* advantage_sums = per_document ? p.document_sums + 2 * p.documents_count : nullptr;
  if (per_document && p.document_sums != nullptr) {
    for (int64_t index = 0; index < 3 * p.documents_count; ++index) p.document_sums[index] = 0.0;
    for (int64_t token = 0; token < p.rows; ++token) {
      if (!token_counts(p, token, per_document)) continue;
      const int32_t document = p.documents[token * p.document_stride];
      counts[document] += 1.0;
      log_ratio_sums[document] +=
          double(p.new_log_probs[token]) - double(p.old_log_probs[token * p.old_log_prob_stride]);
      advantage_sums[document] += double(p.advantages[token * p.advantage_stride]);
    }
  }
  double sums[kPolicyMetricCount] = {};
  double loss_sum = 0.0;
  double largest_advantage = -INFINITY, smallest_advantage = INFINITY;  // of the unmasked labels, NaN skipped
  for (int64_t token = 0; token < p.rows; ++token) {
    p.coefficients[token] = 0.0;
    if (!token_counts(p, token, per_document)) continue;
    const int64_t document = per_document ? p.documents[token * p.document_stride] : 0;
    const double new_log_prob = p.new_log_probs[token], old_log_prob = p.old_log_probs[token * p.old_log_prob_stride];
    double log_ratio = new_log_prob - old_log_prob;
    double advantage = p.advantages[token * p.advantage_stride];
    largest_advantage = fmax(largest_advantage, advantage);
    smallest_advantage = fmin(smallest_advantage, advantage);
    if (p.sequence_level) {
      log_ratio = log_ratio_sums[document] / counts[document];
      advantage = advantage_sums[document] / counts[document];
    }
    const double ratio = exp(log_ratio);
    loss_sum += -fmin(ratio * advantage, fmin(fmax(ratio, p.low), p.high) * advantage);
    p.coefficients[token] = (fmax(advantage, 0.0) * (ratio <= p.high ? 1.0 : 0.0) +
                             fmin(advantage, 0.0) * (ratio >= p.low ? 1.0 : 0.0)) *
                            ratio;
    if (!metrics) continue;
    const double weight = 1.0 / counts[document];
    const double variance_weight = p.sequence_level ? weight : 1.0;
    sums[int(PolicyMetric::new_logprobs)] += weight * new_log_prob;
    sums[int(PolicyMetric::old_logprobs)] += weight * old_log_prob;
    sums[int(PolicyMetric::ratio_new_old)] += weight * ratio;
    sums[int(PolicyMetric::ratio_new_old_sum)] += variance_weight * ratio;
    sums[int(PolicyMetric::ratio_new_old_squared_sum)] += variance_weight * ratio * ratio;
    sums[int(PolicyMetric::kl_new_old)] += weight * (ratio - log_ratio - 1.0);
    sums[int(PolicyMetric::clipped_ratio_fraction)] += weight * ((ratio < p.low || ratio > p.high) ? 1.0 : 0.0);
    sums[int(PolicyMetric::advantage)] += weight * advantage;
    sums[int(PolicyMetric::num_tokens)] += 1.0;
    sums[int(PolicyMetric::num_segments)] += weight;
    sums[int(PolicyMetric::entropy)] += weight * double(p.entropies[token]);
  }
  add_to(p.loss_sum, p.loss_sum_double, 0, loss_sum);
  if (metrics)
    for (int index = 0; index < kPolicyMetricCount; ++index)
      add_to(p.metric_sums, p.metric_sums_double, index, sums[index]);
  take_extreme(p.max_advantage, p.max_advantage_double, largest_advantage, /*largest=*/true);
  take_extreme(p.min_advantage, p.min_advantage_double, smallest_advantage, /*largest=*/false);
}

// row_coefficients[row] += grad_weight c_t: the gradient as cross-entropy row weights (c_t is 0 for masked rows).
__global__ void add_row_coefficients(const double* coefficients, int64_t rows, double grad_weight, float* out,
                                     int64_t out_stride) {
  for (int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; row < rows; row += int64_t(gridDim.x) * blockDim.x)
    out[row * out_stride] += float(grad_weight * coefficients[row]);
}

std::optional<std::string> supports_policy_gradient(const PolicyGradientArgs& args) {
  if (auto reason = cuda_floating_reason("logits", args.logits)) return reason;
  if (auto reason = inner_contiguous_reason("logits", args.logits)) return reason;
  if (args.row_coefficients != nullptr)
    if (auto reason = float32_reason("row_coefficients", *args.row_coefficients)) return reason;
  if (args.grad_logits != nullptr) return inner_contiguous_reason("grad_logits", *args.grad_logits);
  return std::nullopt;
}

void policy_gradient_rows_launch(const PolicyGradientArgs& args) {
  const int64_t rows = args.logits.size(0);
  if (rows == 0) return;
  LaunchScope scope("policy_gradient_forward_backward", args.logits.device(), args.stream);
  const bool metrics = args.metric_sums != nullptr;
  const bool per_document = args.sequence_level || metrics;
  Tensor row_values = Tensor::empty(Shape{(metrics ? 3 : 2) * rows}, DType::float32, scope.device(),
                                    scope.tensor_stream());
  Tensor coefficients = Tensor::empty(Shape{rows}, DType::float64, scope.device(), scope.tensor_stream());
  Tensor document_sums;
  if (per_document && args.num_documents > 0)
    document_sums = Tensor::empty(Shape{3 * args.num_documents}, DType::float64, scope.device(),
                                  scope.tensor_stream());
  float* values = row_values.data_as<float>();
  const RowParams rows_params{
      .logits = args.logits.data(),
      .logits_stride = row_stride(args.logits),
      .labels = args.labels.data_as<int64_t>(),
      .label_stride = args.labels.stride(0),
      .grad = args.grad_logits != nullptr ? args.grad_logits->data() : nullptr,
      .grad_stride = args.grad_logits != nullptr ? row_stride(*args.grad_logits) : 0,
      .logsumexp = values,
      .new_log_probs = values + rows,
      .entropies = metrics ? values + 2 * rows : nullptr,
      .coefficients = coefficients.data_as<double>(),
      .rows = rows,
      .vocab = args.logits.size(1),
      .scale = float(args.logits_scale_factor),
      .softcap = float(args.softcap.value_or(0.0)),
      .grad_weight = float(args.grad_weight)};
  const unsigned blocks = unsigned(std::min<int64_t>(rows, int64_t(scope.multiprocessors()) * 8));
  visit_floating(args.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    log_probability_rows<T><<<blocks, kThreads, 0, scope.stream()>>>(rows_params);
  });
  scope.check_launch();
  const TokenParams token_params{
      .labels = args.labels.data_as<int64_t>(),
      .label_stride = args.labels.stride(0),
      .advantages = args.advantages.data_as<float>(),
      .advantage_stride = args.advantages.stride(0),
      .old_log_probs = args.old_log_probabilities.data_as<float>(),
      .old_log_prob_stride = args.old_log_probabilities.stride(0),
      .documents = args.label_documents.data_as<int32_t>(),
      .document_stride = args.label_documents.stride(0),
      .new_log_probs = rows_params.new_log_probs,
      .entropies = rows_params.entropies,
      .coefficients = coefficients.data_as<double>(),
      .document_sums = document_sums.defined() ? document_sums.data_as<double>() : nullptr,
      .rows = rows,
      .documents_count = args.num_documents,
      .sequence_level = args.sequence_level,
      .low = 1.0 - args.epsilon_low,
      .high = 1.0 + args.epsilon_high,
      .loss_sum = args.loss_sum.data(),
      .loss_sum_double = args.loss_sum.dtype() == DType::float64,
      .metric_sums = metrics ? args.metric_sums->data() : nullptr,
      .metric_sums_double = metrics && args.metric_sums->dtype() == DType::float64,
      .max_advantage = args.max_advantage != nullptr ? args.max_advantage->data() : nullptr,
      .max_advantage_double = args.max_advantage != nullptr && args.max_advantage->dtype() == DType::float64,
      .min_advantage = args.min_advantage != nullptr ? args.min_advantage->data() : nullptr,
      .min_advantage_double = args.min_advantage != nullptr && args.min_advantage->dtype() == DType::float64};
  token_coefficients<<<1, 1, 0, scope.stream()>>>(token_params);
  scope.check_launch();
  if (args.row_coefficients != nullptr) {
    add_row_coefficients<<<unsigned(std::min<int64_t>(ceil_div(rows, kThreads), blocks)), kThreads, 0,
                           scope.stream()>>>(coefficients.data_as<double>(), rows, args.grad_weight,
                                             args.row_coefficients->data_as<float>(),
                                             args.row_coefficients->stride(0));
    scope.check_launch();
  }
  if (args.grad_logits == nullptr) return;
  visit_floating(args.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    gradient_rows<T><<<blocks, kThreads, 0, scope.stream()>>>(rows_params);
  });
  scope.check_launch();
}

}  // namespace

FLM_REGISTER_KERNEL(PolicyGradientForwardBackward, DeviceType::cuda, "rows", /*priority=*/100, KernelKind::baseline,
                    &supports_policy_gradient, &policy_gradient_rows_launch,
                    "one block per row for the log-probs and the gradient, one thread for the per-token and "
                    "per-document ratios in fp64");

}  // namespace fast_llm::kernels::cuda
