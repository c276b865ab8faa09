// Parameters: the gradient's first accumulation of a step (parameter.h).
#include "fast_llm/layers/parameter.h"

#include "fast_llm/core/error.h"
#include "fast_llm/tensor/stream.h"

namespace fast_llm::layers {

void Parameter::start_grad(Stream stream) {
  if (grad_started) return;
  FLM_ASSERT(grad.is_contiguous(), "parameter {}: its gradient is not contiguous", meta.name);
  set_bytes(grad.data(), grad.device(), 0, grad.nbytes(), stream);
  grad_started = true;
}

}  // namespace fast_llm::layers
