// Fuzz target: tokenizer.json loading, then encode and decode. The first byte picks the mode:
//   even: the rest is "<tokenizer.json>\0<text>": load it (any part may be refused with a
//         parity::Error), then encode the text and decode the ids;
//   odd:  the rest is text, encoded with two fixed tokenizers (the built-in NeoX-like one with NFC
//         and an added token, and a Granite-like Split-regex one), so the fuzzer spends its time
//         in the pre-tokenizers, BPE and added-token matching rather than in JSON syntax.
// Besides "no crash, only parity::Error", it checks what holds for every tokenizer: ids are
// tokens of the vocabulary, decode is valid UTF-8, and streaming decode (one id at a time, then
// flush) equals decode, with and without special tokens.
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "fuzz_target.h"
#include "tokenizer/builtin_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using parity::tokenizer::StreamDecoder;
using parity::tokenizer::Tokenizer;

void check(bool ok) {
  if (!ok) std::abort();
}

void exercise(const Tokenizer& t, std::string_view text) {
  std::vector<int32_t> ids;
  try {
    // Without the template every id comes from the vocabulary or the added tokens (a template's
    // ids are whatever the file says).
    for (int32_t id : t.encode(text, false)) check(t.id_to_token(id).has_value());
    ids = t.encode(text, true);
  } catch (const parity::Error&) {
    // only invalid UTF-8 (or a regex that gives up) may be refused
    return;
  }
  // Ids from the raw bytes too: decode must take any id, known or not.
  for (std::size_t i = 0; i + 1 < text.size() && i < 64; i += 2)
    ids.push_back(static_cast<int32_t>(((static_cast<unsigned char>(text[i]) << 8) | static_cast<unsigned char>(text[i + 1])) %
                                       (static_cast<int64_t>(t.vocab_size()) + 8)));
  for (bool skip : {false, true}) {
    const std::string whole = t.decode(ids, skip);
    check(parity::tokenizer::utf8::first_invalid(whole) == std::string::npos);
    StreamDecoder sd(t, skip);
    std::string streamed;
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.flush();
    check(streamed == whole);
  }
}

const Tokenizer& builtin_neox() {
  static const std::unique_ptr<Tokenizer> t = [] {
    nlohmann::json j = nlohmann::json::parse(parity::tokenizer::builtin_tokenizer_json(600));
    j["added_tokens"].push_back({{"id", 600}, {"content", "  "}, {"special", false}, {"normalized", true},
                                 {"lstrip", false}, {"rstrip", true}, {"single_word", false}});
    j["added_tokens"].push_back({{"id", 601}, {"content", "ok"}, {"special", false}, {"normalized", true},
                                 {"lstrip", true}, {"rstrip", false}, {"single_word", true}});
    return Tokenizer::from_json(j.dump(), "fuzz neox");
  }();
  return *t;
}

const Tokenizer& granite_like() {
  static const std::unique_ptr<Tokenizer> t = [] {
    nlohmann::json j = nlohmann::json::parse(parity::tokenizer::builtin_tokenizer_json(600));
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = nlohmann::json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
       "behavior": "Isolated", "invert": false},
      {"type": "Digits", "individual_digits": true},
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": false}]})");
    j["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}}})");
    return Tokenizer::from_json(j.dump(), "fuzz granite");
  }();
  return *t;
}

void fuzz_tokenizer(const uint8_t* data, std::size_t size) {
  if (size == 0) return;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 1) {
    exercise(builtin_neox(), rest);
    exercise(granite_like(), rest);
    return;
  }
  const std::size_t nul = rest.find('\0');
  const std::string_view json = rest.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? std::string_view("Hello, world! 123 🙂") : rest.substr(nul + 1);
  std::unique_ptr<Tokenizer> t;
  try {
    t = Tokenizer::from_json(json, "fuzz tokenizer.json");
  } catch (const parity::Error&) {
    return;
  }
  exercise(*t, text);
}

}  // namespace

PARITY_FUZZ_TARGET(tokenizer, fuzz_tokenizer)
