#pragma once
// A ring of `stages` stages walked one box at a time: box b sits in stage b % stages, in round
// b / stages, whose barriers complete with phase parity (b / stages) & 1. Kept as a running pair, as
// the walks advance: most rings' size is known only at run time, and a division a box would sit on
// a consumer's chain of dependent steps (tests/kernels_ring_cursor_test.cpp checks the walk against
// the division).
#include "kernels/math.h"  // PARITY_HD

namespace parity::cuda {

struct Cursor {
  int s = 0;
  unsigned phase = 0;
  // Box b's place: where a walk starts part-way (one division, once).
  PARITY_HD static Cursor at(int b, int stages) {
    return Cursor{b % stages, static_cast<unsigned>(b / stages) & 1u};
  }
  PARITY_HD void next(int stages) {
    if (++s == stages) {
      s = 0;
      phase ^= 1u;
    }
  }
};

}  // namespace parity::cuda
