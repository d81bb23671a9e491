#pragma once
// tokenizer.json "post_processor" for a single sequence with add_special_tokens: null and
// ByteLevel add nothing (ByteLevel only trims offsets); TemplateProcessing's "single" template
// puts its special tokens' ids around the sequence ($A), e.g. a BOS in front; Sequence applies
// each in turn. Others (BertProcessing, RobertaProcessing, …) are refused, naming them.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity::tokenizer {

class PostProcessor {
 public:
  static PostProcessor from_json(const nlohmann::json& j);
  std::vector<int32_t> apply(std::vector<int32_t> ids) const;
  // The first id the template puts before the sequence, if any (a BOS when no config names one).
  std::optional<int32_t> leading_id() const;

 private:
  struct Item {
    bool sequence;             // $A
    std::vector<int32_t> ids;  // a special token's ids
  };
  std::vector<std::vector<Item>> templates_;  // one per TemplateProcessing, in order
};

}  // namespace parity::tokenizer
