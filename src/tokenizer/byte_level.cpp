#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace parity::tokenizer::byte_level {

namespace {

bool printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> to_utf8;
  // Inverse over the range the map uses (U+0021 … U+0143); -1 where no byte maps.
  std::array<int, 0x144> to_byte{};
  Tables() {
    to_byte.fill(-1);
    char32_t extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_char[b] = printable(b) ? static_cast<char32_t>(b) : extra++;
      utf8::append(to_utf8[b], to_char[b]);
      to_byte[to_char[b]] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::array<char32_t, 256>& byte_to_char() { return tables().to_char; }

void encode(std::string& out, std::string_view bytes) {
  const Tables& t = tables();
  for (unsigned char b : bytes) out += t.to_utf8[b];
}

std::optional<std::string> decode(std::string_view token) {
  const Tables& t = tables();
  std::string out;
  out.reserve(token.size());
  std::size_t i = 0;
  while (i < token.size()) {
    if (utf8::valid_sequence_length(token, i) == 0) return std::nullopt;
    const char32_t c = utf8::next(token, i);
    if (c >= t.to_byte.size() || t.to_byte[c] < 0) return std::nullopt;
    out += static_cast<char>(t.to_byte[c]);
  }
  return out;
}

}  // namespace parity::tokenizer::byte_level
