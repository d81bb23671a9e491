#include "tokenizer/post_processor.h"

#include "common/error.h"
#include "tokenizer/json_fields.h"

namespace parity::tokenizer {

PostProcessor PostProcessor::from_json(const nlohmann::json& j) {
  PostProcessor p;
  if (j.is_null()) return p;
  auto parse = [&](auto&& self, const nlohmann::json& node, int depth) -> void {
    const std::string where = "post_processor";
    if (depth > 16) throw Error(where + ": Sequence nested too deeply");
    const std::string type = json_fields::type_of(node, where);
    if (type == "Sequence") {
      for (const auto& sub : json_fields::array_field(node, "processors", where)) self(self, sub, depth + 1);
    } else if (type == "ByteLevel") {
      // offsets only
    } else if (type == "TemplateProcessing") {
      const nlohmann::json& specials = json_fields::object_field(node, "special_tokens", where);
      std::vector<Item> items;
      bool has_sequence = false;
      for (const auto& piece : json_fields::array_field(node, "single", where)) {
        if (piece.is_object() && piece.contains("Sequence")) {
          const nlohmann::json& s = piece["Sequence"];
          const std::string id = json_fields::string_field(s, "id", where + " single Sequence");
          if (id != "A") throw Error(where + ": the single template uses sequence '" + id + "' (only A exists)");
          items.push_back({true, {}});
          has_sequence = true;
        } else if (piece.is_object() && piece.contains("SpecialToken")) {
          const std::string name = json_fields::string_field(piece["SpecialToken"], "id", where + " single SpecialToken");
          auto it = specials.find(name);
          if (it == specials.end()) throw Error(where + ": special token '" + name + "' is not in special_tokens");
          Item item{false, {}};
          for (const auto& v : json_fields::array_field(*it, "ids", where + " special_tokens['" + name + "']"))
            item.ids.push_back(json_fields::id_value(v, where + " special_tokens['" + name + "']"));
          items.push_back(std::move(item));
        } else {
          throw Error(where + ": template piece " + piece.dump() + " is neither Sequence nor SpecialToken");
        }
      }
      if (!has_sequence) throw Error(where + ": the single template has no $A");
      p.templates_.push_back(std::move(items));
    } else {
      throw Error("unsupported post-processor '" + type +
                  "' (parity supports ByteLevel, TemplateProcessing and Sequence of them)");
    }
  };
  parse(parse, j, 0);
  return p;
}

std::vector<int32_t> PostProcessor::apply(std::vector<int32_t> ids) const {
  for (const auto& items : templates_) {
    std::vector<int32_t> out;
    for (const Item& it : items) {
      if (it.sequence)
        out.insert(out.end(), ids.begin(), ids.end());
      else
        out.insert(out.end(), it.ids.begin(), it.ids.end());
    }
    ids = std::move(out);
  }
  return ids;
}

std::optional<int32_t> PostProcessor::leading_id() const {
  if (templates_.empty() || templates_[0].empty()) return std::nullopt;
  const Item& first = templates_[0][0];
  if (first.sequence || first.ids.empty()) return std::nullopt;
  return first.ids[0];
}

}  // namespace parity::tokenizer
