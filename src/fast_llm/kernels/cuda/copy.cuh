// CUDA launchers of fill / copy / cast (kernels/copy.h), registered as `fill:cuda:elementwise`, ... in copy.cu.
#pragma once

#include "fast_llm/kernels/copy.h"

namespace fast_llm::kernels::cuda {

void fill_cuda(const FillArgs& args);
void copy_cuda(const CopyArgs& args);
void cast_cuda(const CastArgs& args);

}  // namespace fast_llm::kernels::cuda
