#pragma once
// Bad input must fail with a parity::Error that names the problem: this checks the message.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/error.h"

namespace parity::test {

// Runs fn, which must throw parity::Error whose message holds every one of `parts`.
inline void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& part : parts)
      EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nmissing: " << part;
    return;
  }
  ADD_FAILURE() << "no parity::Error thrown";
}

// The message of the parity::Error fn throws, or "(no parity::Error)" when it throws none: for
// tests that check several things about one message.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no parity::Error)";
}

}  // namespace parity::test
