#pragma once
// The pre-tokenizers of byte-level BPE models (tokenizer.json "pre_tokenizer"):
//   ByteLevel {add_prefix_space, use_regex, trim_offsets}: optional leading space, the GPT-2 split
//     regex, then every byte mapped to its printable character;
//   Split {pattern: {"Regex"|"String"}, behavior, invert};
//   Digits {individual_digits};
//   Sequence {pretokenizers: [...]} of these; null.
// Anything else is refused with an error naming it. trim_offsets only affects offsets, which
// parity does not report, so any value is accepted.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity::tokenizer {

class PreTokenizer {
 public:
  // `j` may be null (no pre-tokenization). Throws parity::Error naming an unsupported part.
  static std::unique_ptr<PreTokenizer> from_json(const nlohmann::json& j);
  ~PreTokenizer();

  // Splits one piece of normalized text into the words the model encodes.
  std::vector<std::string> apply(const std::string& text) const;

 private:
  struct Step;
  PreTokenizer();
  std::vector<Step> steps_;
};

}  // namespace parity::tokenizer
