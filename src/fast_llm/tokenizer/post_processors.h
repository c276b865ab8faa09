// The post-processors of tokenizer.json (`post_processor`), applied by encode with add_special_tokens to a single
// sequence: TemplateProcessing (its `single` template), RobertaProcessing and BertProcessing (cls, text, sep),
// ByteLevel (offsets only: ids unchanged) and Sequence. Other types are refused by make_post_processor.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fast_llm/tokenizer/json_fields.h"

namespace fast_llm::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void process(std::vector<int32_t>& ids) const = 0;
};

// nullptr for a null post-processor.
std::unique_ptr<PostProcessor> make_post_processor(const Json& node, const JsonPlace& place);

}  // namespace fast_llm::tokenizer
