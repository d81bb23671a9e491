#pragma once
// UTF-8 helpers the tokenizer needs: validation, code point iteration, and lossy decoding that
// replaces each maximal invalid subpart with U+FFFD (the W3C/Unicode practice that Rust's
// String::from_utf8_lossy follows, so decodes agree with Hugging Face tokenizers byte for byte).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace parity::tokenizer::utf8 {

// Length of the valid sequence starting at s[i], or 0 when s[i..] does not start one.
std::size_t valid_sequence_length(std::string_view s, std::size_t i);

// Offset of the first byte that is not part of valid UTF-8, or npos when all of s is valid.
std::size_t first_invalid(std::string_view s);

// Decodes the code point at s[i] (which must start a valid sequence) and advances i past it.
char32_t next(std::string_view s, std::size_t& i);
void append(std::string& out, char32_t c);

// Appends s with invalid subparts replaced by U+FFFD.
void append_lossy(std::string& out, std::string_view s);

// How many trailing bytes of s are an incomplete (so far valid) prefix of a sequence: 0-3.
// The streaming decoder holds these back until the next token completes (or breaks) them.
std::size_t incomplete_tail(std::string_view s);

}  // namespace parity::tokenizer::utf8
