#pragma once
// One error type for everything a user can get wrong (files, flags, tokens, configs). Frontends
// catch it, print the message and exit non-zero; nothing in the engine aborts on bad input.
#include <stdexcept>
#include <string>

namespace parity {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace parity
