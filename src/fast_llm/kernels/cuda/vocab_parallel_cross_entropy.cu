// CUDA variants "rows" of the vocabulary-parallel cross-entropy passes (kernels/vocab_parallel_cross_entropy.h):
// logits of float32, bfloat16 or float16 with any strides (the gradient's too), statistics in float32.
//
// One block per row (a grid-stride loop over rows), its threads striding over the row's slice of the vocabulary: the
// maximum and the sums are reduced over the block in thread order (block_reduce_in_thread_order), so the results are
// the same in every run; masked rows (label < 0) are uniform over their block, which skips them whole. The last pass
// writes each row's losses to a buffer that one block adds to the loss sums in a fixed order (fp64), as the
// whole-vocabulary kernel does. Plain, not tuned: the passes read the slice's logits three times (the tensor-parallel
// collectives between them keep them apart); z as the reference: logits * scale, then softcap * tanh(z / softcap).
#include "fast_llm/kernels/cuda/common.cuh"
#include "fast_llm/kernels/cuda/row_loss_sums.cuh"

#include <cmath>
#include <optional>
#include <string>

#include "fast_llm/kernels/vocab_parallel_cross_entropy.h"

namespace fast_llm::kernels::cuda {
namespace {

constexpr int kThreads = 256;

struct SliceParams {
  const void* logits;  // (rows, vocab slice) T
  int64_t logits_row_stride;
  int64_t logits_column_stride;
  const int64_t* labels;  // (rows)
  int64_t label_stride;
  int64_t rows;
  int64_t vocab;  // of the slice
  int64_t vocab_begin;
  float scale;
  bool has_softcap;
  float softcap;
};

SliceParams slice_params(const VocabParallelLogits& slice) {
  return {.logits = slice.logits.data(),
          .logits_row_stride = slice.logits.stride(0),
          .logits_column_stride = slice.logits.stride(1),
          .labels = slice.labels.data_as<int64_t>(),
          .label_stride = slice.labels.stride(0),
          .rows = slice.logits.size(0),
          .vocab = slice.logits.size(1),
          .vocab_begin = slice.vocab_begin,
          .scale = float(slice.logits_scale_factor),
          .has_softcap = slice.softcap.has_value(),
          .softcap = float(slice.softcap.value_or(1.0))};
}

// z of column `column` of row `row`, and dz/dlogit.
template <class T>
__device__ __forceinline__ float scaled_logit(const SliceParams& p, int64_t row, int64_t column, float* derivative) {
  return scaled_softcapped_logit(
      load(static_cast<const T*>(p.logits)[row * p.logits_row_stride + column * p.logits_column_stride]), p.scale,
      p.has_softcap ? p.softcap : 0.0f, derivative);
}

template <class T>
__global__ void __launch_bounds__(kThreads) logits_max_kernel(const SliceParams p, float* row_max) {
  __shared__ float scratch[kThreads];
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    if (p.labels[row * p.label_stride] < 0) {
      if (threadIdx.x == 0) row_max[row] = 0.0f;
      continue;
    }
    float maximum = -INFINITY;
    for (int64_t column = threadIdx.x; column < p.vocab; column += blockDim.x)
      maximum = fmaxf(maximum, scaled_logit<T>(p, row, column, nullptr));
    maximum = block_reduce_in_thread_order(maximum, scratch, /*maximum=*/true);
    if (threadIdx.x == 0) row_max[row] = maximum;
  }
}

// sums[row] = sum of exp(z - row_max), sums[rows + row] = z of the label when this slice holds it, else 0.
template <class T>
__global__ void __launch_bounds__(kThreads) logits_sums_kernel(const SliceParams p, const float* row_max, float* sums) {
  __shared__ float scratch[kThreads];
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t label = p.labels[row * p.label_stride];
    if (label < 0) {
      if (threadIdx.x == 0) sums[row] = sums[p.rows + row] = 0.0f;
      continue;
    }
    const float maximum = row_max[row];
    float sum = 0.0f;
    for (int64_t column = threadIdx.x; column < p.vocab; column += blockDim.x)
      sum += expf(scaled_logit<T>(p, row, column, nullptr) - maximum);
    sum = block_reduce_in_thread_order(sum, scratch, /*maximum=*/false);
    if (threadIdx.x == 0) {
      sums[row] = sum;
      const int64_t column = label - p.vocab_begin;
      sums[p.rows + row] = column >= 0 && column < p.vocab ? scaled_logit<T>(p, row, column, nullptr) : 0.0f;
    }
  }
}

struct FinishParams {
  const float* row_max;
  const float* sums;
  void* grad;  // (rows, vocab slice) T, or nullptr
  int64_t grad_row_stride;
  int64_t grad_column_stride;
  float* row_losses;    // (rows)
  float* row_z_losses;  // (rows), or nullptr without z-loss
  float label_weight;
  float z_loss_weight;
};

