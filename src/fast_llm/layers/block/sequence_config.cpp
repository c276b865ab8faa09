// Field lists of the block sequence configs.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "fast_llm/core/logging.h"
#include "fast_llm/layers/block/sequence_config.h"

namespace fast_llm::layers {

using config::Hint;
using config::Visitor;
namespace check = config::check;

FLM_REGISTER_CONFIG(BlockSequenceConfig, FixedBlockSequenceConfig, "fixed");
FLM_REGISTER_CONFIG(BlockSequenceConfig, PatternBlockSequenceConfig, "pattern");

void FixedBlockSequenceConfig::visit(Visitor& v) {
  BlockSequenceConfig::visit(v);
  v(block, "block", "The block, repeated num_blocks times.", Hint::architecture);
  v(num_blocks, "num_blocks", "Number of blocks.", Hint::architecture, check::ge(0));
}

const BlockConfig& FixedBlockSequenceConfig::block_at(int index) const {
  FLM_ASSERT(index >= 0 && index < num_blocks, "block {} of {}", index, num_blocks);
  return block.get();
}

void PatternBlockSequenceConfig::visit(Visitor& v) {
  BlockSequenceConfig::visit(v);
  v(blocks, "blocks", "The blocks, by name.", Hint::architecture);
  v(pattern, "pattern", "Block names, repeated (and cut) to num_blocks.", Hint::architecture);
  v(num_blocks, "num_blocks", "Number of blocks.", Hint::architecture, check::ge(0));
}

const std::string& PatternBlockSequenceConfig::block_name(int index) const {
  FLM_ASSERT(index >= 0 && index < num_blocks && !pattern.empty(), "block {} of {}", index, num_blocks);
  return pattern[size_t(index) % pattern.size()];
}

const BlockConfig& PatternBlockSequenceConfig::block_at(int index) const { return blocks.at(block_name(index)).get(); }

void PatternBlockSequenceConfig::check() const {
  if (blocks.empty()) fail("blocks", "at least one block is required");
  if (pattern.empty()) fail("pattern", "at least one block name is required");
  std::vector<std::string> missing;
  for (const auto& name : pattern)
    if (!blocks.contains(name) && std::find(missing.begin(), missing.end(), name) == missing.end())
      missing.push_back(name);
  if (!missing.empty())
    fail("pattern", fmt::format("names blocks that are not defined in `blocks`: {}", fmt::join(missing, ", ")));
  std::vector<std::string> unused;
  for (const auto& [name, block] : blocks)
    if (std::find(pattern.begin(), pattern.end(), name) == pattern.end()) unused.push_back(name);
  if (!unused.empty()) log_warning("{}: blocks defined but not used by the pattern: {}", field_path("blocks"),
                                   fmt::join(unused, ", "));
}

}  // namespace fast_llm::layers
