// Adding per-row losses into a head loss's sums on the device, for the CUDA cross-entropy variants (the fused
// whole-vocabulary kernel and the vocabulary-parallel one): one block adds them in a fixed order in fp64, so the sums
// are bitwise reproducible, and the host never waits.
#pragma once

#include "fast_llm/kernels/cuda/common.cuh"

namespace fast_llm::kernels::cuda {

inline constexpr int kRowLossSumThreads = 1024;

// label_loss_sum += sum of row_losses, z_loss_sum += sum of row_z_losses (when not null).
template <class R>
__global__ void __launch_bounds__(kRowLossSumThreads)
    row_loss_sums_kernel(const float* row_losses, const float* row_z_losses, int64_t rows, R* label_loss_sum,
                         R* z_loss_sum) {
  __shared__ double scratch[32];
  double sum = 0.0;
  for (int64_t row = threadIdx.x; row < rows; row += blockDim.x) sum += double(row_losses[row]);
  sum = block_sum_to_thread0(sum, scratch);
  if (threadIdx.x == 0) *label_loss_sum += R(sum);
  if (row_z_losses == nullptr) return;
  __syncthreads();  // scratch is reused
  double z_sum = 0.0;
  for (int64_t row = threadIdx.x; row < rows; row += blockDim.x) z_sum += double(row_z_losses[row]);
  z_sum = block_sum_to_thread0(z_sum, scratch);
  if (threadIdx.x == 0) *z_loss_sum += R(z_sum);
}

// Queues the sums on `scope`'s stream: label_loss_sum (fp32 or fp64) and z_loss_sum (its dtype, or null with
// row_z_losses null).
inline void add_row_loss_sums(const float* row_losses, const float* row_z_losses, int64_t rows, Tensor& label_loss_sum,
                              Tensor* z_loss_sum, const LaunchScope& scope) {
  if (label_loss_sum.dtype() == DType::float64)
    row_loss_sums_kernel<double><<<1, kRowLossSumThreads, 0, scope.stream()>>>(
        row_losses, row_z_losses, rows, label_loss_sum.data_as<double>(),
        z_loss_sum != nullptr ? z_loss_sum->data_as<double>() : nullptr);
  else
    row_loss_sums_kernel<float><<<1, kRowLossSumThreads, 0, scope.stream()>>>(
        row_losses, row_z_losses, rows, label_loss_sum.data_as<float>(),
        z_loss_sum != nullptr ? z_loss_sum->data_as<float>() : nullptr);
  scope.check_launch();
}

}  // namespace fast_llm::kernels::cuda
