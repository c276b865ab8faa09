// Post-processor types of tokenizer.json (see post_processors.h).
#include "fast_llm/tokenizer/post_processors.h"

namespace fast_llm::tokenizer {
namespace {

// The ids to put before and after the sequence.
class Wrap final : public PostProcessor {
 public:
  Wrap(std::vector<int32_t> before, std::vector<int32_t> after)
      : before_(std::move(before)), after_(std::move(after)) {}
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), before_.begin(), before_.end());
    ids.insert(ids.end(), after_.begin(), after_.end());
  }

 private:
  std::vector<int32_t> before_, after_;
};

class Sequence final : public PostProcessor {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PostProcessor>> steps) : steps_(std::move(steps)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& step : steps_) step->process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

std::unique_ptr<PostProcessor> make_template(const Json& node, const JsonPlace& place) {
  const Json& single = json_required(node, "single", place);
  if (!single.is_array()) json_error(place / "single", "expected an array");
  const Json& special_tokens = json_present(node, "special_tokens") ? node.at("special_tokens") : Json::object();
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const JsonPlace item_place = (place / "single")[i];
    const Json& item = single[i];
    if (json_present(item, "Sequence")) {
      const std::string id = json_string(item.at("Sequence"), "id", item_place / "Sequence");
      if (id != "A") json_error(item_place / "Sequence" / "id", fmt::format("expected \"A\", got \"{}\"", id));
      if (seen_sequence) json_unsupported(item_place, "a single template with the sequence twice");
      seen_sequence = true;
    } else if (json_present(item, "SpecialToken")) {
      const std::string name = json_string(item.at("SpecialToken"), "id", item_place / "SpecialToken");
      const JsonPlace token_place = place / "special_tokens" / name;
      if (!special_tokens.contains(name)) json_error(token_place, "missing (named by the single template)");
      const Json& ids = json_required(special_tokens.at(name), "ids", token_place);
      if (!ids.is_array()) json_error(token_place / "ids", "expected an array");
      for (size_t k = 0; k < ids.size(); ++k)
        (seen_sequence ? after : before).push_back(json_token_id(ids[k], (token_place / "ids")[k]));
    } else {
      json_error(item_place, fmt::format("expected {{\"Sequence\": ...}} or {{\"SpecialToken\": ...}}, got {}",
                                         item.dump()));
    }
  }
  if (!seen_sequence) json_unsupported(place / "single", "a single template without the sequence");
  return std::make_unique<Wrap>(std::move(before), std::move(after));
}

// RobertaProcessing and BertProcessing: {"cls": [token, id], "sep": [token, id]}.
std::unique_ptr<PostProcessor> make_cls_sep(const Json& node, const JsonPlace& place) {
  const auto id_of = [&](const char* key) {
    const Json& pair = json_required(node, key, place);
    if (!pair.is_array() || pair.size() != 2) json_error(place / key, "expected [token, id]");
    return json_token_id(pair[1], (place / key)[1]);
  };
  return std::make_unique<Wrap>(std::vector<int32_t>{id_of("cls")}, std::vector<int32_t>{id_of("sep")});
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const Json& node, const JsonPlace& place) {
  if (node.is_null()) return nullptr;
  const std::string type = json_string(node, "type", place);
  if (type == "TemplateProcessing") return make_template(node, place);
  if (type == "RobertaProcessing" || type == "BertProcessing") return make_cls_sep(node, place);
  if (type == "ByteLevel") return std::make_unique<Sequence>(std::vector<std::unique_ptr<PostProcessor>>{});
  if (type == "Sequence") {
    const Json& list = json_required(node, "processors", place);
    if (!list.is_array()) json_error(place / "processors", "expected an array");
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      auto step = make_post_processor(list[i], (place / "processors")[i]);
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  json_unsupported(place / "type", fmt::format("post_processor type \"{}\"", type));
}

}  // namespace fast_llm::tokenizer
