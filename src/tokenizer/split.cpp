#include "tokenizer/split.h"

#include <algorithm>

#include "common/error.h"

namespace parity::tokenizer {

SplitBehavior parse_split_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  throw Error(where + ": unsupported split behavior '" + name + "'");
}

std::vector<Span> cover(const std::vector<std::pair<std::size_t, std::size_t>>& matches, std::size_t size) {
  std::vector<Span> out;
  if (size == 0) return {{0, 0, false}};
  std::size_t prev = 0;
  for (const auto& [s, e] : matches) {
    if (prev != s) out.push_back({prev, s, false});
    out.push_back({s, e, true});
    prev = e;
  }
  if (prev != size) out.push_back({prev, size, false});
  return out;
}

void split_into(std::string_view text, std::vector<Span> spans, SplitBehavior behavior, bool invert,
                std::vector<std::string>& out) {
  if (invert)
    for (Span& s : spans) s.is_match = !s.is_match;
  std::vector<Span> pieces;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      pieces = std::move(spans);
      break;
    case SplitBehavior::Removed:
      for (const Span& s : spans)
        if (!s.is_match) pieces.push_back(s);
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !pieces.empty())
          pieces.back().end = s.end;
        else
          pieces.push_back(s);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !pieces.empty())
          pieces.back().start = it->start;
        else
          pieces.push_back(*it);
        previous_match = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    case SplitBehavior::Contiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !pieces.empty())
          pieces.back().end = s.end;
        else
          pieces.push_back(s);
        previous_match = s.is_match;
      }
      break;
  }
  for (const Span& p : pieces)
    if (p.end > p.start) out.emplace_back(text.substr(p.start, p.end - p.start));
}

}  // namespace parity::tokenizer
