// Field list of the block base config.
#include "fast_llm/layers/block_config.h"

namespace fast_llm::layers {

using config::Hint;
using config::Visitor;
namespace check = config::check;

void BlockConfig::visit(Visitor& v) {
  v(lr_scale, "lr_scale", "Learning-rate multiplier for everything in this block, combined with the scales inside it.",
    Hint::feature, check::ge(0.0));
}

}  // namespace fast_llm::layers
