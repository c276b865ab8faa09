// CUDA variants of policy_gradient_forward_backward (kernels/policy_gradient.h), fp32 math on float32, bfloat16 or
// float16 logits (last dimension contiguous): (1) per row, its logsumexp, the label's log-prob and the entropy; (2) per
// token, in fp64, the documents' means, each ratio, advantage and gradient coefficient, the loss, metric sums and
// advantage extremes; (3) the gradient c_t (softmax - onehot) dz/dx (in place allowed), or c_t added to
// row_coefficients. "rows" (the baseline) reads each row three times and runs (2) on one thread in the reference's
// order; "parallel" (the default) reads each row once (softmax_state.cuh) and runs (2) over every token at once. Every
// sum has a fixed order: bitwise reproducible. docs/architecture.md and docs/benchmarks.md have the details.
#include "fast_llm/kernels/cuda/common.cuh"
#include "fast_llm/kernels/cuda/softmax_state.cuh"

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

// A masked row's (label < 0, or not below vocab) pass-1 outputs: zeros, written by thread 0.
__device__ void zero_masked_row_statistics(const RowParams& p, int64_t row) {
  if (threadIdx.x != 0) return;
  p.logsumexp[row] = 0.0f;
  p.new_log_probs[row] = 0.0f;
  if (p.entropies != nullptr) p.entropies[row] = 0.0f;
}

