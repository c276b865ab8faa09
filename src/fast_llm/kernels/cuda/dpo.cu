// CUDA variants of dpo_forward_backward (kernels/dpo.h): logits of float32, bfloat16 or float16 (last dimension
// contiguous), the reference's log-probabilities of float32, contiguous (float64 ones come with float64 logits, which
// these variants refuse too); fp32 math per element, fp64 per pair. Both variants: (1) per covered row, its logsumexp
// and log pi(label); (2) per pair, the margin (with the given log pi_ref), loss and span coefficients; (3) the
// gradient, or the coefficients added to row_coefficients for the head's cross-entropy pass. "rows" (the baseline)
// reads each row twice in (1) and runs (2) on one thread; "parallel" reads each row once (softmax_state.cuh) and runs
// (2) one warp per pair. Every sum has a fixed order: bitwise reproducible. docs/architecture.md has the details.
#include "fast_llm/kernels/cuda/common.cuh"
#include "fast_llm/kernels/cuda/softmax_state.cuh"

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
  const int64_t* labels;
  int64_t label_stride;
  const int64_t* covered;  // (covered rows)
  int64_t covered_rows, vocab;
  float scale;
  float* logsumexp;  // (rows)
  float* policy;     // (rows) log pi(label)
  int* valid;        // (rows) 1 where a covered row has a label
  // Variant "parallel": 16-byte loads where the rows of the logits start aligned.
  bool logits_vectorized = false;
};

template <class T>
__global__ void dpo_rows(RowParams p) {
  __shared__ float scratch[kThreads];
  for (int64_t index = blockIdx.x; index < p.covered_rows; index += gridDim.x) {
    const int64_t row = p.covered[index];
    const int64_t label = p.labels[row * p.label_stride];
    if (label < 0 || label >= p.vocab) continue;
    const T* logits = static_cast<const T*>(p.logits) + row * p.logits_stride;
    const float lse = row_logsumexp(logits, p.vocab, p.scale, scratch);
    if (threadIdx.x == 0) {
      p.logsumexp[row] = lse;
      p.policy[row] = load(logits[label]) * p.scale - lse;
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

// ---------------------------------------------------------------------------------------------------------------------
// Variant "parallel": pass 1 reads each row once, pass 2 runs over every pair and every covered row at once.

// One block per covered row with a label: each thread's state over its columns of the scaled logits, then the block
// merge. Outputs as dpo_rows.
template <class T>
__global__ void dpo_softmax_rows(RowParams p) {
  __shared__ SoftmaxState scratch[kThreads / 32];
  const auto scaled = [&](float x) { return x * p.scale; };
  for (int64_t index = blockIdx.x; index < p.covered_rows; index += gridDim.x) {
    const int64_t row = p.covered[index];
    const int64_t label = p.labels[row * p.label_stride];
    if (label < 0 || label >= p.vocab) continue;
    const T* logits = static_cast<const T*>(p.logits) + row * p.logits_stride;
    const SoftmaxState policy_state = thread_softmax_state<kThreads>(logits, p.vocab, p.logits_vectorized, scaled);
    const SoftmaxState policy_row = block_softmax_state<kThreads>(policy_state, scratch);
    if (threadIdx.x == 0) {
      const float lse = policy_row.max + logf(policy_row.sum);
      p.logsumexp[row] = lse;
      p.policy[row] = load(logits[label]) * p.scale - lse;
      p.valid[row] = 1;
    }
  }
}

// One warp per pair: the sums of log pi and log pi_ref over its chosen and rejected spans (valid rows; each lane every
// 32nd row, then a butterfly, in fp64), its loss softplus(-beta m) and its coefficient -beta sigmoid(-beta m), as
// dpo_pairs computes them.
__global__ void dpo_pair_terms(const int64_t* bounds, int64_t pairs, const float* policy, const float* reference,
                               const int* valid, double beta, double* pair_loss, double* pair_coefficient) {
  const int lane = int(threadIdx.x) % 32;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t pair = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; pair < pairs; pair += warps) {
    const int64_t* span = bounds + 4 * pair;  // chosen begin, end, rejected begin, end
    double sums[4] = {0.0, 0.0, 0.0, 0.0};    // policy chosen, policy rejected, reference chosen, reference rejected
    for (int side = 0; side < 2; ++side)
      for (int64_t row = span[2 * side] + lane; row < span[2 * side + 1]; row += 32)
        if (valid[row]) {
          sums[side] += double(policy[row]);
          sums[2 + side] += double(reference[row]);
        }
    for (double& sum : sums) sum = warp_sum(sum);
    if (lane != 0) continue;
    const double margin = (sums[0] - sums[1]) - (sums[2] - sums[3]);
    const double x = -beta * margin;  // loss = softplus(x)
    pair_loss[pair] = x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
    const double sigmoid = x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));  // sigmoid(-beta m)
    pair_coefficient[pair] = -beta * sigmoid;
  }
}