template <class T>
__global__ void __launch_bounds__(kThreads) cross_entropy_kernel(const SliceParams p, const FinishParams f) {
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t label = p.labels[row * p.label_stride];
    T* grad = static_cast<T*>(f.grad);
    if (label < 0) {
      if (threadIdx.x == 0) {
        f.row_losses[row] = 0.0f;
        if (f.row_z_losses != nullptr) f.row_z_losses[row] = 0.0f;
      }
      if (grad != nullptr)
        for (int64_t column = threadIdx.x; column < p.vocab; column += blockDim.x)
          grad[row * f.grad_row_stride + column * f.grad_column_stride] = store<T>(0.0f);
      continue;
    }
    const float logsumexp = f.row_max[row] + logf(f.sums[row]);
    if (threadIdx.x == 0) {
      f.row_losses[row] = logsumexp - f.sums[p.rows + row];
      if (f.row_z_losses != nullptr) f.row_z_losses[row] = logsumexp * logsumexp;
    }
    if (grad == nullptr) continue;
    // d/dz_k [w_l (lse - z_y) + w_z lse^2] = w_l (softmax_k - [k == y]) + w_z 2 lse softmax_k, on this slice. Each
    // thread reads its logits before it writes their gradients (grad may be the logits).
    const int64_t label_column = label - p.vocab_begin;
    for (int64_t column = threadIdx.x; column < p.vocab; column += blockDim.x) {
      float derivative = 0.0f;
      const float softmax = expf(scaled_logit<T>(p, row, column, &derivative) - logsumexp);
      float grad_z = f.label_weight * (softmax - (column == label_column ? 1.0f : 0.0f));
      if (f.row_z_losses != nullptr) grad_z += f.z_loss_weight * 2.0f * logsumexp * softmax;
      grad[row * f.grad_row_stride + column * f.grad_column_stride] = store<T>(grad_z * derivative);
    }
  }
}

std::optional<std::string> supports_slice(const VocabParallelLogits& slice) {
  return cuda_floating_reason("logits", slice.logits);
}

std::optional<std::string> supports_max(const VocabParallelMaxArgs& args) { return supports_slice(args.slice); }
std::optional<std::string> supports_sums(const VocabParallelSumsArgs& args) { return supports_slice(args.slice); }
std::optional<std::string> supports_cross_entropy(const VocabParallelCrossEntropyArgs& args) {
  if (auto reason = supports_slice(args.slice)) return reason;
  if (args.z_loss_sum != nullptr && args.z_loss_sum->dtype() != args.label_loss_sum.dtype())
    return fmt::format("z_loss_sum has dtype {}, label_loss_sum {}; they must match",
                       dtype_name(args.z_loss_sum->dtype()), dtype_name(args.label_loss_sum.dtype()));
  return std::nullopt;
}

void logits_max_rows(const VocabParallelMaxArgs& args) {
  const SliceParams p = slice_params(args.slice);
  if (p.rows == 0) return;
  LaunchScope scope("vocab_parallel_logits_max", args.slice.logits.device(), args.stream);
  visit_floating(args.slice.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    logits_max_kernel<T><<<grid_for(p.rows, 1, scope), kThreads, 0, scope.stream()>>>(p, args.row_max.data_as<float>());
  });
  scope.check_launch();
}

void logits_sums_rows(const VocabParallelSumsArgs& args) {
  const SliceParams p = slice_params(args.slice);
  if (p.rows == 0) return;
  LaunchScope scope("vocab_parallel_logits_sums", args.slice.logits.device(), args.stream);
  visit_floating(args.slice.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    logits_sums_kernel<T><<<grid_for(p.rows, 1, scope), kThreads, 0, scope.stream()>>>(
        p, args.row_max.data_as<float>(), args.sums.data_as<float>());
  });
  scope.check_launch();
}

void cross_entropy_rows(const VocabParallelCrossEntropyArgs& args) {
  const SliceParams p = slice_params(args.slice);
  if (p.rows == 0) return;
  const Device device = args.slice.logits.device();
  LaunchScope scope("vocab_parallel_cross_entropy", device, args.stream);
  Tensor row_losses = Tensor::empty(Shape{p.rows}, DType::float32, device, scope.tensor_stream());
  Tensor row_z_losses;
  if (args.z_loss_sum != nullptr) row_z_losses = Tensor::empty(Shape{p.rows}, DType::float32, device, scope.tensor_stream());
  const FinishParams f{.row_max = args.row_max.data_as<float>(),
                       .sums = args.sums.data_as<float>(),
                       .grad = args.grad_logits != nullptr ? args.grad_logits->data() : nullptr,
                       .grad_row_stride = args.grad_logits != nullptr ? args.grad_logits->stride(0) : 0,
                       .grad_column_stride = args.grad_logits != nullptr ? args.grad_logits->stride(1) : 0,
                       .row_losses = row_losses.data_as<float>(),
                       .row_z_losses = args.z_loss_sum != nullptr ? row_z_losses.data_as<float>() : nullptr,
                       .label_weight = float(args.label_weight),
                       .z_loss_weight = float(args.z_loss_weight)};
  visit_floating(args.slice.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    cross_entropy_kernel<T><<<grid_for(p.rows, 1, scope), kThreads, 0, scope.stream()>>>(p, f);
  });
  scope.check_launch();
  add_row_loss_sums(f.row_losses, f.row_z_losses, p.rows, args.label_loss_sum, args.z_loss_sum, scope);
}

}  // namespace

FLM_REGISTER_KERNEL(VocabParallelLogitsMax, DeviceType::cuda, "rows", /*priority=*/100, KernelKind::baseline,
                    &supports_max, &logits_max_rows, "one block per row, maximum in thread order");
FLM_REGISTER_KERNEL(VocabParallelLogitsSums, DeviceType::cuda, "rows", /*priority=*/100, KernelKind::baseline,
                    &supports_sums, &logits_sums_rows, "one block per row, sum of exponentials in thread order");
FLM_REGISTER_KERNEL(VocabParallelCrossEntropy, DeviceType::cuda, "rows", /*priority=*/100, KernelKind::baseline,
                    &supports_cross_entropy, &cross_entropy_rows,
                    "one block per row: the slice's gradient; per-row losses summed in a fixed order");

}  // namespace fast_llm::kernels::cuda
