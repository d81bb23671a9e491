#pragma once
// The exactness gate's schedule scenarios on a GPU model, tallied: every exact-mode scenario is expected to
// have 0 mismatched rows (each failure names the scenario and numerics); the caller asserts the totals and
// the plain-mode companion, whose thresholds differ by model.
#include <cstdint>

#include <gtest/gtest.h>

#include "engine/exactness_gate.h"
#include "model/model.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity::test {

struct GateTally {
  int64_t exact_rows = 0, exact_bad = 0, plain_bad = 0;
};

// Sanitizer mode runs the streams shorter (a 40-token prompt and 12 forced tokens: still across a chunk
// and the exact cells, the decode crossing one); the rows a caller expects shrink with them, to a third.
inline int64_t gate_min_rows(int64_t full) { return pick(full, full / 3); }

inline GateTally run_gpu_gate(model::Model& m) {
  engine::GateOptions g;
  g.scenarios = {"decode", "chunked-prefill", "preempt-recompute", "concurrent-8"};
  g.prompt_len = pick(0, 40);  // 0: the gate's default (75 and 38 tokens for chunks of 32)
  g.forced_len = pick(0, 12);
  GateTally t;
  for (const auto& r : engine::run_exactness_gate(m, g)) {
    if (r.mode == model::ScanMode::Exact) {
      t.exact_rows += r.all.rows;
      t.exact_bad += r.all.mismatched;
      EXPECT_EQ(r.all.mismatched, 0) << r.scenario << " " << r.numerics.describe() << ": " << r.all.mismatched
                                     << " of " << r.all.rows << " rows differ, max |delta| " << r.max_abs;
    } else {
      t.plain_bad += r.all.mismatched;
    }
  }
  return t;
}

}  // namespace parity::test
