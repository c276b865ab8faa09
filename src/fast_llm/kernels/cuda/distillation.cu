// CUDA variant "rows" of distillation_forward_backward (kernels/distillation.h) and of
// activation_distillation_forward_backward (kernels/activation_distillation.h): one block per row (a grid-stride loop
// over rows), fp32 math, the model's values of float32, bfloat16 or float16 with the last dimension contiguous, the
// teacher's logits of float32 (the reference models' logits) and its activations of any of those dtypes.
//
// Distillation reads a row four times from device memory (the two maxima, the two sums, the loss, the gradient): a
// plain version for correctness, to be fused into the label loss's single pass (kernels/cuda/cross_entropy.cu) once a
// GPU can measure it. Every reduction goes through shared memory in a fixed order and per-row losses are summed by
// one block in row order (fp64), so results are bitwise reproducible. The gradient may be the logits themselves: a
// thread reads each element of its row before it writes it, and the last pass only reads what it writes.
#include "fast_llm/kernels/cuda/common.cuh"

#include "fast_llm/kernels/activation_distillation.h"
#include "fast_llm/kernels/distillation.h"

namespace fast_llm::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__device__ float student_logit(const T* row, int64_t column, float scale, float softcap, float* derivative) {
  return scaled_softcapped_logit(load(row[column]), scale, softcap, derivative);
}

struct DistillationParams {
  const void* logits;
  int64_t logits_stride;
  const float* targets;  // (rows, vocab) contiguous
  const int64_t* labels;
  int64_t label_stride;
  void* grad;
  int64_t grad_stride;
  float* row_losses;  // (rows)
  int64_t rows, vocab;
  int loss_type;  // DistillationLossType
  float scale, target_scale, softcap, weight;
  bool accumulate;
};

template <class T>
__global__ void distillation_rows(DistillationParams p) {
  __shared__ float scratch[kThreads];
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* logits = static_cast<const T*>(p.logits) + row * p.logits_stride;
    const float* targets = p.targets + row * p.vocab;
    T* grad = p.grad != nullptr ? static_cast<T*>(p.grad) + row * p.grad_stride : nullptr;
    const int64_t label = p.labels[row * p.label_stride];
    if (label < 0 || label >= p.vocab) {
      if (grad != nullptr && !p.accumulate)
        for (int64_t column = threadIdx.x; column < p.vocab; column += kThreads) grad[column] = store<T>(0.0f);
      if (threadIdx.x == 0) p.row_losses[row] = 0.0f;
      continue;
    }
    float max_z = -INFINITY, max_t = -INFINITY;
    for (int64_t column = threadIdx.x; column < p.vocab; column += kThreads) {
      max_z = fmaxf(max_z, student_logit(logits, column, p.scale, p.softcap, nullptr));
      max_t = fmaxf(max_t, targets[column] * p.target_scale);
    }
    max_z = block_reduce_in_thread_order(max_z, scratch, true);
    max_t = block_reduce_in_thread_order(max_t, scratch, true);
    float sum_z = 0.0f, sum_t = 0.0f;
    for (int64_t column = threadIdx.x; column < p.vocab; column += kThreads) {
      sum_z += expf(student_logit(logits, column, p.scale, p.softcap, nullptr) - max_z);
      sum_t += expf(targets[column] * p.target_scale - max_t);
    }
    const float lse_z = max_z + logf(block_reduce_in_thread_order(sum_z, scratch, false));
    const float lse_t = max_t + logf(block_reduce_in_thread_order(sum_t, scratch, false));
    float loss = 0.0f;
    for (int64_t column = threadIdx.x; column < p.vocab; column += kThreads) {
      const float log_q = student_logit(logits, column, p.scale, p.softcap, nullptr) - lse_z;
      const float log_p = targets[column] * p.target_scale - lse_t;
      if (p.loss_type == int(DistillationLossType::cross_entropy)) loss -= expf(log_p) * log_q;
      else if (p.loss_type == int(DistillationLossType::forward_kl)) loss += expf(log_p) * (log_p - log_q);
      else loss += expf(log_q) * (log_q - log_p);
    }
    loss = block_reduce_in_thread_order(loss, scratch, false);
    if (threadIdx.x == 0) p.row_losses[row] = loss;
    if (grad == nullptr) continue;
    for (int64_t column = threadIdx.x; column < p.vocab; column += kThreads) {
      float derivative;
      const float log_q = student_logit(logits, column, p.scale, p.softcap, &derivative) - lse_z;
      const float log_p = targets[column] * p.target_scale - lse_t;
      const float q = expf(log_q);
      const float grad_z = p.loss_type == int(DistillationLossType::reverse_kl) ? q * (log_q - log_p - loss)
                                                                                 : q - expf(log_p);
      float value = p.weight * grad_z * derivative;
      if (p.accumulate) value += load(grad[column]);
      grad[column] = store<T>(value);
    }
  }
}

