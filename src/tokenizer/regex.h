#pragma once
// A tokenizer.json regex, run with PCRE2 (UTF + UCP) the way Hugging Face tokenizers runs it with
// Oniguruma: \s and \S mean Unicode White_Space (PCRE2 10.42 also counts U+180E), \w and \W mean
// letters, marks, decimal digits and connector punctuation, and matches are found as Rust's
// onig::Regex::find_iter finds them (an empty match right after the previous match is skipped).
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace parity::tokenizer {

class Regex {
 public:
  // Throws parity::Error naming `what`, the pattern and PCRE2's message when it does not compile.
  Regex(const std::string& pattern, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // [start, end) byte offsets of every match in `text` (valid UTF-8), in order.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

  // The PCRE2 pattern after rewriting the Oniguruma classes (for messages and tests).
  const std::string& translated() const { return translated_; }

  // A pattern matching `literal` verbatim (Split's {"String": …} form).
  static std::string escape(std::string_view literal);

 private:
  struct Code;
  std::unique_ptr<Code> code_;
  std::string what_, translated_;
};

}  // namespace parity::tokenizer
