#pragma once
// tokenizer.json "added_tokens": tokens matched in the text before pre-tokenization, as Hugging
// Face's AddedVocabulary does: first those with normalized=false on the raw text, then those with
// normalized=true on each normalized remaining piece; leftmost-longest matches; single_word,
// lstrip and rstrip applied with Unicode \w and White_Space. `special` marks tokens that
// decode(skip_special_tokens) drops.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity::tokenizer {

class BpeModel;
class Normalizer;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = true;
};

// A piece of the input: text still to pre-tokenize, or an added token already found.
struct Piece {
  std::string text;
  std::optional<int32_t> id;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // Ids are checked against what HF assigns on load (model vocab id, else the next free id), so a
  // file whose ids HF would silently change is refused instead of giving other ids.
  AddedVocabulary(const nlohmann::json& list, const BpeModel& model, const Normalizer& normalizer);
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer& normalizer);

  std::vector<Piece> split(std::string_view text, const Normalizer& normalizer) const;

  std::optional<int32_t> token_to_id(std::string_view content) const;
  const AddedToken* by_id(int32_t id) const;
  bool is_special(std::string_view content) const { return special_.count(std::string(content)) != 0; }
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  int32_t max_id() const;

 private:
  struct Pattern {
    std::string text;  // content, or its normalized form
    std::size_t token;  // index into tokens_
  };
  struct Matcher {
    // Patterns by first byte, longest first (then in HF's order: specials, then the others).
    std::vector<std::vector<Pattern>> by_first_byte = std::vector<std::vector<Pattern>>(256);
    bool empty = true;
  };
  void index(const Normalizer& normalizer);
  void split_with(const std::string& text, const Matcher& m, std::vector<Piece>& out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, std::size_t> by_content_;
  std::unordered_map<int32_t, std::size_t> by_id_;
  std::unordered_set<std::string> special_;
  Matcher raw_, normalized_;
};

}  // namespace parity::tokenizer