struct ActivationParams {
  const void* student;
  const void* teacher;  // (rows, hidden) contiguous
  void* grad;            // (rows, hidden) contiguous, or nullptr
  float* row_losses;
  int64_t rows, hidden;
  float weight;
};

template <class T, class Teacher>
__global__ void activation_distillation_rows(ActivationParams p) {
  __shared__ float scratch[kThreads];
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* student = static_cast<const T*>(p.student) + row * p.hidden;
    const Teacher* teacher = static_cast<const Teacher*>(p.teacher) + row * p.hidden;
    float squared = 0.0f;
    for (int64_t column = threadIdx.x; column < p.hidden; column += kThreads) {
      const float difference = load(student[column]) - load(teacher[column]);
      squared += difference * difference;
    }
    const float norm = sqrtf(block_reduce_in_thread_order(squared, scratch, false));
    if (threadIdx.x == 0) p.row_losses[row] = norm;
    if (p.grad == nullptr) continue;
    T* grad = static_cast<T*>(p.grad) + row * p.hidden;
    for (int64_t column = threadIdx.x; column < p.hidden; column += kThreads)
      grad[column] =
          store<T>(norm > 0.0f ? p.weight * (load(student[column]) - load(teacher[column])) / norm : 0.0f);
  }
}

// loss_sum += sum of row_losses, in row order (fp64), by one thread.
template <class Sum>
__global__ void add_row_losses(const float* row_losses, int64_t rows, Sum* loss_sum) {
  double total = 0.0;
  for (int64_t row = 0; row < rows; ++row) total += double(row_losses[row]);
  *loss_sum = Sum(double(*loss_sum) + total);
}

void add_losses(const Tensor& row_losses, int64_t rows, Tensor& loss_sum, const LaunchScope& scope) {
  if (loss_sum.dtype() == DType::float64)
    add_row_losses<<<1, 1, 0, scope.stream()>>>(row_losses.data_as<float>(), rows, loss_sum.data_as<double>());
  else
    add_row_losses<<<1, 1, 0, scope.stream()>>>(row_losses.data_as<float>(), rows, loss_sum.data_as<float>());
  scope.check_launch();
}

std::optional<std::string> supports_distillation(const DistillationArgs& args) {
  if (auto reason = cuda_floating_reason("logits", args.logits)) return reason;
  if (auto reason = inner_contiguous_reason("logits", args.logits)) return reason;
  if (auto reason = float32_reason("target_logits", args.target_logits)) return reason;
  if (auto reason = contiguous_reason("target_logits", args.target_logits)) return reason;
  if (args.grad_logits != nullptr) return inner_contiguous_reason("grad_logits", *args.grad_logits);
  return std::nullopt;
}

