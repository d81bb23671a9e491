#pragma once
// Unicode character properties, from ICU (no hand-written tables): the classes Hugging Face
// tokenizers' Rust and Oniguruma code uses and PCRE2 defines differently.
#include <string>

namespace parity::tokenizer::unicode {

bool is_white_space(char32_t c);  // White_Space: Rust's char::is_whitespace, regex \s, Oniguruma \s
bool is_word(char32_t c);         // Rust regex \w: Alphabetic, marks, Nd, Pc, Join_Control
bool is_numeric(char32_t c);      // Rust char::is_numeric: general category Nd, Nl or No

// The White_Space set as PCRE2 class items ("\x{9}-\x{d}\x{20}…"), for rewriting \s.
const std::string& white_space_class_items();

}  // namespace parity::tokenizer::unicode
