#include "frontends/server/auth.h"

#include <algorithm>
#include <cstdint>

namespace parity::server {

bool constant_time_equal(std::string_view a, std::string_view b) {
  const std::size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  // volatile keeps the compiler from turning the loop into an early-exit comparison.
  volatile unsigned result = diff;
  return result == 0;
}

bool bearer_matches(std::string_view authorization, std::string_view key) {
  constexpr std::string_view prefix = "Bearer ";
  if (authorization.size() < prefix.size() || authorization.substr(0, prefix.size()) != prefix) {
    constant_time_equal(authorization, key);  // same work either way
    return false;
  }
  return constant_time_equal(authorization.substr(prefix.size()), key);
}

}  // namespace parity::server