// One block: loss_sum += the pairs' losses, summed in a fixed order (each thread every kThreads-th pair, then the
// block in fp64).
template <class Sum>
__global__ void dpo_pair_loss_sum(const double* pair_loss, int64_t pairs, Sum* loss_sum) {
  __shared__ double scratch[32];
  double loss = 0.0;
  for (int64_t pair = threadIdx.x; pair < pairs; pair += blockDim.x) loss += pair_loss[pair];
  loss = block_sum_to_thread0(loss, scratch);
  if (threadIdx.x == 0) *loss_sum = Sum(double(*loss_sum) + loss);
}

// One thread per covered row: its coefficient, the sum in pair order (fp64) of + the coefficient of each pair whose
// chosen span holds it and - that of each whose rejected span does (entries[offsets[i], offsets[i + 1]): pair * 2 +
// side, side 1 rejected), into row_coefficient (fp32, for pass 3); with row_weights, -weight times it added there
// on valid rows.
__global__ void dpo_covered_row_coefficients(const int64_t* covered, const int64_t* offsets, const int64_t* entries,
                                             int64_t covered_rows, const double* pair_coefficient, const int* valid,
                                             double weight, float* row_coefficient, float* row_weights,
                                             int64_t row_weight_stride) {
  for (int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; index < covered_rows;
       index += int64_t(gridDim.x) * blockDim.x) {
    double coefficient = 0.0;
    for (int64_t entry = offsets[index]; entry < offsets[index + 1]; ++entry) {
      const double pair = pair_coefficient[entries[entry] / 2];
      coefficient += entries[entry] % 2 == 0 ? pair : -pair;
    }
    const int64_t row = covered[index];
    row_coefficient[row] = float(coefficient);
    if (row_weights != nullptr && valid[row]) row_weights[row * row_weight_stride] += float(-(weight * coefficient));
  }
}

std::optional<std::string> supports_dpo(const DpoArgs& args) {
  if (auto reason = cuda_floating_reason("logits", args.logits)) return reason;
  if (auto reason = inner_contiguous_reason("logits", args.logits)) return reason;
  if (auto reason = float32_reason("reference_log_probabilities", args.reference_log_probabilities)) return reason;
  if (auto reason = contiguous_reason("reference_log_probabilities", args.reference_log_probabilities)) return reason;
  if (args.row_coefficients != nullptr)
    if (auto reason = float32_reason("row_coefficients", *args.row_coefficients)) return reason;
  if (args.grad_logits != nullptr) return inner_contiguous_reason("grad_logits", *args.grad_logits);
  return std::nullopt;
}

