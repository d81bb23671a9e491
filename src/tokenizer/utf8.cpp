#include "tokenizer/utf8.h"

namespace parity::tokenizer::utf8 {

namespace {

// For a lead byte: sequence length and the allowed range of the second byte (RFC 3629 table,
// which excludes overlong forms, surrogates and code points past U+10FFFF).
struct Lead {
  int len;
  unsigned char lo, hi;
};

Lead lead_of(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Number of bytes from s[i] that form a valid prefix of a sequence (the maximal subpart), and
// whether the sequence is complete.
std::size_t valid_prefix(std::string_view s, std::size_t i, bool& complete) {
  const Lead l = lead_of(static_cast<unsigned char>(s[i]));
  complete = false;
  if (l.len == 0) return 0;
  if (l.len == 1) {
    complete = true;
    return 1;
  }
  std::size_t n = 1;
  for (int k = 1; k < l.len; ++k) {
    if (i + n >= s.size()) return n;
    const unsigned char c = static_cast<unsigned char>(s[i + n]);
    const bool ok = k == 1 ? (c >= l.lo && c <= l.hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) return n;
    ++n;
  }
  complete = true;
  return n;
}

}  // namespace

std::size_t valid_sequence_length(std::string_view s, std::size_t i) {
  bool complete = false;
  const std::size_t n = valid_prefix(s, i, complete);
  return complete ? n : 0;
}

std::size_t first_invalid(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t n = valid_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

char32_t next(std::string_view s, std::size_t& i) {
  const unsigned char b = static_cast<unsigned char>(s[i]);
  const int len = lead_of(b).len;
  char32_t c = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < len; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len > 0 ? len : 1;
  return c;
}

void append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

void append_lossy(std::string& out, std::string_view s) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::size_t i = 0;
  while (i < s.size()) {
    bool complete = false;
    const std::size_t n = valid_prefix(s, i, complete);
    if (complete) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append(kReplacement);
      i += n == 0 ? 1 : n;
    }
  }
}

std::size_t incomplete_tail(std::string_view s) {
  // A sequence is at most 4 bytes, so an incomplete one starts within the last 3.
  for (std::size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const std::size_t i = s.size() - back;
    const unsigned char b = static_cast<unsigned char>(s[i]);
    if (b >= 0x80 && b <= 0xBF) continue;  // continuation byte: look further back
    bool complete = false;
    const std::size_t n = valid_prefix(s, i, complete);
    return (!complete && n == back) ? back : 0;
  }
  return 0;
}

}  // namespace parity::tokenizer::utf8
