#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>

#include "common/error.h"
#include "tokenizer/unicode_props.h"
#include "tokenizer/utf8.h"

namespace parity::tokenizer {

namespace {

constexpr const char* kWordItems = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";

// Rewrites \s \S \w \W to Oniguruma's meaning; everything else is left to PCRE2 (which reports
// its own syntax errors). Inside a character class only the positive forms can be rewritten.
std::string translate(const std::string& p, const std::string& what) {
  const std::string& ws = unicode::white_space_class_items();
  std::string out;
  bool in_class = false;
  std::size_t class_start = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 'Q') {  // \Q…\E is literal text
        const std::size_t end = p.find("\\E", i + 2);
        const std::size_t stop = end == std::string::npos ? p.size() : end + 2;
        out.append(p, i, stop - i);
        i = stop - 1;
        continue;
      }
      const bool neg = e == 'S' || e == 'W';
      if (e == 's' || e == 'S' || e == 'w' || e == 'W') {
        const std::string items = (e == 's' || e == 'S') ? ws : std::string(kWordItems);
        if (in_class) {
          if (neg)
            throw Error(what + ": regex uses \\" + std::string(1, e) +
                        " inside a character class, which parity cannot map to Oniguruma's meaning");
          out += items;
        } else {
          out += neg ? "[^" + items + "]" : "[" + items + "]";
        }
        ++i;
        continue;
      }
      out += c;
      out += e;
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      class_start = i;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      const std::size_t end = p.find(":]", i + 2);
      if (end != std::string::npos) {
        out.append(p, i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']' && i > class_start) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, const std::string& what)
    : code_(std::make_unique<Code>()), what_(what), translated_(translate(pattern, what)) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated_.data()), translated_.size(),
                              // \C could split a character, and later matches skip the UTF check.
                              PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &err, &offset, nullptr);
  if (!code_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(what + ": regex '" + pattern + "' does not compile: " + reinterpret_cast<const char*>(msg));
  }
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;

std::string Regex::escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), pcre2_match_data_free);
  if (!md) throw Error(what_ + ": out of memory for a regex match");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t search_from = 0;
  bool have_last = false;
  std::size_t last_end = 0;
  while (search_from <= text.size()) {
    int rc = pcre2_match(code_->code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its backtracking on the heap
      rc = pcre2_match(code_->code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(),
                       nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw Error(what_ + ": regex match failed: " + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const std::size_t s = ov[0], e = ov[1];
    if (e < s) throw Error(what_ + ": regex reported a match that ends before it starts (\\K is not supported)");
    if (s == e && have_last && last_end == e) {
      // Rust's find_iter: no empty match right after the previous one; step one character on.
      if (search_from >= text.size()) break;
      std::size_t n = utf8::valid_sequence_length(text, search_from);
      search_from += n == 0 ? 1 : n;
      continue;
    }
    out.emplace_back(s, e);
    have_last = true;
    last_end = e;
    search_from = e;
  }
  return out;
}

}  // namespace parity::tokenizer