// Pass 3 of both variants, when there is a gradient to write: from the rows' logsumexp, coefficients and validity.
template <class T>
void launch_gradient(const DpoArgs& args, const LaunchScope& scope, const float* logsumexp,
                     const float* row_coefficient, const int* valid) {
  if (args.grad_logits == nullptr) return;
  const int64_t rows = args.logits.size(0);
  const GradParams params{.logits = args.logits.data(),
                          .logits_stride = row_stride(args.logits),
                          .labels = args.labels.data_as<int64_t>(),
                          .label_stride = args.labels.stride(0),
                          .grad = args.grad_logits->data(),
                          .grad_stride = row_stride(*args.grad_logits),
                          .logsumexp = logsumexp,
                          .row_coefficient = row_coefficient,
                          .valid = valid,
                          .rows = rows,
                          .vocab = args.logits.size(1),
                          .scale = float(args.logits_scale_factor),
                          .weight = float(args.weight),
                          .accumulate = args.accumulate_gradient};
  const unsigned blocks = std::min<unsigned>(unsigned(scope.multiprocessors()) * 8, unsigned(rows));
  dpo_gradient<T><<<blocks, kThreads, 0, scope.stream()>>>(params);
  scope.check_launch();
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
  Tensor floats = Tensor::empty(Shape{3, rows}, DType::float32, scope.device(), stream);
  Tensor valid = Tensor::empty(Shape{rows}, DType::int32, scope.device(), stream);
  FLM_CUDA_CHECK(cudaMemsetAsync(floats.data(), 0, size_t(floats.nbytes()), scope.stream()));
  FLM_CUDA_CHECK(cudaMemsetAsync(valid.data(), 0, size_t(valid.nbytes()), scope.stream()));
  float* logsumexp = floats.data_as<float>();
  float* policy = logsumexp + rows;
  float* row_coefficient = policy + rows;
  const float* reference = args.reference_log_probabilities.data_as<float>();  // (rows) log pi_ref(label)
  const unsigned blocks_cap = unsigned(scope.multiprocessors()) * 8;
  visit_floating(args.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    if (!covered.empty()) {
      const Tensor covered_rows = Tensor::from_indices(covered, DType::int64, scope.device(), stream);
      const RowParams params{.logits = args.logits.data(),
                             .logits_stride = row_stride(args.logits),
                             .labels = args.labels.data_as<int64_t>(),
                             .label_stride = args.labels.stride(0),
                             .covered = covered_rows.data_as<int64_t>(),
                             .covered_rows = int64_t(covered.size()),
                             .vocab = vocab,
                             .scale = float(args.logits_scale_factor),
                             .logsumexp = logsumexp,
                             .policy = policy,
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
    launch_gradient<T>(args, scope, logsumexp, row_coefficient, valid.data_as<int>());
  });
}

// The pairs' bounds and, for each row a span covers (in the order first met), the (pair, side) entries of the spans
// holding it in pair order (chosen before rejected), flattened into one upload: bounds (4 per pair), covered rows,
// offsets into the entries (covered + 1), entries (pair * 2 + side).
struct PairLayout {
  std::vector<int64_t> indices;
  int64_t pairs = 0, covered_rows = 0;
  int64_t covered_at() const { return 4 * pairs; }
  int64_t offsets_at() const { return covered_at() + covered_rows; }
  int64_t entries_at() const { return offsets_at() + covered_rows + 1; }
};

PairLayout pair_layout(std::span<const PreferencePair> pairs, int64_t rows) {
  PairLayout layout;
  layout.pairs = int64_t(pairs.size());
  std::vector<int64_t> slot(size_t(rows), -1), covered, counts;
  auto for_each_span = [&](const auto& visit) {
    for (size_t pair = 0; pair < pairs.size(); ++pair) {
      visit(int64_t(pair), 0, pairs[pair].chosen_begin, pairs[pair].chosen_end);
      visit(int64_t(pair), 1, pairs[pair].rejected_begin, pairs[pair].rejected_end);
    }
  };
  for_each_span([&](int64_t, int, int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      if (slot[size_t(row)] < 0) {
        slot[size_t(row)] = int64_t(covered.size());
        covered.push_back(row);
        counts.push_back(0);
      }
      ++counts[size_t(slot[size_t(row)])];
    }
  });
  layout.covered_rows = int64_t(covered.size());
  std::vector<int64_t>& indices = layout.indices;
  for (const PreferencePair& pair : pairs)
    indices.insert(indices.end(), {pair.chosen_begin, pair.chosen_end, pair.rejected_begin, pair.rejected_end});
  indices.insert(indices.end(), covered.begin(), covered.end());
  int64_t total = 0;
  for (const int64_t count : counts) {
    indices.push_back(total);
    total += count;
  }
  indices.push_back(total);
  std::vector<int64_t> cursor(indices.begin() + layout.offsets_at(), indices.begin() + layout.entries_at() - 1);
  indices.resize(size_t(layout.entries_at() + total));
  for_each_span([&](int64_t pair, int side, int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row)
      indices[size_t(layout.entries_at() + cursor[size_t(slot[size_t(row)])]++)] = 2 * pair + side;
  });
  return layout;
}

