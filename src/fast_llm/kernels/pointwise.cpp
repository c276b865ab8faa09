// The contracts of axpy and dropout (kernels/pointwise.h), checked once per call by the entry functions.
#include "fast_llm/kernels/pointwise.h"

#include "fast_llm/kernels/contract.h"

namespace fast_llm::kernels {

void check_axpy(const AxpyArgs& args) {
  const OpContract contract("axpy", args.output.device());
  contract.on_device("output", args.output);
  contract.shape("input", args.input, args.output.shape());
  contract.floating("input", args.input);
  contract.floating("output", args.output);
}

void check_dropout(const DropoutArgs& args) {
  const OpContract contract("dropout", args.tensor.device());
  contract.on_device("tensor", args.tensor);
  contract.floating("tensor", args.tensor);
  FLM_CHECK(args.probability >= 0.0 && args.probability < 1.0, contract.op(), "probability {} is outside [0, 1)",
            args.probability);
}

}  // namespace fast_llm::kernels