void distillation_rows_launch(const DistillationArgs& args) {
  const int64_t rows = args.logits.size(0);
  if (rows == 0) return;
  LaunchScope scope("distillation_forward_backward", args.logits.device(), args.stream);
  Tensor row_losses = Tensor::empty(Shape{rows}, DType::float32, scope.device(), scope.tensor_stream());
  const DistillationParams params{
      .logits = args.logits.data(),
      .logits_stride = row_stride(args.logits),
      .targets = args.target_logits.data_as<float>(),
      .labels = args.labels.data_as<int64_t>(),
      .label_stride = args.labels.stride(0),
      .grad = args.grad_logits != nullptr ? args.grad_logits->data() : nullptr,
      .grad_stride = args.grad_logits != nullptr ? row_stride(*args.grad_logits) : 0,
      .row_losses = row_losses.data_as<float>(),
      .rows = rows,
      .vocab = args.logits.size(1),
      .loss_type = int(args.loss_type),
      .scale = float(args.logits_scale_factor),
      .target_scale = float(args.logits_scale_factor / args.temperature),
      .softcap = float(args.softcap.value_or(0.0)),
      .weight = float(args.weight),
      .accumulate = args.accumulate_gradient};
  const unsigned blocks = unsigned(std::min<int64_t>(rows, int64_t(scope.multiprocessors()) * 8));
  visit_floating(args.logits.dtype(), [&]<class T>(std::type_identity<T>) {
    distillation_rows<T><<<blocks, kThreads, 0, scope.stream()>>>(params);
  });
  scope.check_launch();
  add_losses(row_losses, rows, args.loss_sum, scope);
}

std::optional<std::string> supports_activation_distillation(const ActivationDistillationArgs& args) {
  if (auto reason = cuda_floating_reason("student", args.student)) return reason;
  if (auto reason = contiguous_reason("student", args.student)) return reason;
  if (auto reason = cuda_floating_reason("teacher", args.teacher)) return reason;
  if (auto reason = contiguous_reason("teacher", args.teacher)) return reason;
  if (args.grad != nullptr) return contiguous_reason("grad", *args.grad);
  return std::nullopt;
}

void activation_distillation_rows_launch(const ActivationDistillationArgs& args) {
  const int64_t rows = args.student.size(0);
  if (rows == 0) return;
  LaunchScope scope("activation_distillation_forward_backward", args.student.device(), args.stream);
  Tensor row_losses = Tensor::empty(Shape{rows}, DType::float32, scope.device(), scope.tensor_stream());
  const ActivationParams params{.student = args.student.data(),
                                .teacher = args.teacher.data(),
                                .grad = args.grad != nullptr ? args.grad->data() : nullptr,
                                .row_losses = row_losses.data_as<float>(),
                                .rows = rows,
                                .hidden = args.student.size(1),
                                .weight = float(args.weight)};
  const unsigned blocks = unsigned(std::min<int64_t>(rows, int64_t(scope.multiprocessors()) * 8));
  visit_floating(args.student.dtype(), [&]<class T>(std::type_identity<T>) {
    visit_floating(args.teacher.dtype(), [&]<class Teacher>(std::type_identity<Teacher>) {
      activation_distillation_rows<T, Teacher><<<blocks, kThreads, 0, scope.stream()>>>(params);
    });
  });
  scope.check_launch();
  add_losses(row_losses, rows, args.loss_sum, scope);
}

}  // namespace

FLM_REGISTER_KERNEL(DistillationForwardBackward, DeviceType::cuda, "rows", /*priority=*/100, KernelKind::baseline,
                    &supports_distillation, &distillation_rows_launch,
                    "one block per row, four passes over the row, fp32 math; float32 teacher logits");
FLM_REGISTER_KERNEL(ActivationDistillationForwardBackward, DeviceType::cuda, "rows", /*priority=*/100,
                    KernelKind::baseline, &supports_activation_distillation, &activation_distillation_rows_launch,
                    "one block per token, fp32 math");

}  // namespace fast_llm::kernels::cuda
