#pragma once
// printf-style formatting of one number, for reports that print fixed-width figures.
#include <cstdio>
#include <string>

namespace parity {

inline std::string format_number(const char* printf_format, double v) {
  char b[64];
  std::snprintf(b, sizeof b, printf_format, v);
  return b;
}

}  // namespace parity
