// Shared set-up of the engine tests: configs for a single CPU process computing in fp64, and host access to the
// flat buffers of the test model.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/test_model.h"
#include "fast_llm/engine/distributed/config.h"
#include "fast_llm/engine/multi_stage/config.h"
#include "fast_llm/engine/multi_stage/multi_stage.h"
#include "models/config_test_util.h"

namespace fast_llm::testing {

inline std::string cpu_distributed_yaml(int seed = 1234, const std::string& compute = "float64",
                                        const std::string& optimization = "float64") {
  return "{compute_dtype: " + compute + ", optimization_dtype: " + optimization +
         ", use_cuda: false, world_size: 1, rank: 0, local_world_size: 1, seed: " + std::to_string(seed) + "}";
}

inline engine::DistributedConfig cpu_distributed(int seed = 1234, const std::string& compute = "float64",
                                                 const std::string& optimization = "float64") {
  return load_config<engine::DistributedConfig>(cpu_distributed_yaml(seed, compute, optimization), "model.distributed");
}

inline engine::MultiStageConfig multi_stage_config(const std::string& yaml = "{}") {
  return load_config<engine::MultiStageConfig>(yaml, "model.multi_stage");
}

// A copy of a tensor's values as doubles (CPU, contiguous, fp64/fp32/bf16).
inline std::vector<double> values(const Tensor& tensor) {
  std::vector<double> result;
  Tensor flat = tensor.is_contiguous() ? tensor.flatten() : tensor;
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const int64_t index[] = {i};
    result.push_back(flat.item_as_double(index));
  }
  return result;
}

}  // namespace fast_llm::testing
