#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "common/error.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/unicode_props.h"
#include "tokenizer/utf8.h"

namespace parity::tokenizer {

namespace {

// The code point that ends s (s valid UTF-8, non-empty).
char32_t last_char(std::string_view s) {
  std::size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return utf8::next(s, i);
}

bool ends_with_word(std::string_view s) { return !s.empty() && unicode::is_word(last_char(s)); }
bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  std::size_t i = 0;
  return unicode::is_word(utf8::next(s, i));
}

// Start of the run of White_Space that ends s.
std::size_t space_leftmost_at_end(std::string_view s) {
  std::size_t end = s.size();
  while (end > 0) {
    std::size_t i = end - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    std::size_t j = i;
    if (!unicode::is_white_space(utf8::next(s, j))) break;
    end = i;
  }
  return end;
}

// Length of the run of White_Space that starts s.
std::size_t space_rightmost_at_start(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = i;
    if (!unicode::is_white_space(utf8::next(s, j))) break;
    i = j;
  }
  return i;
}

}  // namespace

AddedVocabulary::AddedVocabulary(const nlohmann::json& list, const BpeModel& model, const Normalizer& normalizer) {
  if (list.is_null()) return;
  if (!list.is_array()) throw Error("\"added_tokens\" must be an array");
  const int64_t model_size = static_cast<int64_t>(model.size());
  std::optional<int64_t> max_added;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const nlohmann::json& e = list[i];
    AddedToken t;
    t.content = json_fields::string_field(e, "content", where);
    if (utf8::first_invalid(t.content) != std::string::npos) throw Error(where + ": content is not valid UTF-8");
    if (!e.contains("id")) throw Error(where + ": no \"id\"");
    t.id = json_fields::id_value(e["id"], where);
    t.special = json_fields::bool_field(e, "special", where, false);
    t.single_word = json_fields::bool_field(e, "single_word", where, false);
    t.lstrip = json_fields::bool_field(e, "lstrip", where, false);
    t.rstrip = json_fields::bool_field(e, "rstrip", where, false);
    t.normalized = json_fields::bool_field(e, "normalized", where, !t.special);
    if (t.content.empty()) continue;  // HF ignores empty added tokens
    if (by_content_.count(t.content)) throw Error(where + ": '" + t.content + "' is listed twice");
    // The id HF gives this token when it loads the file.
    int64_t expect;
    if (auto mid = model.token_to_id(t.content)) {
      expect = *mid;
    } else if (!max_added) {
      expect = model_size;
    } else {
      expect = (*max_added >= model_size || model_size == 0) ? *max_added + 1 : model_size;
    }
    if (expect != t.id)
      throw Error(where + ": '" + t.content + "' has id " + std::to_string(t.id) +
                  " but Hugging Face tokenizers would give it id " + std::to_string(expect) +
                  " (model vocab id, else the next id after the vocab): inconsistent tokenizer.json");
    if (by_id_.count(t.id)) throw Error(where + ": id " + std::to_string(t.id) + " is used twice");
    max_added = std::max(max_added.value_or(t.id), static_cast<int64_t>(t.id));
    by_content_.emplace(t.content, tokens_.size());
    by_id_.emplace(t.id, tokens_.size());
    if (t.special) special_.insert(t.content);
    tokens_.push_back(std::move(t));
  }
  index(normalizer);
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer& normalizer)
    : tokens_(std::move(tokens)) {
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    by_content_.emplace(tokens_[i].content, i);
    by_id_.emplace(tokens_[i].id, i);
    if (tokens_[i].special) special_.insert(tokens_[i].content);
  }
  index(normalizer);
}

void AddedVocabulary::index(const Normalizer& normalizer) {
  // HF's pattern order: special tokens first, then the others, each in file order.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < tokens_.size(); ++i)
    if (tokens_[i].special) order.push_back(i);
  for (std::size_t i = 0; i < tokens_.size(); ++i)
    if (!tokens_[i].special) order.push_back(i);
  for (std::size_t i : order) {
    const AddedToken& t = tokens_[i];
    Matcher& m = t.normalized ? normalized_ : raw_;
    std::string text = t.normalized ? normalizer.apply(t.content) : t.content;
    if (text.empty()) continue;
    m.by_first_byte[static_cast<unsigned char>(text[0])].push_back({std::move(text), i});
    m.empty = false;
  }
  for (Matcher* m : {&raw_, &normalized_})
    for (auto& list : m->by_first_byte)
      std::stable_sort(list.begin(), list.end(),
                       [](const Pattern& a, const Pattern& b) { return a.text.size() > b.text.size(); });
}

void AddedVocabulary::split_with(const std::string& text, const Matcher& m, std::vector<Piece>& out) const {
  if (m.empty) {
    if (!text.empty()) out.push_back({text, std::nullopt});
    return;
  }
  const std::string_view s = text;
  std::size_t start_offset = 0, pos = 0;
  while (pos < s.size()) {
    // Leftmost-longest, non-overlapping: the longest pattern at the first position with any.
    const Pattern* hit = nullptr;
    for (const Pattern& p : m.by_first_byte[static_cast<unsigned char>(s[pos])])
      if (s.compare(pos, p.text.size(), p.text) == 0) {
        hit = &p;
        break;
      }
    if (!hit) {
      ++pos;
      continue;
    }
    std::size_t start = pos, stop = pos + hit->text.size();
    pos = stop;  // the matcher resumes after the raw match, whatever lstrip/rstrip do below
    const AddedToken& t = tokens_[hit->token];
    if (t.single_word) {
      const bool start_space = start == 0 || !ends_with_word(s.substr(0, start));
      const bool stop_space = stop == s.size() || !starts_with_word(s.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) start = std::max(space_leftmost_at_end(s.substr(0, start)), start_offset);
    if (t.rstrip) stop += space_rightmost_at_start(s.substr(stop));
    if (start_offset < start) out.push_back({std::string(s.substr(start_offset, start - start_offset)), std::nullopt});
    out.push_back({std::string(s.substr(start, stop - start)), t.id});
    start_offset = stop;
  }
  if (start_offset < s.size()) out.push_back({std::string(s.substr(start_offset)), std::nullopt});
}

std::vector<Piece> AddedVocabulary::split(std::string_view text, const Normalizer& normalizer) const {
  std::vector<Piece> first;
  split_with(std::string(text), raw_, first);
  std::vector<Piece> out;
  for (Piece& p : first) {
    if (p.id) {
      out.push_back(std::move(p));
      continue;
    }
    split_with(normalizer.identity() ? p.text : normalizer.apply(p.text), normalized_, out);
  }
  return out;
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

int32_t AddedVocabulary::max_id() const {
  int32_t m = -1;
  for (const AddedToken& t : tokens_) m = std::max(m, t.id);
  return m;
}

}  // namespace parity::tokenizer
