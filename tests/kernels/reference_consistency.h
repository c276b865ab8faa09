// Runs a consistency problem (kernels/consistency.h) against every other variant on the CPU and, where a GPU is
// visible, on CUDA; used by the consistency tests of the ops whose references live in kernels/cpu/{normalization,
// rotary, embedding, pointwise}.cpp.
#pragma once

#include <gtest/gtest.h>

#include "kernels/consistency.h"

namespace fast_llm::kernels::testing {

// `must_support`: the layouts and dtypes every variant of the op is expected to take (training dtypes, contiguous
// tensors); elsewhere a variant may decline with a reason.
template <class Op>
void check_variants_on_all_devices(const ConsistencyProblem<Op>& problem, bool must_support) {
  for (DeviceType device : {DeviceType::cpu, DeviceType::cuda}) {
    if (device == DeviceType::cuda && !have_cuda_device()) continue;
    const ConsistencyReport report = check_variants(problem, device);
    if (!must_support) continue;
    for (const VariantOutcome& outcome : report)
      EXPECT_FALSE(outcome.unsupported.has_value())
          << outcome.id << " declines " << problem.name << ": " << outcome.unsupported.value_or("");
  }
}

}  // namespace fast_llm::kernels::testing