template <class T>
__global__ void log_probability_rows(RowParams p) {
  __shared__ float scratch[kThreads];
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t label = p.labels[row * p.label_stride];
    if (label < 0 || label >= p.vocab) {
      zero_masked_row_statistics(p, row);
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

// What pass 2 adds up over tokens: the loss sum, the metric sums and the extremes of the labels' advantages (NaN
// skipped). Trivial (no member initialisers), so that the parallel variant can keep some in shared memory.
struct TokenTerms {
  double loss;
  double metrics[kPolicyMetricCount];
  double largest_advantage, smallest_advantage;
};

__device__ TokenTerms no_token_terms() {
  TokenTerms terms;
  terms.loss = 0.0;
  for (double& sum : terms.metrics) sum = 0.0;
  terms.largest_advantage = -INFINITY;
  terms.smallest_advantage = INFINITY;
  return terms;
}

// The token's additions to its document's sums (document_sums: counts, log-ratio sums, advantage sums).
__device__ void document_terms(const TokenParams& p, int64_t token, double& count, double& log_ratio,
                               double& advantage) {
  count += 1.0;
  log_ratio += double(p.new_log_probs[token]) - double(p.old_log_probs[token * p.old_log_prob_stride]);
  advantage += double(p.advantages[token * p.advantage_stride]);
}

// The CPU reference's pass 2 for one token: its coefficient c_t (0 for a token that does not count), its loss and
// metric terms added to `terms`, its advantage taken into the extremes. `document_sums` as TokenParams (complete).
__device__ double token_terms(const TokenParams& p, int64_t token, const double* document_sums, TokenTerms& terms) {
  const bool metrics = p.metric_sums != nullptr;
  const bool per_document = p.sequence_level || metrics;
  if (!token_counts(p, token, per_document)) return 0.0;
  const int64_t document = per_document ? p.documents[token * p.document_stride] : 0;
  const double count = per_document ? document_sums[document] : 1.0;
  const double new_log_prob = p.new_log_probs[token], old_log_prob = p.old_log_probs[token * p.old_log_prob_stride];
  double log_ratio = new_log_prob - old_log_prob;
  double advantage = p.advantages[token * p.advantage_stride];
  terms.largest_advantage = fmax(terms.largest_advantage, advantage);
  terms.smallest_advantage = fmin(terms.smallest_advantage, advantage);
  if (p.sequence_level) {
    log_ratio = document_sums[p.documents_count + document] / count;
    advantage = document_sums[2 * p.documents_count + document] / count;
  }
  const double ratio = exp(log_ratio);
  terms.loss += -fmin(ratio * advantage, fmin(fmax(ratio, p.low), p.high) * advantage);
  const double coefficient = (fmax(advantage, 0.0) * (ratio <= p.high ? 1.0 : 0.0) +
                              fmin(advantage, 0.0) * (ratio >= p.low ? 1.0 : 0.0)) *
                             ratio;
  if (!metrics) return coefficient;
  const double weight = 1.0 / count;
  const double variance_weight = p.sequence_level ? weight : 1.0;
  double* sums = terms.metrics;
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
  return coefficient;
}

// loss_sum += terms.loss, metric_sums += terms.metrics (with metrics), the extremes taken into max / min_advantage.
__device__ void write_token_terms(const TokenParams& p, const TokenTerms& terms) {
  add_to(p.loss_sum, p.loss_sum_double, 0, terms.loss);
  if (p.metric_sums != nullptr)
    for (int index = 0; index < kPolicyMetricCount; ++index)
      add_to(p.metric_sums, p.metric_sums_double, index, terms.metrics[index]);
  take_extreme(p.max_advantage, p.max_advantage_double, terms.largest_advantage, /*largest=*/true);
  take_extreme(p.min_advantage, p.min_advantage_double, terms.smallest_advantage, /*largest=*/false);
}

// One thread: the CPU reference's second pass, in the same order and precision.
__global__ void token_coefficients(TokenParams p) {
  const bool per_document = p.sequence_level || p.metric_sums != nullptr;
  if (per_document && p.document_sums != nullptr) {
    double* counts = p.document_sums;
    double* log_ratio_sums = p.document_sums + p.documents_count;
    double* advantage_sums = p.document_sums + 2 * p.documents_count;
    for (int64_t index = 0; index < 3 * p.documents_count; ++index) p.document_sums[index] = 0.0;
    for (int64_t token = 0; token < p.rows; ++token) {
      if (!token_counts(p, token, per_document)) continue;
      const int32_t document = p.documents[token * p.document_stride];
      document_terms(p, token, counts[document], log_ratio_sums[document], advantage_sums[document]);
    }
  }
  TokenTerms terms = no_token_terms();
  for (int64_t token = 0; token < p.rows; ++token)
    p.coefficients[token] = token_terms(p, token, p.document_sums, terms);
  write_token_terms(p, terms);
}

// ---------------------------------------------------------------------------------------------------------------------
// Variant "parallel": pass 1 reads each row once, pass 2 runs over every token at once.

// One block per row, each logit read once (softmax_state.cuh: a SoftmaxState per thread, 16-byte loads where
// `vectorized`: row starts aligned, merged over the block in a fixed order); then lse = max + log(sum),
// H = lse - weighted / sum. Outputs as log_probability_rows.
template <class T>
__global__ void softmax_statistics_rows(RowParams p, bool vectorized) {
  __shared__ SoftmaxState scratch[kThreads / 32];
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t label = p.labels[row * p.label_stride];
    if (label < 0 || label >= p.vocab) {
      zero_masked_row_statistics(p, row);
      continue;
    }
    const T* logits = static_cast<const T*>(p.logits) + row * p.logits_stride;
    const auto logit = [&](float x) { return scaled_softcapped_logit(x, p.scale, p.softcap, nullptr); };
    const SoftmaxState state =
        block_softmax_state<kThreads>(thread_softmax_state<kThreads>(logits, p.vocab, vectorized, logit), scratch);
    if (threadIdx.x == 0) {
      const float logsumexp = state.max + logf(state.sum);
      p.logsumexp[row] = logsumexp;
      p.new_log_probs[row] = scaled_logit(logits, label, p.scale, p.softcap, nullptr) - logsumexp;
      if (p.entropies != nullptr) p.entropies[row] = logsumexp - state.weighted / state.sum;
    }
  }
}

// Each document's token range [first, end) among the tokens that count: integer atomics (min / max commute, so the
// result is the same in every run). Documents without such tokens keep first = ~0, end = 0.
__global__ void reset_document_ranges(unsigned long long* first, unsigned long long* end, int64_t documents) {
  for (int64_t document = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; document < documents;
       document += int64_t(gridDim.x) * blockDim.x) {
    first[document] = ~0ull;
    end[document] = 0ull;
  }
}

__global__ void document_ranges(TokenParams p, unsigned long long* first, unsigned long long* end) {
  for (int64_t token = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; token < p.rows;
       token += int64_t(gridDim.x) * blockDim.x) {
    if (!token_counts(p, token, /*per_document=*/true)) continue;
    const int32_t document = p.documents[token * p.document_stride];
    atomicMin(first + document, (unsigned long long)token);
    atomicMax(end + document, (unsigned long long)token + 1);
  }
}

// One warp per document: its count, log-ratio and advantage sums (document_sums as TokenParams) over its range, the
// lanes taking every 32nd token and summing in fp64 by a butterfly. Tokens of other documents inside the range (the
// documents need not be contiguous) are skipped, so the sums are right for any layout, only slower for interleaved
// ones.
__global__ void document_sums_by_warp(TokenParams p, const unsigned long long* first, const unsigned long long* end) {
  const int lane = int(threadIdx.x) % 32;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t document = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; document < p.documents_count;
       document += warps) {
    const int64_t stop = int64_t(end[document]);
    const int64_t start = first[document] < end[document] ? int64_t(first[document]) : stop;
    double count = 0.0, log_ratio = 0.0, advantage = 0.0;
    for (int64_t token = start + lane; token < stop; token += 32)
      if (token_counts(p, token, /*per_document=*/true) && p.documents[token * p.document_stride] == document)
        document_terms(p, token, count, log_ratio, advantage);
    count = warp_sum(count);
    log_ratio = warp_sum(log_ratio);
    advantage = warp_sum(advantage);
    if (lane == 0) {
      p.document_sums[document] = count;
      p.document_sums[p.documents_count + document] = log_ratio;
      p.document_sums[2 * p.documents_count + document] = advantage;
    }
  }
}

