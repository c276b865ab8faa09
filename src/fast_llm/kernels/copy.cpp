// The contracts of fill, copy and cast (kernels/copy.h), checked once per call by the entry functions, and the
// device-crossing path of copy.
#include "fast_llm/kernels/copy.h"

namespace fast_llm::kernels {

void check_fill(const FillArgs& args) { FLM_CHECK(args.tensor.defined(), "fill", "tensor is undefined"); }

void check_copy(const CopyArgs& args) {
  FLM_CHECK(args.source.defined() && args.destination.defined(), "copy", "source and destination must be defined");
  FLM_CHECK(args.source.shape() == args.destination.shape(), "copy", "source has shape {}, destination {}",
            args.source.shape().str(), args.destination.shape().str());
  FLM_CHECK(args.source.dtype() == args.destination.dtype(), "copy",
            "source has dtype {}, destination {} (use cast to convert)", dtype_name(args.source.dtype()),
            dtype_name(args.destination.dtype()));
}

void check_cast(const CastArgs& args) {
  FLM_CHECK(args.source.defined() && args.destination.defined(), "cast", "source and destination must be defined");
  FLM_CHECK(args.source.shape() == args.destination.shape(), "cast", "source has shape {}, destination {}",
            args.source.shape().str(), args.destination.shape().str());
  FLM_CHECK(args.source.device() == args.destination.device(), "cast",
            "source is on {}, destination on {} (copy to the destination's device first)",
            args.source.device().str(), args.destination.device().str());
}

void copy(const CopyArgs& args) {
  check_copy(args);
  if (args.source.device() == args.destination.device()) {
    dispatch<Copy>(args, args.destination.device());
    return;
  }
  // Across devices the copy engine moves bytes; gathering a strided view is a same-device copy first.
  FLM_CHECK(args.source.is_contiguous() && args.destination.is_contiguous(), "copy",
            "a copy from {} to {} needs contiguous tensors (copy into a contiguous tensor on the same device first)",
            args.source.device().str(), args.destination.device().str());
  args.destination.copy_bytes_from(args.source, args.stream);
}

}  // namespace fast_llm::kernels
