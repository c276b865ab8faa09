// What the CUDA cross_entropy_forward_backward variants share (cross_entropy.cu): the argument checks and the host
// side of a launch: a buffer of per-row losses that a variant's row kernel fills, then summed by one block in a fixed
// order (fp64) and added to the loss sums, so that no variant needs atomics and every one is bitwise reproducible.
// A variant supplies only its row kernel, through `cross_entropy_steps`: "fused" (cross_entropy.cu, rows staged in
// shared memory by bulk copies).
//
// Conventions of the row kernels: z = logits * logits_scale_factor, then softcap * tanh(z / softcap) when a softcap
// is set. Rows whose label is negative are masked: loss 0, zero gradient. A label not below vocab (an error the CPU
// reference reports; checking it here would need the labels on the host) is treated as masked rather than read out of
// bounds. The z-loss is on exactly when z_loss_sum is given. Logits and gradient share a floating dtype (fp32, bf16,
// fp16), their last dimension is contiguous and their row strides are free; the gradient may be the logits tensor
// itself. Labels are int64 with any stride.
#pragma once

#include "fast_llm/kernels/cuda/op_helpers.cuh"

#include <optional>
#include <string>

#include "fast_llm/kernels/cross_entropy.h"

namespace fast_llm::kernels::cuda::cross_entropy {

// What a row kernel writes for each row: lse - z[label] (0 for a masked row), and lse^2 (0 for a masked row).
struct RowLosses {
  float* label;  // (rows)
  float* z;      // (rows), or nullptr without z-loss
};

// Queues a variant's row kernel on `scope`'s stream; called only with checked arguments and at least one row.
using RowLauncher = void (*)(const CrossEntropyArgs& args, const RowLosses& losses, const LaunchScope& scope);

// Why the CUDA variants cannot run `args` (devices, dtypes, layouts), or nothing.
std::optional<std::string> arguments_reason(const CrossEntropyArgs& args);

// The whole op: checks, per-row loss buffers, `launch`, then the sums.
void cross_entropy_steps(const CrossEntropyArgs& args, RowLauncher launch);

}  // namespace fast_llm::kernels::cuda::cross_entropy
