#pragma once
// Kernel tests run every path the CPU has, at several thread counts: guards that force one
// instruction set or thread count for a scope, and the list of instruction sets.
#include "kernels/isa.h"

namespace parity::kernels::test {

inline bool cpu_has(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(detected_isa()); }

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

}  // namespace parity::kernels::test
