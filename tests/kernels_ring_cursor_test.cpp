// The ring cursor (src/kernels_cuda/ring_cursor.h) the GPU's weight rings walk box by box: its stage
// and phase parity are the division's b % S and (b / S) & 1 at every box, started at 0 or part-way.
#include <gtest/gtest.h>

#include "kernels_cuda/ring_cursor.h"

using parity::cuda::Cursor;

TEST(RingCursor, WalkingBoxByBoxGivesEveryBoxsStageAndParity) {
  for (int stages = 1; stages <= 96; ++stages)
    for (int from : {0, 1, stages - 1, stages, 2 * stages + 3}) {
      Cursor c = Cursor::at(from, stages);
      for (int b = from; b < from + 4 * stages + 7; ++b, c.next(stages)) {
        ASSERT_EQ(c.s, b % stages) << "stages " << stages << " box " << b;
        ASSERT_EQ(c.phase, static_cast<unsigned>(b / stages) & 1u) << "stages " << stages << " box " << b;
      }
    }
}

TEST(RingCursor, ThePhaseFlipsOnlyWhenTheRingWrapsAround) {
  // The companion: a walk that forgets to flip (or flips each box) is told apart.
  Cursor c;
  for (int b = 0; b < 5; ++b) c.next(5);
  EXPECT_EQ(c.s, 0);
  EXPECT_EQ(c.phase, 1u);
  c.next(5);
  EXPECT_EQ(c.s, 1);
  EXPECT_EQ(c.phase, 1u);
  EXPECT_EQ(Cursor::at(7, 5).phase, 1u);
  EXPECT_EQ(Cursor::at(10, 5).phase, 0u);
}
