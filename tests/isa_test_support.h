#pragma once
// Kernel tests run every path the CPU has, at several thread counts: guards that force one
// instruction set or thread count for a scope, and the list of instruction sets. A path the CPU
// cannot run is never left out silently: cpu_has() records it (a test property
// "isa_<name>: not run on this CPU" and a line on stderr, once per test and path), and the run
// ends with the count of tests that left out each path.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "kernels/isa.h"

namespace parity::kernels::test {

// Which tests left out which instruction set.
class IsaNotRunTally {
 public:
  // Records that `test` could not run `isa`; true the first time for this (test, isa).
  bool record(const std::string& test, Isa isa) {
    if (!seen_.insert({test, isa}).second) return false;
    ++tests_[isa];
    return true;
  }
  int tests(Isa isa) const {
    auto it = tests_.find(isa);
    return it == tests_.end() ? 0 : it->second;
  }
  // One line per path left out ("ISA avx512: not run on this CPU (3 tests)"); empty when none was.
  std::string summary() const {
    std::string s;
    for (const auto& [isa, n] : tests_)
      s += std::string("ISA ") + isa_name(isa) + ": not run on this CPU (" + std::to_string(n) +
           (n == 1 ? " test)\n" : " tests)\n");
    return s;
  }

 private:
  std::set<std::pair<std::string, Isa>> seen_;
  std::map<Isa, int> tests_;
};

inline IsaNotRunTally& isa_not_run() {
  static IsaNotRunTally t;
  return t;
}

// Prints the tally when the test program ends.
class IsaNotRunReport : public ::testing::Environment {
 public:
  void TearDown() override {
    const std::string s = isa_not_run().summary();
    if (!s.empty()) std::fprintf(stderr, "%s", s.c_str());
  }
};
inline const bool kIsaNotRunReportRegistered = (::testing::AddGlobalTestEnvironment(new IsaNotRunReport), true);

// Whether the CPU can run `isa`; a path it cannot run is recorded for the current test.
inline bool cpu_has(Isa isa) {
  if (static_cast<int>(isa) <= static_cast<int>(detected_isa())) return true;
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string test = t ? std::string(t->test_suite_name()) + "." + t->name() : std::string("(no test)");
  if (isa_not_run().record(test, isa)) {
    if (t) ::testing::Test::RecordProperty(std::string("isa_") + isa_name(isa), "not run on this CPU");
    std::fprintf(stderr, "ISA %s: not run on this CPU (%s)\n", isa_name(isa), test.c_str());
  }
  return false;
}

// Forces one instruction set for the guard's lifetime.
class IsaGuard {
 public:
  explicit IsaGuard(Isa isa) { set_isa_override(isa); }
  ~IsaGuard() { clear_isa_override(); }
};

class ThreadGuard {
 public:
  explicit ThreadGuard(int n) : saved_(num_threads()) { set_num_threads(n); }
  ~ThreadGuard() { set_num_threads(saved_); }

 private:
  int saved_;
};

inline constexpr Isa kAllIsas[] = {Isa::Portable, Isa::Avx2, Isa::Avx512};

// f(isa, threads) under every instruction set this CPU runs (cpu_has records the others) at 1 and
// 2 threads.
template <class F>
void for_each_isa_and_threads(F&& f) {
  for (Isa isa : kAllIsas) {
    if (!cpu_has(isa)) continue;
    IsaGuard ig(isa);
    for (int threads : {1, 2}) {
      ThreadGuard tg(threads);
      f(isa, threads);
    }
  }
}

}  // namespace parity::kernels::test
