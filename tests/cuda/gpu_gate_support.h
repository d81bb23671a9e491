#pragma once
// The exactness gate's schedule scenarios on a GPU model, tallied: every exact-mode scenario is expected to
// have 0 mismatched rows (each failure names the scenario and numerics); the caller asserts the totals and
// the plain-mode companion, whose thresholds differ by model.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/exactness_gate.h"
#include "model/model.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity::test {

struct GateTally {
  int64_t exact_rows = 0, exact_bad = 0, plain_bad = 0;
};

// Sanitizer mode (a pass costs ~1-2 s under racecheck; the gate runs ~200 here) runs two scenarios on a
// short stream, a 17-token prompt (past a 16-row exact cell) and 2 forced tokens, also in 13-token chunks,
// with the fp32 state in exact mode (the bf16 state's kernels run in the SSD tests) and plain mode. The
// other scenarios launch the same kernels (kernel tests mix prefill and decode rows in one pass). The
// rows a caller expects shrink to a sixty-fourth.
inline int64_t gate_min_rows(int64_t full) { return pick(full, full / 64); }

inline GateTally run_gpu_gate(model::Model& m,
                              kernels::ScanProducts products = kernels::ScanProducts::float32) {
  engine::GateOptions g;
  g.scan_products = products;
  g.scenarios = pick<std::vector<std::string>>({"decode", "chunked-prefill", "preempt-recompute", "concurrent-8"},
                                               {"decode", "chunked-prefill"});
  g.prompt_len = pick(0, 17);  // 0: the gate's default (75 and 38 tokens for chunks of 32)
  g.forced_len = pick(0, 2);
  g.exact_dtypes = pick<std::vector<DType>>({DType::F32, DType::BF16}, {DType::F32});
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
