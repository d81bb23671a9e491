#pragma once
// tokenizer.json "normalizer": null, the Unicode normalization forms NFC / NFD / NFKC / NFKD
// (ICU's Normalizer2), or a Sequence of them. GPT-NeoX / Mamba2 tokenizers use NFC; Granite's
// use none. Anything else is refused with an error naming it.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity::tokenizer {

class Normalizer {
 public:
  static std::unique_ptr<Normalizer> from_json(const nlohmann::json& j);  // null → identity
  std::string apply(std::string_view text) const;
  bool identity() const { return forms_.empty(); }

 private:
  enum class Form { NFC, NFD, NFKC, NFKD };
  std::vector<Form> forms_;
};

}  // namespace parity::tokenizer
