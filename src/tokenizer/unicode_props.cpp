#include "tokenizer/unicode_props.h"

#include <cstdio>

#include <unicode/uchar.h>
#include <unicode/uset.h>

#include "common/error.h"

namespace parity::tokenizer::unicode {

bool is_white_space(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE); }

bool is_word(char32_t c) {
  const UChar32 u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL)) return true;
  const int8_t t = u_charType(u);
  return t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

bool is_numeric(char32_t c) {
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

const std::string& white_space_class_items() {
  static const std::string items = [] {
    UErrorCode err = U_ZERO_ERROR;
    USet* set = uset_openEmpty();
    uset_applyIntPropertyValue(set, UCHAR_WHITE_SPACE, 1, &err);
    std::string out;
    const int32_t n = uset_getItemCount(set);
    for (int32_t i = 0; i < n && U_SUCCESS(err); ++i) {
      UChar32 start = 0, end = 0;
      uset_getItem(set, i, &start, &end, nullptr, 0, &err);
      char buf[48];
      if (start == end)
        std::snprintf(buf, sizeof buf, "\\x{%x}", static_cast<unsigned>(start));
      else
        std::snprintf(buf, sizeof buf, "\\x{%x}-\\x{%x}", static_cast<unsigned>(start), static_cast<unsigned>(end));
      out += buf;
    }
    uset_close(set);
    if (U_FAILURE(err) || out.empty()) throw Error("ICU could not list the White_Space property");
    return out;
  }();
  return items;
}

}  // namespace parity::tokenizer::unicode