void dpo_parallel_launch(const DpoArgs& args) {
  const int64_t rows = args.logits.size(0), vocab = args.logits.size(1);
  if (rows == 0) return;
  LaunchScope scope("dpo_forward_backward", args.logits.device(), args.stream);
  const Stream stream = scope.tensor_stream();
  const PairLayout layout = pair_layout(args.pairs, rows);
  // (rows) per-row values; only `valid` is zeroed: the others are read on valid rows only.
  Tensor floats = Tensor::empty(Shape{3, rows}, DType::float32, scope.device(), stream);
  Tensor valid = Tensor::empty(Shape{rows}, DType::int32, scope.device(), stream);
  FLM_CUDA_CHECK(cudaMemsetAsync(valid.data(), 0, size_t(valid.nbytes()), scope.stream()));
  float* logsumexp = floats.data_as<float>();
  float* policy = logsumexp + rows;
  float* row_coefficient = policy + rows;
  const float* reference = args.reference_log_probabilities.data_as<float>();  // (rows) log pi_ref(label)
  visit_floating(args.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    if (layout.pairs > 0) {
      const Tensor indices = Tensor::from_indices(layout.indices, DType::int64, scope.device(), stream);
      const int64_t* index_data = indices.data_as<int64_t>();
      if (layout.covered_rows > 0) {
        const RowParams params{.logits = args.logits.data(),
                               .logits_stride = row_stride(args.logits),
                               .labels = args.labels.data_as<int64_t>(),
                               .label_stride = args.labels.stride(0),
                               .covered = index_data + layout.covered_at(),
                               .covered_rows = layout.covered_rows,
                               .vocab = vocab,
                               .scale = float(args.logits_scale_factor),
                               .logsumexp = logsumexp,
                               .policy = policy,
                               .valid = valid.data_as<int>(),
                               .logits_vectorized = rows_aligned<T>(args.logits)};
        dpo_softmax_rows<T><<<grid_for(layout.covered_rows, 1, scope), kThreads, 0, scope.stream()>>>(params);
        scope.check_launch();
      }
      // (2 pairs) each pair's loss, then its coefficient.
      Tensor pair_values = Tensor::empty(Shape{2 * layout.pairs}, DType::float64, scope.device(), stream);
      double* pair_loss = pair_values.data_as<double>();
      double* pair_coefficient = pair_loss + layout.pairs;
      dpo_pair_terms<<<grid_for(layout.pairs * 32, kThreads, scope), kThreads, 0, scope.stream()>>>(
          index_data, layout.pairs, policy, reference, valid.data_as<int>(), args.beta, pair_loss, pair_coefficient);
      scope.check_launch();
      if (args.loss_sum.dtype() == DType::float64)
        dpo_pair_loss_sum<<<1, kThreads, 0, scope.stream()>>>(pair_loss, layout.pairs,
                                                              args.loss_sum.data_as<double>());
      else
        dpo_pair_loss_sum<<<1, kThreads, 0, scope.stream()>>>(pair_loss, layout.pairs, args.loss_sum.data_as<float>());
      scope.check_launch();
      if (layout.covered_rows > 0) {
        float* row_weights = args.row_coefficients != nullptr ? args.row_coefficients->data_as<float>() : nullptr;
        const int64_t row_weight_stride = args.row_coefficients != nullptr ? args.row_coefficients->stride(0) : 0;
        dpo_covered_row_coefficients<<<grid_for(layout.covered_rows, kThreads, scope), kThreads, 0,
                                       scope.stream()>>>(
            index_data + layout.covered_at(), index_data + layout.offsets_at(), index_data + layout.entries_at(),
            layout.covered_rows, pair_coefficient, valid.data_as<int>(), args.weight, row_coefficient, row_weights,
            row_weight_stride);
        scope.check_launch();
      }
    }
    launch_gradient<T>(args, scope, logsumexp, row_coefficient, valid.data_as<int>());
  });
}

}  // namespace

FLM_REGISTER_KERNEL(DpoForwardBackward, DeviceType::cuda, "rows", /*priority=*/100, KernelKind::baseline,
                    &supports_dpo, &dpo_rows_launch,
                    "one block per spanned row, the pairs on one thread in order, one block per row for the gradient; "
                    "fp32 math, float32 reference log-probabilities");

// Above "rows": the same results to rounding, with one read of each spanned row and no one-thread pass
// (tests/kernels/dpo_consistency_test.cpp runs every variant; benchmarks/head_losses_benchmark.cpp times both).
FLM_REGISTER_KERNEL(DpoForwardBackward, DeviceType::cuda, "parallel", /*priority=*/200, KernelKind::optimized,
                    &supports_dpo, &dpo_parallel_launch,
                    "one read of each spanned row of the logits (online softmax statistics), one warp per pair and one "
                    "thread per spanned row for the coefficients, fp64 fixed-order sums; float32 reference "
                    "log-probabilities");

}  // namespace fast_llm::kernels::cuda
