// The decoder: a sequence of blocks (`decoder:`), selected by `type:` (default `fixed`), as Fast-LLM's
// BlockSequenceConfig: `fixed` repeats one block `num_blocks` times; `pattern` names several blocks and repeats the
// list of names `pattern` until there are `num_blocks` (e.g. sliding/full attention alternation).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fast_llm/config/config.h"
#include "fast_llm/layers/block_config.h"

namespace fast_llm::layers {

struct BlockSequenceConfig : BlockConfig {
  static constexpr std::string_view kDefaultType = "fixed";
  virtual int block_count() const = 0;
  // Configuration of block `index` (0-based, < block_count()).
  virtual const BlockConfig& block_at(int index) const = 0;
  // The last block (copied for multi-token prediction heads).
  const BlockConfig& last_block() const { return block_at(block_count() - 1); }
};

struct FixedBlockSequenceConfig : BlockSequenceConfig {
  config::Dynamic<BlockConfig> block;
  int num_blocks = 12;
  void visit(config::Visitor& v) override;
  int block_count() const override { return num_blocks; }
  const BlockConfig& block_at(int index) const override;
};

struct PatternBlockSequenceConfig : BlockSequenceConfig {
  std::map<std::string, config::Dynamic<BlockConfig>> blocks;
  std::vector<std::string> pattern;
  int num_blocks = 12;
  void visit(config::Visitor& v) override;
  int block_count() const override { return num_blocks; }
  const BlockConfig& block_at(int index) const override;
  // Name of block `index`: the pattern repeated.
  const std::string& block_name(int index) const;

 protected:
  void check() const override;
};

}  // namespace fast_llm::layers