__device__ void add_token_terms(TokenTerms& into, const TokenTerms& other) {
  into.loss += other.loss;
  for (int index = 0; index < kPolicyMetricCount; ++index) into.metrics[index] += other.metrics[index];
  into.largest_advantage = fmax(into.largest_advantage, other.largest_advantage);
  into.smallest_advantage = fmin(into.smallest_advantage, other.smallest_advantage);
}

// The block's TokenTerms, valid in thread 0: a butterfly over each warp (every lane the same bits), then the warps in
// order. `scratch` holds one TokenTerms per warp.
__device__ TokenTerms block_token_terms(TokenTerms terms, TokenTerms* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    TokenTerms other;
    other.loss = __shfl_xor_sync(0xffffffffu, terms.loss, offset);
    for (int index = 0; index < kPolicyMetricCount; ++index)
      other.metrics[index] = __shfl_xor_sync(0xffffffffu, terms.metrics[index], offset);
    other.largest_advantage = __shfl_xor_sync(0xffffffffu, terms.largest_advantage, offset);
    other.smallest_advantage = __shfl_xor_sync(0xffffffffu, terms.smallest_advantage, offset);
    add_token_terms(terms, other);
  }
  const int warp = int(threadIdx.x) / 32;
  if (threadIdx.x % 32 == 0) scratch[warp] = terms;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int i = 1; i < int(blockDim.x) / 32; ++i) add_token_terms(terms, scratch[i]);
  return terms;
}

