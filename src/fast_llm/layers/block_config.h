// Base of every block-like config (decoder blocks, mixers, MLPs, block sequences, embeddings, head), as Fast-LLM's
// BlockConfig: a learning-rate scale that multiplies down the tree. As a `type:`-selected field it defaults to
// `decoder`, the only block type.
#pragma once

#include <optional>
#include <string_view>

#include "fast_llm/config/config.h"

namespace fast_llm::layers {

struct BlockConfig : config::Config {
  static constexpr std::string_view kDefaultType = "decoder";
  std::optional<double> lr_scale;
  void visit(config::Visitor& v) override;
};

}  // namespace fast_llm::layers
