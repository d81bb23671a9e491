#pragma once
// GPT-2's reversible byte-to-unicode map: every byte becomes a printable character (printable
// Latin-1 bytes map to themselves, the other 68 to U+0100…U+0143 in byte order), so BPE can work
// on strings of "characters" that stand for raw bytes.
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace parity::tokenizer::byte_level {

// Appends the mapped characters of every byte of `bytes`.
void encode(std::string& out, std::string_view bytes);

// The bytes a token string stands for, or nullopt when it has a character outside the map (then
// Hugging Face's ByteLevel decoder takes the token's own UTF-8 bytes, as for added tokens).
std::optional<std::string> decode(std::string_view token);

// The 256 characters of the map, by byte.
const std::array<char32_t, 256>& byte_to_char();

}  // namespace parity::tokenizer::byte_level