// Pass 2 over every token at once: each thread its tokens' coefficients and terms (token_terms, with the complete
// document sums), each block's terms into partials[blockIdx.x].
__global__ void token_terms_by_block(TokenParams p, TokenTerms* partials) {
  __shared__ TokenTerms scratch[kThreads / 32];
  TokenTerms terms = no_token_terms();
  for (int64_t token = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; token < p.rows;
       token += int64_t(gridDim.x) * blockDim.x)
    p.coefficients[token] = token_terms(p, token, p.document_sums, terms);
  terms = block_token_terms(terms, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = terms;
}

// One block: the partials of token_terms_by_block in a fixed order, added to the outputs.
__global__ void write_partial_token_terms(TokenParams p, const TokenTerms* partials, int count) {
  __shared__ TokenTerms scratch[kThreads / 32];
  TokenTerms terms = no_token_terms();
  for (int index = int(threadIdx.x); index < count; index += kThreads) add_token_terms(terms, partials[index]);
  terms = block_token_terms(terms, scratch);
  if (threadIdx.x == 0) write_token_terms(p, terms);
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

enum class Pass2 { one_thread, parallel };

// Both variants: pass 1 by `row_statistics` (log_probability_rows or softmax_statistics_rows), pass 2 on one thread or
// over every token, then the row coefficients and the gradient pass alike.
template <template <class> class RowStatistics>
void launch_policy_gradient(const PolicyGradientArgs& args, Pass2 pass2, bool vectorized_rows) {
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
    RowStatistics<T>::launch(blocks, scope, rows_params, vectorized_rows && rows_aligned<T>(args.logits));
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
  if (pass2 == Pass2::one_thread) {
    token_coefficients<<<1, 1, 0, scope.stream()>>>(token_params);
    scope.check_launch();
  } else {
    if (document_sums.defined()) {
      // (2 documents) first token, one past the last token; ranges first: the sums need them complete.
      Tensor ranges = Tensor::empty(Shape{2 * args.num_documents}, DType::int64, scope.device(), scope.tensor_stream());
      auto* first = reinterpret_cast<unsigned long long*>(ranges.data_as<int64_t>());
      unsigned long long* end = first + args.num_documents;
      reset_document_ranges<<<grid_for(args.num_documents, kThreads, scope), kThreads, 0, scope.stream()>>>(
          first, end, args.num_documents);
      scope.check_launch();
      document_ranges<<<grid_for(rows, kThreads, scope), kThreads, 0, scope.stream()>>>(token_params, first, end);
      scope.check_launch();
      document_sums_by_warp<<<grid_for(args.num_documents * 32, kThreads, scope), kThreads, 0, scope.stream()>>>(
          token_params, first, end);
      scope.check_launch();
    }
    // At most one block per multiprocessor, so that the last kernel reduces few partials.
    const unsigned token_blocks = grid_for(rows, kThreads, scope, /*blocks_per_multiprocessor=*/1);
    Tensor partials = Tensor::empty(Shape{int64_t(token_blocks) * int64_t(sizeof(TokenTerms))}, DType::uint8,
                                    scope.device(), scope.tensor_stream());
    auto* partial_terms = reinterpret_cast<TokenTerms*>(partials.data());
    token_terms_by_block<<<token_blocks, kThreads, 0, scope.stream()>>>(token_params, partial_terms);
    scope.check_launch();
    write_partial_token_terms<<<1, kThreads, 0, scope.stream()>>>(token_params, partial_terms, int(token_blocks));
    scope.check_launch();
  }
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

// Pass 1 of each variant, as a class template for launch_policy_gradient.
template <class T>
struct ThreeReadRows {
  static void launch(unsigned blocks, const LaunchScope& scope, const RowParams& params, bool /*vectorized*/) {
    log_probability_rows<T><<<blocks, kThreads, 0, scope.stream()>>>(params);
  }
};

template <class T>
struct OneReadRows {
  static void launch(unsigned blocks, const LaunchScope& scope, const RowParams& params, bool vectorized) {
    softmax_statistics_rows<T><<<blocks, kThreads, 0, scope.stream()>>>(params, vectorized);
  }
};

void policy_gradient_rows_launch(const PolicyGradientArgs& args) {
  launch_policy_gradient<ThreeReadRows>(args, Pass2::one_thread, /*vectorized_rows=*/false);
}

void policy_gradient_parallel_launch(const PolicyGradientArgs& args) {
  launch_policy_gradient<OneReadRows>(args, Pass2::parallel, /*vectorized_rows=*/true);
}

}  // namespace

FLM_REGISTER_KERNEL(PolicyGradientForwardBackward, DeviceType::cuda, "rows", /*priority=*/100, KernelKind::baseline,
                    &supports_policy_gradient, &policy_gradient_rows_launch,
                    "one block per row for the log-probs and the gradient, one thread for the per-token and "
                    "per-document ratios in fp64");

// Above "rows": on the H200 it passed the consistency test (tests/kernels/policy_gradient_consistency_test.cpp runs
// every variant) and its statistics took 0.53 ms against 6.6 ms (benchmarks/head_losses_benchmark.cpp).
FLM_REGISTER_KERNEL(PolicyGradientForwardBackward, DeviceType::cuda, "parallel", /*priority=*/200,
                    KernelKind::optimized, &supports_policy_gradient, &policy_gradient_parallel_launch,
                    "one read of each row for the log-prob and entropy (online softmax statistics), the per-document "
                    "and per-token ratios over every token at once in fp64 (fixed-order reductions)");

}  // namespace fast_llm::kernels::cuda
