#pragma once
// Hugging Face's SplitDelimiterBehavior: how a list of (span, is_match) pieces that covers a
// string becomes the pieces a pre-tokenizer passes on. Empty pieces are dropped, as
// PreTokenizedString::split drops them.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace parity::tokenizer {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Throws parity::Error naming an unknown behavior.
SplitBehavior parse_split_behavior(const std::string& name, const std::string& where);

struct Span {
  std::size_t start, end;
  bool is_match;
};

// Covers [0, size) with the matches and the gaps between them (Pattern::find_matches).
std::vector<Span> cover(const std::vector<std::pair<std::size_t, std::size_t>>& matches, std::size_t size);

// Appends the non-empty pieces of `text` that `spans` (a cover of it) give under `behavior`.
void split_into(std::string_view text, std::vector<Span> spans, SplitBehavior behavior, bool invert,
                std::vector<std::string>& out);

}  // namespace parity::tokenizer
