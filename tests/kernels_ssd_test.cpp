// SSD / SSU contract tests (DESIGN.md rules 1, 2, 6, 7): ssd_scan equals its scalar twin bit for
// bit on every instruction set and thread count, and a row's bits do not depend on how the sequence
// was cut into calls (prefix, replay with first_out, aligned and unaligned splits, one-row decode).
// The chunk-end fold weights every row straight to the chunk's end (ssd_internal.h); a call that
// folds rows [b, t] from b's boundary state gets the prefix run's final state. Companions show the
// comparisons can fail: SSU decode and a chunk grid restarted at the split point give different
// bits. Accuracy is checked against a float64 sequential recurrence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "kernels/isa.h"
#include "isa_test_support.h"
#include "ssd_test_support.h"
#include "kernels/math.h"
#include "kernels/ssd.h"

namespace parity::kernels {
namespace {

using namespace test;


struct ScanOut {
  std::vector<float> y, chunk_states, final_state;
};

// ssd_scan (or its twin) over rows [begin, begin + count) of the stream, from state s0, with
// output rows from begin + first_out on.
ScanOut run_scan(const Problem& pr, int begin, int count, int first_out, const float* s0, bool reference = false) {
  const SsdShape& sh = pr.shape;
  ScanOut o;
  o.y.assign(size_t(count - first_out) * pr.ldx(), NAN);
  o.chunk_states.assign(size_t(count / sh.chunk_size) * pr.state_elems(), NAN);
  o.final_state.assign(size_t(pr.state_elems()), NAN);
  auto fn = reference ? ssd_scan_reference : ssd_scan;
  fn(sh, pr.x.data() + begin * pr.ldx(), pr.dt.data() + size_t(begin) * sh.nheads, pr.A.data(),
     pr.B.data() + begin * pr.ldb(), pr.C.data() + (begin + first_out) * pr.ldb(), pr.D.data(), count, first_out, s0,
     o.y.data(), o.chunk_states.data(), o.final_state.data(), 0);
  return o;
}

// ---------------------------------------------------------------------------------------------
// Accuracy against float64.

// Measured over seeds 1..12 on the shapes below (max |Δ| / max |ref|), with the row-by-row fold of
// sessions before 18: y <= 4.1e-7, chunk states <= 1.5e-6, final state <= 1.4e-6; seed 1 with the
// weighted fold: y <= 1.7e-7, states <= 3.3e-7. The states' error is the larger one because slow
// heads keep most of their state for hundreds of rows and every fold rounds it again. 1e-5 (about
// 170 units of fp32 rounding) leaves a wide margin while an off-by-one decay, a dropped or doubled
// term, or a wrong boundary factor shows up at 1e-3 and above.
constexpr double kScanRelBound = 1e-5;

TEST(KernelsSsdAccuracy, ScanMatchesFloat64Recurrence) {
  for (const auto& [shape, n] : {std::pair{kSmall, 200}, std::pair{kLarge, kLargeN}, std::pair{kOdd, 97}}) {
    const Problem pr = make_problem(shape, n, 1);
    const F64Run ref = recurrence_f64(pr);
    const ScanOut o = run_scan(pr, 0, n, 0, pr.s0.data());
    const double ey = rel_max_err(o.y.data(), ref.y), es = rel_max_err(o.final_state.data(), ref.final_state);
    const double ec = rel_max_err(o.chunk_states.data(), ref.chunk_states);
    std::printf("  ssd_scan vs f64 (H%d P%d N%d L%d n%d): y %.3g, chunk states %.3g, final state %.3g\n",
                shape.nheads, shape.headdim, shape.dstate, shape.chunk_size, n, ey, ec, es);
    EXPECT_LE(ey, kScanRelBound);
    EXPECT_LE(ec, kScanRelBound);
    EXPECT_LE(es, kScanRelBound);
  }
}

// Measured over seeds 1..12: y <= 4.9e-7, state <= 1.4e-6. The recurrence rounds the state
// once per token, so its error grows slowly with length; same bound and margin as the scan.
constexpr double kSsuRelBound = 1e-5;

TEST(KernelsSsdAccuracy, SsuMatchesFloat64Recurrence) {
  for (const auto& [shape, n] : {std::pair{kSmall, 200}, std::pair{kLarge, kLargeN}}) {
    const Problem pr = make_problem(shape, n, 1);
    const F64Run ref = recurrence_f64(pr);
    std::vector<float> S = pr.s0, y(size_t(n) * pr.ldx());
    for (int t = 0; t < n; ++t) {
      ssu_step(shape, pr.x.data() + t * pr.ldx(), pr.dt.data() + size_t(t) * shape.nheads, pr.A.data(),
               pr.B.data() + t * pr.ldb(), pr.C.data() + t * pr.ldb(), pr.D.data(), S.data(), y.data() + t * pr.ldx());
    }
    const double ey = rel_max_err(y.data(), ref.y), es = rel_max_err(S.data(), ref.final_state);
    std::printf("  ssu_step vs f64 (H%d P%d N%d n%d): y %.3g, state %.3g\n", shape.nheads, shape.headdim, shape.dstate,
                n, ey, es);
    EXPECT_LE(ey, kSsuRelBound);
    EXPECT_LE(es, kSsuRelBound);
  }
}

// ---------------------------------------------------------------------------------------------
// Bitwise: optimized paths vs the scalar twin.

TEST(KernelsSsdBitwise, ScanEqualsReferenceOnEveryIsa) {
  struct Case {
    SsdShape shape;
    int n, first_out;
  };
  const Case cases[] = {{kSmall, 100, 0},  {kSmall, 64, 0},  {kSmall, 100, 37}, {kSmall, 5, 4},
                        {kLarge, kLargeN, 0}, {kLarge, 300, 290}, {kOdd, 97, 0}, {kOdd, 97, 41},
                        {kOdd2, 150, 0},   {kOdd2, 150, 100}, {kWide, 40, 0}, {kWide, 40, 20},
                        {kSmall, 0, 0}};
  for (const Case& c : cases) {
    const Problem pr = make_problem(c.shape, c.n, 2);
    const ScanOut ref = run_scan(pr, 0, c.n, c.first_out, pr.s0.data(), /*reference=*/true);
    for (Isa isa : kAllIsas) {
      if (!cpu_has(isa)) continue;
      IsaGuard guard(isa);
      const ScanOut o = run_scan(pr, 0, c.n, c.first_out, pr.s0.data());
      SCOPED_TRACE(std::string(isa_name(isa)) + " H" + std::to_string(c.shape.nheads) + " P" +
                   std::to_string(c.shape.headdim) + " N" + std::to_string(c.shape.dstate) + " L" +
                   std::to_string(c.shape.chunk_size) + " n" + std::to_string(c.n) + " first_out " +
                   std::to_string(c.first_out));
      EXPECT_TRUE(same_bits(o.y.data(), ref.y.data(), o.y.size()))
          << count_bit_mismatches(o.y.data(), ref.y.data(), o.y.size()) << " y elements differ";
      EXPECT_TRUE(same_bits(o.chunk_states.data(), ref.chunk_states.data(), o.chunk_states.size()));
      EXPECT_TRUE(same_bits(o.final_state.data(), ref.final_state.data(), o.final_state.size()));
    }
  }
}

TEST(KernelsSsdBitwise, NullableStateOutputs) {
  const Problem pr = make_problem(kSmall, 80, 3);
  const ScanOut full = run_scan(pr, 0, 80, 0, pr.s0.data());
  for (bool want_chunks : {false, true}) {
    for (bool want_final : {false, true}) {
      std::vector<float> y(full.y.size()), cs(full.chunk_states.size()), fs(full.final_state.size());
      ssd_scan(pr.shape, pr.x.data(), pr.dt.data(), pr.A.data(), pr.B.data(), pr.C.data(), pr.D.data(), 80, 0,
               pr.s0.data(), y.data(), want_chunks ? cs.data() : nullptr, want_final ? fs.data() : nullptr);
      EXPECT_TRUE(same_bits(y.data(), full.y.data(), y.size()));
      if (want_chunks) {
        EXPECT_TRUE(same_bits(cs.data(), full.chunk_states.data(), cs.size()));
      }
      if (want_final) {
        EXPECT_TRUE(same_bits(fs.data(), full.final_state.data(), fs.size()));
      }
    }
  }
}

TEST(KernelsSsdBitwise, ThreadCountDoesNotChangeBits) {
  for (const auto& [shape, n] : {std::pair{kSmall, 150}, std::pair{kLarge, kLargeN}}) {
    const Problem pr = make_problem(shape, n, 4);
    ScanOut one, two;
    {
      ThreadGuard tg(1);
      one = run_scan(pr, 0, n, 0, pr.s0.data());
    }
    {
      ThreadGuard tg(2);
      two = run_scan(pr, 0, n, 0, pr.s0.data());
    }
    EXPECT_TRUE(same_bits(one.y.data(), two.y.data(), one.y.size()));
    EXPECT_TRUE(same_bits(one.chunk_states.data(), two.chunk_states.data(), one.chunk_states.size()));
    EXPECT_TRUE(same_bits(one.final_state.data(), two.final_state.data(), one.final_state.size()));
  }
}

TEST(KernelsSsdBitwise, SsuSameBitsOnEveryIsaAndThreadCount) {
  for (const SsdShape& shape : {kSmall, kLarge, kOdd, kOdd2}) {
    const Problem pr = make_problem(shape, 20, 5);
    std::vector<float> S_ref = pr.s0, y_ref(size_t(pr.n) * pr.ldx());
    {
      IsaGuard guard(Isa::Portable);
      for (int t = 0; t < pr.n; ++t)
        ssu_step(shape, pr.x.data() + t * pr.ldx(), pr.dt.data() + size_t(t) * shape.nheads, pr.A.data(),
                 pr.B.data() + t * pr.ldb(), pr.C.data() + t * pr.ldb(), pr.D.data(), S_ref.data(),
                 y_ref.data() + t * pr.ldx());
    }
    for (Isa isa : kAllIsas) {
      if (!cpu_has(isa)) continue;
      for (int threads : {1, 2}) {
        IsaGuard guard(isa);
        ThreadGuard tg(threads);
        std::vector<float> S = pr.s0, y(y_ref.size());
        for (int t = 0; t < pr.n; ++t)
          ssu_step(shape, pr.x.data() + t * pr.ldx(), pr.dt.data() + size_t(t) * shape.nheads, pr.A.data(),
                   pr.B.data() + t * pr.ldb(), pr.C.data() + t * pr.ldb(), pr.D.data(), S.data(), y.data() + t * pr.ldx());
        EXPECT_TRUE(same_bits(y.data(), y_ref.data(), y.size())) << isa_name(isa) << " threads " << threads;
        EXPECT_TRUE(same_bits(S.data(), S_ref.data(), S.size())) << isa_name(isa) << " threads " << threads;
      }
    }
  }
}

// The fused bf16 SSU is widen → ssu_step → round, bit for bit, NaNs included.
TEST(KernelsSsdBitwise, SsuBf16EqualsWidenStepRoundOnEveryIsaAndThreadCount) {
  for (const SsdShape& shape : {kSmall, kLarge, kOdd, kOdd2, kWide}) {
    Problem pr = make_problem(shape, 1, 21);
    std::vector<uint16_t> s16(pr.s0.size());
    for (std::size_t i = 0; i < s16.size(); ++i) s16[i] = f32_to_bf16(pr.s0[i]);
    s16[3] = f32_to_bf16(NAN);
    std::vector<float> s32(s16.size()), y_ref(pr.ldx());
    for (std::size_t i = 0; i < s16.size(); ++i) s32[i] = bf16_to_f32(s16[i]);
    {
      IsaGuard guard(Isa::Portable);
      ssu_step(shape, pr.x.data(), pr.dt.data(), pr.A.data(), pr.B.data(), pr.C.data(), pr.D.data(), s32.data(),
               y_ref.data());
    }
    std::vector<uint16_t> want(s16.size());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = f32_to_bf16(s32[i]);
    for (Isa isa : kAllIsas) {
      if (!cpu_has(isa)) continue;
      IsaGuard guard(isa);
      for (int threads : {1, 2}) {
        ThreadGuard tg(threads);
        std::vector<uint16_t> st = s16;
        std::vector<float> y(pr.ldx());
        ssu_step_bf16(shape, pr.x.data(), pr.dt.data(), pr.A.data(), pr.B.data(), pr.C.data(), pr.D.data(), st.data(),
                      y.data());
        EXPECT_EQ(std::memcmp(st.data(), want.data(), st.size() * 2), 0) << isa_name(isa) << " threads " << threads;
        EXPECT_EQ(count_bit_mismatches(y.data(), y_ref.data(), y.size()), 0u) << isa_name(isa) << " threads " << threads;
      }
    }
  }
}

// x read in place from wider rows (the conv output's x | B | C) gives the packed rows' bits, on
// every ISA and thread count, in the optimized scan and its twin; the companion reads the same
// buffer as packed rows and gets other values.
TEST(KernelsSsdBitwise, StridedXGivesPackedBits) {
  for (const auto& [shape, n, first_out] : {std::tuple{kSmall, 100, 0}, std::tuple{kSmall, 100, 37},
                                            std::tuple{kLarge, 300, 0}, std::tuple{kOdd, 97, 41}}) {
    const Problem pr = make_problem(shape, n, 8);
    const int64_t stride = pr.ldx() + 2 * pr.ldb() + 5;
    const std::vector<float> xs = strided_x(pr, stride);
    const ScanOut packed = run_scan(pr, 0, n, first_out, pr.s0.data(), /*reference=*/true);
    auto strided = [&](bool reference, int64_t ld) {
      ScanOut o;
      o.y.assign(size_t(n - first_out) * pr.ldx(), NAN);
      o.final_state.assign(size_t(pr.state_elems()), NAN);
      (reference ? ssd_scan_reference : ssd_scan)(shape, xs.data(), pr.dt.data(), pr.A.data(), pr.B.data(),
                                                  pr.C.data() + first_out * pr.ldb(), pr.D.data(), n, first_out,
                                                  pr.s0.data(), o.y.data(), nullptr, o.final_state.data(), ld);
      return o;
    };
    const ScanOut ref = strided(true, stride);
    EXPECT_TRUE(same_bits(ref.y.data(), packed.y.data(), ref.y.size())) << "reference, n " << n;
    EXPECT_TRUE(same_bits(ref.final_state.data(), packed.final_state.data(), ref.final_state.size()));
    for_each_isa_and_threads([&](Isa isa, int threads) {
      const ScanOut o = strided(false, stride);
      EXPECT_TRUE(same_bits(o.y.data(), packed.y.data(), o.y.size()))
          << isa_name(isa) << " threads " << threads << " n " << n << ": "
          << count_bit_mismatches(o.y.data(), packed.y.data(), o.y.size()) << " y elements differ";
      EXPECT_TRUE(same_bits(o.final_state.data(), packed.final_state.data(), o.final_state.size()));
    });
    const ScanOut as_packed = strided(false, 0);  // companion: the wide rows read as packed ones
    EXPECT_FALSE(same_bits(as_packed.y.data(), packed.y.data(), as_packed.y.size()));
  }
}

TEST(KernelsSsdBitwise, RejectsBadArguments) {
  const Problem pr = make_problem(kSmall, 10, 6);
  std::vector<float> y(10 * pr.ldx()), fs(pr.state_elems());
  EXPECT_THROW(ssd_scan(pr.shape, pr.x.data(), pr.dt.data(), pr.A.data(), pr.B.data(), pr.C.data(), pr.D.data(), 10,
                        0, pr.s0.data(), y.data(), nullptr, fs.data(), pr.ldx() - 1),
               Error);  // an x row stride shorter than a row
  EXPECT_THROW(ssd_scan(pr.shape, pr.x.data(), pr.dt.data(), pr.A.data(), pr.B.data(), pr.C.data(), pr.D.data(), 10,
                        11, pr.s0.data(), y.data(), nullptr, fs.data()),
               Error);
  SsdShape bad = pr.shape;
  bad.ngroups = 3;  // 4 heads do not split into 3 groups
  EXPECT_THROW(ssd_scan(bad, pr.x.data(), pr.dt.data(), pr.A.data(), pr.B.data(), pr.C.data(), pr.D.data(), 10, 0,
                        pr.s0.data(), y.data(), nullptr, fs.data()),
               Error);
}

// ---------------------------------------------------------------------------------------------
// Schedule invariance (exact mode).

// The state at chunk boundary b (a multiple of the chunk size) of the full run.
const float* boundary_state(const Problem& pr, const ScanOut& full, int b) {
  const int L = pr.shape.chunk_size;
  return b == 0 ? pr.s0.data() : full.chunk_states.data() + size_t(b / L - 1) * pr.state_elems();
}

// The state after rows [0, end) from a call that starts at the last boundary at or below end
// (the full run's chunk state there) and re-feeds the rows up to end, one output row.
std::vector<float> state_from_boundary(const Problem& pr, const ScanOut& full, int end) {
  const int b = end / pr.shape.chunk_size * pr.shape.chunk_size, count = end - b;
  return run_scan(pr, b, count, count > 0 ? count - 1 : 0, boundary_state(pr, full, b)).final_state;
}

// Row t's bits and the complete-chunk states of a prefix run equal those of the full run, and its
// final state equals the one a call from the last boundary produces.
void expect_prefix_invariant(const Problem& pr, const ScanOut& full, int len) {
  const ScanOut o = run_scan(pr, 0, len, 0, pr.s0.data());
  ASSERT_TRUE(same_bits(o.y.data(), full.y.data(), o.y.size()))
      << "prefix " << len << ": " << count_bit_mismatches(o.y.data(), full.y.data(), o.y.size()) << " y elements differ";
  ASSERT_TRUE(same_bits(o.chunk_states.data(), full.chunk_states.data(), o.chunk_states.size())) << "prefix " << len;
  const std::vector<float> fs = state_from_boundary(pr, full, len);
  ASSERT_TRUE(same_bits(o.final_state.data(), fs.data(), fs.size())) << "prefix " << len << " final state";
}

TEST(KernelsSsdInvariance, EveryPrefixSmallShape) {
  const int n = 700;
  const Problem pr = make_problem(kSmall, n, 7);
  const ScanOut full = run_scan(pr, 0, n, 0, pr.s0.data());
  for (int len = 1; len <= n; ++len)
    if (len <= 20 || len % kSanitizerSample == 0 || len == n) expect_prefix_invariant(pr, full, len);
}

TEST(KernelsSsdInvariance, PrefixesLargeShape) {
  const Problem pr = make_problem(kLarge, kLargeN, 7);
  const ScanOut full = run_scan(pr, 0, kLargeN, 0, pr.s0.data());
  const int L = kLarge.chunk_size;
  std::vector<int> lens;
  for (int len = 1; len <= kLargeN; len += 13) lens.push_back(len);
  for (int b : {0, L, 2 * L})
    for (int d = -5; d <= 5; ++d)
      if (b + d >= 1 && b + d <= kLargeN) lens.push_back(b + d);
  for (int len = kLargeN - 5; len <= kLargeN; ++len) lens.push_back(len);
  for (int len : lens) expect_prefix_invariant(pr, full, len);
}

// first_out > 0 re-feeds rows without output (replay): the produced rows equal the full run's.
TEST(KernelsSsdInvariance, ReplayWithFirstOut) {
  for (const auto& [shape, n] : {std::pair{kSmall, 150}, std::pair{kLarge, kLargeN}}) {
    const Problem pr = make_problem(shape, n, 8);
    const ScanOut full = run_scan(pr, 0, n, 0, pr.s0.data());
    const int L = shape.chunk_size;
    for (int f : {1, 3, L - 1, L, L + 1, L + 5, n - 1, n}) {
      const ScanOut o = run_scan(pr, 0, n, f, pr.s0.data());
      EXPECT_TRUE(same_bits(o.y.data(), full.y.data() + f * pr.ldx(), o.y.size())) << "first_out " << f;
      EXPECT_TRUE(same_bits(o.chunk_states.data(), full.chunk_states.data(), o.chunk_states.size()));
      EXPECT_TRUE(same_bits(o.final_state.data(), full.final_state.data(), o.final_state.size()));
    }
  }
}

// Two calls split at p: the second starts at the last chunk boundary b <= p from the first call's
// state at b and re-feeds rows [b, p) without output (exact-mode chunked prefill).
void expect_split_invariant(const Problem& pr, const ScanOut& full, int p) {
  const int L = pr.shape.chunk_size, n = pr.n;
  const ScanOut first = run_scan(pr, 0, p, 0, pr.s0.data());
  const int b = p / L * L;
  const float* sb = b == 0 ? pr.s0.data() : first.chunk_states.data() + size_t(b / L - 1) * pr.state_elems();
  const ScanOut second = run_scan(pr, b, n - b, p - b, sb);
  EXPECT_TRUE(same_bits(first.y.data(), full.y.data(), first.y.size())) << "split " << p;
  EXPECT_TRUE(same_bits(first.chunk_states.data(), full.chunk_states.data(), first.chunk_states.size())) << "split " << p;
  const std::vector<float> fs = state_from_boundary(pr, full, p);
  EXPECT_TRUE(same_bits(first.final_state.data(), fs.data(), fs.size())) << "split " << p;
  EXPECT_TRUE(same_bits(second.y.data(), full.y.data() + p * pr.ldx(), second.y.size()))
      << "split " << p << ": " << count_bit_mismatches(second.y.data(), full.y.data() + p * pr.ldx(), second.y.size())
      << " y elements differ";
  EXPECT_TRUE(same_bits(second.final_state.data(), full.final_state.data(), second.final_state.size())) << "split " << p;
  EXPECT_TRUE(same_bits(second.chunk_states.data(), full.chunk_states.data() + size_t(b / L) * pr.state_elems(),
                        second.chunk_states.size()))
      << "split " << p;
}

TEST(KernelsSsdInvariance, UnalignedSplits) {
  for (const auto& [shape, n] : {std::pair{kSmall, 150}, std::pair{kLarge, kLargeN}}) {
    const Problem pr = make_problem(shape, n, 9);
    const ScanOut full = run_scan(pr, 0, n, 0, pr.s0.data());
    const int L = shape.chunk_size;
    for (int p : {1, 7, L - 1, L + 1, L + 17, 2 * L - 1, 2 * L + 3, n - 1}) expect_split_invariant(pr, full, p);
  }
}

TEST(KernelsSsdInvariance, AlignedSplits) {
  for (const auto& [shape, n] : {std::pair{kSmall, 150}, std::pair{kLarge, kLargeN}}) {
    const Problem pr = make_problem(shape, n, 10);
    const ScanOut full = run_scan(pr, 0, n, 0, pr.s0.data());
    const int L = shape.chunk_size;
    for (int p = L; p < n; p += L) expect_split_invariant(pr, full, p);
  }
}

// Row t alone, from its chunk's boundary state with the chunk's earlier rows re-fed, for every t of
// the stream (the chunk-anchored replay): its row equals the single-shot run's; its final state (a
// fold of rows [b, t] from b's boundary) the full run's chunk state when the call completes the
// chunk, and at some rows a prefix run's final state.
TEST(KernelsSsdInvariance, DecodeEmulationEveryRow) {
  for (const auto& [shape, n] : {std::pair{kSmall, 200}, std::pair{kLarge, kLargeN}}) {
    const Problem pr = make_problem(shape, n, 11);
    const ScanOut full = run_scan(pr, 0, n, 0, pr.s0.data());
    const int L = shape.chunk_size;
    size_t bad_rows = 0, bad_states = 0, states_checked = 0;
    for (int t = 0; t < n; ++t) {
      const int b = t / L * L;
      const ScanOut o = run_scan(pr, b, t - b + 1, t - b, boundary_state(pr, full, b));
      bad_rows += !same_bits(o.y.data(), full.y.data() + t * pr.ldx(), pr.ldx());
      if (t - b + 1 == L) {
        bad_states += !same_bits(o.final_state.data(), full.chunk_states.data() + size_t(b / L) * pr.state_elems(),
                                 o.final_state.size());
        ++states_checked;
      } else if (t % 37 == 0 || t == n - 1) {
        const ScanOut prefix = run_scan(pr, 0, t + 1, t, pr.s0.data());
        bad_states += !same_bits(o.final_state.data(), prefix.final_state.data(), o.final_state.size());
        ++states_checked;
      }
    }
    EXPECT_EQ(bad_rows, 0u) << "H" << shape.nheads << " rows differing from the single-shot run";
    EXPECT_EQ(bad_states, 0u) << "H" << shape.nheads << " of " << states_checked << " states checked";
    EXPECT_GE(states_checked, size_t(n / 37));
  }
}

// ---------------------------------------------------------------------------------------------
// The fold: one routine, every ISA and thread count the scalar twin's bits, the decay floor kept.

// Rows where head 0's dt*A is about -70: below the decay floor (-60) but where exp_f is still a
// normal number (the generated statistics never reach the floor). The head's x is 0 there, so
// the rows' terms vanish and only the boundary factor sees the floor: a path that skipped the floor
// would keep exp_f(-70)·S.
void add_floored_rows(Problem& pr) {
  for (int t = 0; t < pr.n; t += 41) {
    pr.dt[size_t(t) * pr.shape.nheads] = -70.0f / pr.A[0];
    std::fill_n(pr.x.begin() + t * pr.ldx(), pr.shape.headdim, 0.0f);
  }
}

TEST(KernelsSsdFold, EqualsReferenceOnEveryIsaAndThreadCount) {
  for (const SsdShape& shape : {kSmall, kLarge, kOdd, kOdd2, kWide}) {
    for (int n : {shape.chunk_size, 2 * shape.chunk_size + 5, 3}) {
      Problem pr = make_problem(shape, n, 15);
      add_floored_rows(pr);
      const ScanOut ref = run_scan(pr, 0, n, n, pr.s0.data(), /*reference=*/true);
      for (Isa isa : kAllIsas) {
        if (!cpu_has(isa)) continue;
        for (int threads : {1, 2}) {
          IsaGuard guard(isa);
          ThreadGuard tg(threads);
          const ScanOut o = run_scan(pr, 0, n, n, pr.s0.data());
          EXPECT_TRUE(same_bits(o.final_state.data(), ref.final_state.data(), o.final_state.size()))
              << isa_name(isa) << " threads " << threads << " H" << shape.nheads << " P" << shape.headdim << " N"
              << shape.dstate << " n" << n << ": "
              << count_bit_mismatches(o.final_state.data(), ref.final_state.data(), o.final_state.size())
              << " elements differ";
          EXPECT_TRUE(same_bits(o.chunk_states.data(), ref.chunk_states.data(), o.chunk_states.size()));
        }
      }
    }
  }
}

// The floor is where the fold and plain mode's SSU update part for a one-row fold: the same
// element sequence (c_0 = decay_f(0) · dt = dt), but SSU keeps exp_f's tiny factor where the fold
// takes 0. Above the floor they agree bit for bit; at dt*A = -72 (exp_f ~5e-32, still a normal
// float) a state of 1e30 keeps a visible remainder under SSU only.
TEST(KernelsSsdCompanion, OneRowFoldPartsFromSsuOnlyBelowTheFloor) {
  Problem pr = make_problem(kSmall, 1, 16);
  std::vector<float> S2 = pr.s0, y(pr.ldx());
  ScanOut f = run_scan(pr, 0, 1, 1, pr.s0.data());
  ssu_step(pr.shape, pr.x.data(), pr.dt.data(), pr.A.data(), pr.B.data(), pr.C.data(), pr.D.data(), S2.data(), y.data());
  EXPECT_TRUE(same_bits(f.final_state.data(), S2.data(), S2.size()));

  pr.A.assign(pr.A.size(), -16.0f);
  pr.dt.assign(pr.dt.size(), 4.5f);
  std::vector<float> big(S2.size(), 1e30f);
  S2 = big;
  f = run_scan(pr, 0, 1, 1, big.data());
  ssu_step(pr.shape, pr.x.data(), pr.dt.data(), pr.A.data(), pr.B.data(), pr.C.data(), pr.D.data(), S2.data(), y.data());
  EXPECT_GT(count_bit_mismatches(f.final_state.data(), S2.data(), S2.size()), S2.size() / 2);
}

// Companion of the fold's definition: the row-by-row recurrence (decay_f(dA_s)·S, then the row's
// FMA), mathematically the same state, rounds differently, so the bitwise checks above would see
// a path that folded the old way.
TEST(KernelsSsdCompanion, RowByRowRecurrenceDiffersFromTheFold) {
  const Problem pr = make_problem(kSmall, kSmall.chunk_size, 17);
  const ScanOut f = run_scan(pr, 0, pr.n, pr.n, pr.s0.data());
  std::vector<float> S = pr.s0;
  const SsdShape& sh = pr.shape;
  const int hpg = sh.nheads / sh.ngroups;
  for (int t = 0; t < pr.n; ++t)
    for (int h = 0; h < sh.nheads; ++h) {
      const float dt = pr.dt[size_t(t) * sh.nheads + h];
      const float e = dt * pr.A[h] < -60.0f ? 0.0f : exp_f(dt * pr.A[h]);
      const float* x = pr.x.data() + t * pr.ldx() + h * sh.headdim;
      const float* B = pr.B.data() + t * pr.ldb() + (h / hpg) * sh.dstate;
      for (int p = 0; p < sh.headdim; ++p)
        for (int k = 0; k < sh.dstate; ++k) {
          float& v = S[(size_t(h) * sh.headdim + p) * sh.dstate + k];
          v = std::fma(dt * x[p], B[k], e * v);
        }
    }
  EXPECT_LT(rel_max_err(f.final_state.data(), std::vector<double>(S.begin(), S.end())), 1e-5);
  EXPECT_GT(count_bit_mismatches(f.final_state.data(), S.data(), S.size()), S.size() / 10);
}

// ---------------------------------------------------------------------------------------------
// Companions: plain-mode schedules that are expected to change bits, so the checks above are
// known to be able to fail.

TEST(KernelsSsdCompanion, SsuDecodeDiffersFromScan) {
  const Problem pr = make_problem(kLarge, 300, 12);
  const ScanOut full = run_scan(pr, 0, pr.n, 0, pr.s0.data());
  const F64Run ref = recurrence_f64(pr);
  std::vector<float> S = pr.s0, y(full.y.size());
  for (int t = 0; t < pr.n; ++t)
    ssu_step(pr.shape, pr.x.data() + t * pr.ldx(), pr.dt.data() + size_t(t) * pr.shape.nheads, pr.A.data(),
             pr.B.data() + t * pr.ldb(), pr.C.data() + t * pr.ldb(), pr.D.data(), S.data(), y.data() + t * pr.ldx());
  const size_t bad = count_bit_mismatches(y.data(), full.y.data(), y.size());
  std::printf("  ssu vs ssd: %zu of %zu output elements differ in bits\n", bad, y.size());
  EXPECT_GT(bad, 0u);
  // Two roundings of the same math: both stay close to float64.
  EXPECT_LE(rel_max_err(y.data(), ref.y), kSsuRelBound);
}

TEST(KernelsSsdCompanion, RestartedChunkGridDiffers) {
  const Problem pr = make_problem(kLarge, kLargeN, 13);
  const ScanOut full = run_scan(pr, 0, pr.n, 0, pr.s0.data());
  for (int p : {100, 300, 513}) {
    // Plain chunked prefill: the second call starts a new chunk grid at p from the state at p.
    const ScanOut first = run_scan(pr, 0, p, 0, pr.s0.data());
    const ScanOut second = run_scan(pr, p, pr.n - p, 0, first.final_state.data());
    const size_t bad = count_bit_mismatches(second.y.data(), full.y.data() + p * pr.ldx(), second.y.size());
    std::printf("  grid restarted at %d: %zu of %zu output elements differ\n", p, bad, second.y.size());
    EXPECT_GT(bad, 0u);
  }
}

}  // namespace
}  // namespace parity::kernels
