#include "tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include "common/error.h"
#include "tokenizer/json_fields.h"

namespace parity::tokenizer {

std::unique_ptr<Normalizer> Normalizer::from_json(const nlohmann::json& j) {
  auto n = std::make_unique<Normalizer>();
  if (j.is_null()) return n;
  auto parse = [&](auto&& self, const nlohmann::json& node, int depth) -> void {
    if (depth > 16) throw Error("normalizer: Sequence nested too deeply");
    const std::string type = json_fields::type_of(node, "normalizer");
    if (type == "Sequence") {
      for (const auto& sub : json_fields::array_field(node, "normalizers", "normalizer")) self(self, sub, depth + 1);
    } else if (type == "NFC") {
      n->forms_.push_back(Form::NFC);
    } else if (type == "NFD") {
      n->forms_.push_back(Form::NFD);
    } else if (type == "NFKC") {
      n->forms_.push_back(Form::NFKC);
    } else if (type == "NFKD") {
      n->forms_.push_back(Form::NFKD);
    } else {
      throw Error("unsupported normalizer '" + type + "' (parity supports NFC, NFD, NFKC, NFKD and Sequence of them)");
    }
  };
  parse(parse, j, 0);
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string cur(text);
  for (Form f : forms_) {
    UErrorCode err = U_ZERO_ERROR;
    const icu::Normalizer2* n = f == Form::NFC    ? icu::Normalizer2::getNFCInstance(err)
                                : f == Form::NFD  ? icu::Normalizer2::getNFDInstance(err)
                                : f == Form::NFKC ? icu::Normalizer2::getNFKCInstance(err)
                                                  : icu::Normalizer2::getNFKDInstance(err);
    if (U_FAILURE(err)) throw Error(std::string("ICU normalizer unavailable: ") + u_errorName(err));
    std::string out;
    icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(cur.size()));
    n->normalizeUTF8(0, icu::StringPiece(cur.data(), static_cast<int32_t>(cur.size())), sink, nullptr, err);
    if (U_FAILURE(err)) throw Error(std::string("Unicode normalization failed: ") + u_errorName(err));
    cur = std::move(out);
  }
  return cur;
}

}  // namespace parity::tokenizer
