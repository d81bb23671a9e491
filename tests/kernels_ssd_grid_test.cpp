// Exact-grid SSD kernels (DESIGN.md rules 6–7): ssd_scan_grid and ssd_grid_decode equal their
// scalar twin bit for bit on every instruction set and thread count; a row's bits and the
// boundary states do not depend on the schedule (single shot, token by token, splits on, before
// and after a cell boundary, random splits), with an fp32 or a bf16 state; the RFC layout (cell =
// chunk_size, no stagger) reproduces ssd_scan. Companions show the checks can fail: another
// stagger, another state dtype and the SSU decode change bits.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "isa_test_support.h"
#include "kernels/ssd_grid.h"
#include "kernels/stream_plan.h"
#include "ssd_test_support.h"

namespace parity::kernels {
namespace {

using namespace test;

// One sequence's exact-mode memory (boundary states + ring) and every output row it produced.
struct GridRun {
  std::vector<float> y, state_f32;
  std::vector<uint16_t> state_bf16;
  std::vector<float> rx, rdt, rb;
  GridState state() { return state_f32.empty() ? GridState{nullptr, state_bf16.data()} : GridState{state_f32.data(), nullptr}; }
  ReplayRing ring() { return {rx.data(), rdt.data(), rb.data()}; }
};

GridRun start_run(const Problem& pr, const ExactGrid& g, bool bf16) {
  GridRun r;
  r.y.assign(size_t(pr.n) * pr.ldx(), NAN);
  if (bf16) {
    for (float v : pr.s0) r.state_bf16.push_back(f32_to_bf16(v));
  } else {
    r.state_f32 = pr.s0;
  }
  const RingSizes rs = ring_sizes(pr.shape, g);
  r.rx.assign(size_t(rs.x), 0.0f);
  r.rdt.assign(size_t(rs.dt), 0.0f);
  r.rb.assign(size_t(rs.B), 0.0f);
  return r;
}

// Row p of the sequence as one decode row: its x, dt and B put in the ring, the row's pointers set.
GridDecodeRow decode_row(const Problem& pr, const ExactGrid& g, GridRun& r, int64_t p) {
  const int H = pr.shape.nheads;
  ring_put(pr.shape, g, r.ring(), p, pr.x.data() + p * pr.ldx(), pr.dt.data() + p * H, pr.B.data() + p * pr.ldb());
  GridDecodeRow d;
  d.pos = p;
  d.x_ring = r.rx.data();
  d.dt_ring = r.rdt.data();
  d.b_ring = r.rb.data();
  d.C = pr.C.data() + p * pr.ldb();
  d.state = r.state();
  d.y = r.y.data() + p * pr.ldx();
  return d;
}

// The stream fed in calls of the given sizes, as the model feeds it: a one-row call after row 0
// is a decode (ring, then ssd_grid_decode); any other call re-feeds each head's cell from the ring.
GridRun run_schedule(const Problem& pr, const ExactGrid& g, bool bf16, const std::vector<int>& calls) {
  const SsdShape& sh = pr.shape;
  const int H = sh.nheads;
  GridRun r = start_run(pr, g, bf16);
  int64_t start = 0;
  for (int n : calls) {
    if (n == 1 && start > 0) {
      const GridDecodeRow d = decode_row(pr, g, r, start);
      ssd_grid_decode(sh, g, pr.A.data(), pr.D.data(), &d, 1);
    } else {
      const int refeed = grid_refeed_rows(g, H, start);
      const int64_t pos0 = start - refeed;
      const int total = refeed + n;
      std::vector<float> x(size_t(total) * pr.ldx()), dt(size_t(total) * H), B(size_t(total) * pr.ldb());
      for (int i = 0; i < refeed; ++i)
        ring_get(sh, g, r.ring(), pos0 + i, x.data() + i * pr.ldx(), dt.data() + i * H, B.data() + i * pr.ldb());
      std::copy_n(pr.x.data() + start * pr.ldx(), size_t(n) * pr.ldx(), x.data() + refeed * pr.ldx());
      std::copy_n(pr.dt.data() + start * H, size_t(n) * H, dt.data() + refeed * H);
      std::copy_n(pr.B.data() + start * pr.ldb(), size_t(n) * pr.ldb(), B.data() + refeed * pr.ldb());
      ssd_scan_grid(sh, g, x.data(), dt.data(), pr.A.data(), B.data(), pr.C.data() + start * pr.ldb(), pr.D.data(), pos0,
                    total, refeed, r.state(), r.y.data() + start * pr.ldx());
      for (int64_t p = std::max<int64_t>(start, start + n - g.cell); p < start + n; ++p)
        ring_put(sh, g, r.ring(), p, pr.x.data() + p * pr.ldx(), pr.dt.data() + p * H, pr.B.data() + p * pr.ldb());
    }
    start += n;
  }
  return r;
}

std::vector<int> single_shot(int n) { return {n}; }
std::vector<int> token_by_token(int prompt, int n) {
  std::vector<int> c{prompt};
  for (int i = prompt; i < n; ++i) c.push_back(1);
  return c;
}
std::vector<int> random_splits(int n, uint32_t seed, int max_len) {
  std::mt19937 rng(seed);
  std::vector<int> c;
  for (int left = n; left > 0;) {
    const int k = std::min(left, 1 + int(rng() % uint32_t(max_len)));
    c.push_back(k);
    left -= k;
  }
  return c;
}

bool same_run(const GridRun& a, const GridRun& b) {
  return same_bits(a.y.data(), b.y.data(), a.y.size()) && a.state_f32 == b.state_f32 && a.state_bf16 == b.state_bf16;
}

ExactGrid grid_of(const SsdShape& sh, int cell, bool stagger) { return {cell, stagger, sh.nheads}; }

struct Case {
  SsdShape shape;
  int n, cell;
  bool stagger;
};
const Case kCases[] = {{kSmall, 100, 16, true}, {kSmall, 70, 8, false}, {kLarge, 150, 16, true},
                       {kLarge, 150, 64, true}, {kOdd, 61, 4, true},    {kWide, 40, 1, true}};

TEST(KernelsSsdGrid, ScanEqualsReferenceOnEveryIsaAndThreadCount) {
  for (const Case& c : kCases)
    for (bool bf16 : {false, true}) {
      const Problem pr = make_problem(c.shape, c.n, 3);
      const ExactGrid g = grid_of(c.shape, c.cell, c.stagger);
      GridRun want = start_run(pr, g, bf16);
      ssd_scan_grid_reference(pr.shape, g, pr.x.data(), pr.dt.data(), pr.A.data(), pr.B.data(), pr.C.data(),
                              pr.D.data(), 0, pr.n, 0, want.state(), want.y.data());
      for_each_isa_and_threads([&](Isa isa, int threads) {
        const GridRun got = run_schedule(pr, g, bf16, single_shot(pr.n));
        EXPECT_TRUE(same_run(got, want)) << isa_name(isa) << " threads " << threads << " cell " << c.cell
                                         << (bf16 ? " bf16" : " f32");
      });
    }
}

// Every schedule gives the single-shot bits: token-by-token decode from several prompt lengths
// (ending on, one before and one after a cell boundary), and random splits, on every ISA.
TEST(KernelsSsdGrid, EveryScheduleGivesSingleShotBits) {
  for (const Case& c : kCases)
    for (bool bf16 : {false, true}) {
      const Problem pr = make_problem(c.shape, c.n, 5);
      const ExactGrid g = grid_of(c.shape, c.cell, c.stagger);
      const GridRun want = run_schedule(pr, g, bf16, single_shot(pr.n));
      for (Isa isa : kAllIsas) {
        if (!cpu_has(isa)) continue;
        IsaGuard ig(isa);
        for (int prompt : {1, c.cell - 1, c.cell, c.cell + 1, 2 * c.cell + 3}) {
          if (prompt < 1 || prompt >= pr.n) continue;
          EXPECT_TRUE(same_run(run_schedule(pr, g, bf16, token_by_token(prompt, pr.n)), want))
              << isa_name(isa) << " decode after " << prompt << " cell " << c.cell << (bf16 ? " bf16" : " f32");
        }
        for (uint32_t seed = 1; seed <= (kSanitizerSample > 1 ? 1u : 4u); ++seed)
          EXPECT_TRUE(same_run(run_schedule(pr, g, bf16, random_splits(pr.n, seed, 2 * c.cell + 5)), want))
              << isa_name(isa) << " random splits seed " << seed << " cell " << c.cell << (bf16 ? " bf16" : " f32");
      }
    }
}

// The RFC layout: cell = chunk_size without stagger computes ssd_scan's rows and chunk states.
TEST(KernelsSsdGrid, RfcLayoutEqualsChunkedScan) {
  for (const SsdShape& sh : {kSmall, kLarge}) {
    const int n = sh.chunk_size * 2 + sh.chunk_size / 2;
    const Problem pr = make_problem(sh, n, 7);
    const GridRun got = run_schedule(pr, grid_of(sh, sh.chunk_size, false), false, token_by_token(sh.chunk_size / 3, n));
    std::vector<float> y(size_t(n) * pr.ldx()), states(2 * size_t(pr.state_elems())), fin(size_t(pr.state_elems()));
    ssd_scan(sh, pr.x.data(), pr.dt.data(), pr.A.data(), pr.B.data(), pr.C.data(), pr.D.data(), n, 0, pr.s0.data(),
             y.data(), states.data(), fin.data());
    EXPECT_TRUE(same_bits(got.y.data(), y.data(), y.size())) << "chunk " << sh.chunk_size;
    EXPECT_TRUE(same_bits(got.state_f32.data(), states.data() + pr.state_elems(), size_t(pr.state_elems())));
  }
}

// Accuracy against the float64 recurrence: the fp32 state as tight as the chunked scan's; the
// bf16 state rounds at every boundary, which costs about bf16's resolution relative to the state.
TEST(KernelsSsdGrid, AccuracyAgainstFloat64) {
  const Problem pr = make_problem(kLarge, 300, 11);
  const F64Run ref = recurrence_f64(pr);
  for (bool bf16 : {false, true}) {
    const GridRun got = run_schedule(pr, grid_of(pr.shape, 16, true), bf16, single_shot(pr.n));
    const double err = rel_max_err(got.y.data(), ref.y);
    if (bf16) {
      EXPECT_LT(err, 2e-2);
      EXPECT_GT(err, 1e-5) << "a bf16 state must cost something: is it rounded?";
    } else {
      EXPECT_LT(err, 1e-5);
    }
    std::fprintf(stderr, "[ measured ] exact grid 16, %s state: y max rel err %.3g\n", bf16 ? "bf16" : "f32", err);
  }
}

// Companions: the identity is real. Another stagger or dtype changes the bits, and plain mode's
// SSU decode differs from the grid's rows.
TEST(KernelsSsdGridCompanion, StaggerAndDtypeChangeBits) {
  const Problem pr = make_problem(kSmall, 100, 13);
  const GridRun spread = run_schedule(pr, grid_of(kSmall, 16, true), false, single_shot(pr.n));
  const GridRun none = run_schedule(pr, grid_of(kSmall, 16, false), false, single_shot(pr.n));
  const GridRun bf = run_schedule(pr, grid_of(kSmall, 16, true), true, single_shot(pr.n));
  EXPECT_GT(count_bit_mismatches(spread.y.data(), none.y.data(), spread.y.size()), 0u);
  EXPECT_GT(count_bit_mismatches(spread.y.data(), bf.y.data(), spread.y.size()), 0u);
}

TEST(KernelsSsdGridCompanion, SsuDecodeDiffersFromGridRows) {
  const Problem pr = make_problem(kSmall, 40, 17);
  const GridRun grid = run_schedule(pr, grid_of(kSmall, 16, true), false, single_shot(pr.n));
  std::vector<float> S = pr.s0, y(size_t(pr.n) * pr.ldx());
  for (int t = 0; t < pr.n; ++t)
    ssu_step(pr.shape, pr.x.data() + t * pr.ldx(), pr.dt.data() + t * kSmall.nheads, pr.A.data(), pr.B.data() + t * pr.ldb(),
             pr.C.data() + t * pr.ldb(), pr.D.data(), S.data(), y.data() + t * pr.ldx());
  EXPECT_GT(count_bit_mismatches(grid.y.data(), y.data(), y.size()), y.size() / 2);
}

// Several sequences decoded in one ssd_grid_decode call, each at its own position (so different
// heads fold in each), on every ISA, one and two threads with the work split however small: each
// sequence gets the bits of its own one-row-per-call decode (the thread split cuts the call's
// (sequence, head) items at different places, and a folding head prefetches the next item's state).
GridRun decode_batched(const std::vector<Problem>& prs, const std::vector<int>& prompts, const ExactGrid& g, bool bf16,
                       int seq) {
  std::vector<GridRun> runs;
  for (std::size_t i = 0; i < prs.size(); ++i) runs.push_back(run_schedule(prs[i], g, bf16, {prompts[i]}));
  const SsdShape& sh = prs[0].shape;
  for (int step = 0;; ++step) {
    std::vector<GridDecodeRow> rows;
    for (std::size_t i = 0; i < prs.size(); ++i) {
      const Problem& pr = prs[i];
      const int64_t p = prompts[i] + step;
      if (p >= pr.n) continue;
      rows.push_back(decode_row(pr, g, runs[i], p));
    }
    if (rows.empty()) break;
    ssd_grid_decode(sh, g, prs[0].A.data(), prs[0].D.data(), rows.data(), static_cast<int>(rows.size()));
  }
  return runs[std::size_t(seq)];
}

std::vector<Problem> batch_problems(const SsdShape& sh, int n, int count) {
  std::vector<Problem> prs;
  for (int i = 0; i < count; ++i) {
    Problem pr = make_problem(sh, n, 40u + i);
    if (i > 0) {  // one layer: A and D are shared by the sequences of a call
      pr.A = prs[0].A;
      pr.D = prs[0].D;
    }
    prs.push_back(pr);
  }
  return prs;
}

TEST(KernelsSsdGrid, BatchedDecodeGivesEachSequenceItsOwnBits) {
  for (const SsdShape& sh : {kSmall, kLarge}) {
    const std::vector<Problem> prs = batch_problems(sh, 40, 5);
    const std::vector<int> prompts = {3, 8, 9, 14, 1};
    const ExactGrid g = grid_of(sh, 8, true);
    for (bool bf16 : {false, true}) {
      std::vector<GridRun> want;
      for (std::size_t i = 0; i < prs.size(); ++i)
        want.push_back(run_schedule(prs[i], g, bf16, token_by_token(prompts[i], prs[i].n)));
      for (Isa isa : kAllIsas) {
        if (!cpu_has(isa)) continue;
        IsaGuard ig(isa);
        for (int threads : {1, 2}) {
          ThreadGuard tg(threads);
          set_force_parallel(threads > 1);
          for (int i = 0; i < static_cast<int>(prs.size()); ++i)
            EXPECT_TRUE(same_run(decode_batched(prs, prompts, g, bf16, i), want[std::size_t(i)]))
                << isa_name(isa) << " threads " << threads << " sequence " << i << (bf16 ? " bf16" : " f32")
                << " heads " << sh.nheads;
          set_force_parallel(false);
        }
      }
    }
  }
}

// Companion: the comparison sees a batched decode on another grid (cell 4: other heads fold at
// other steps).
TEST(KernelsSsdGridCompanion, BatchedDecodeOnAnotherGridDiffers) {
  const std::vector<Problem> prs = batch_problems(kSmall, 40, 3);
  const GridRun a = decode_batched(prs, {3, 8, 9}, grid_of(kSmall, 8, true), true, 1);
  const GridRun b = decode_batched(prs, {3, 8, 9}, grid_of(kSmall, 4, true), true, 1);
  EXPECT_FALSE(same_run(a, b));
  EXPECT_GT(count_bit_mismatches(a.y.data() + 9 * prs[1].ldx(), b.y.data() + 9 * prs[1].ldx(),
                                 size_t(prs[1].n - 9) * prs[1].ldx()),
            0u);
}

// The AVX-512 decode computes CB(pos, s) once per (sequence, group) for the positions from the
// earliest cell start of any head to pos, and each head reads its cell's part; the scalar twin
// (Portable) computes every head's CB itself. Token by token from row 1, so that every position of
// every head's cell decodes, including the first cells (cut short by the stagger), on shapes with
// one, two and three groups, cells of 1 to 64 rows: the two paths give the same rows and states.
TEST(KernelsSsdGrid, DecodeSharedCbEqualsScalarTwin) {
  const Case cases[] = {{kSmall, 40, 8, true}, {kOdd, 30, 4, true}, {kLarge, 80, 64, true},
                        {kLarge, 40, 8, false}, {kWide, 12, 1, true}, {kOdd2, 40, 16, true}};
  for (const Case& c : cases)
    for (bool bf16 : {false, true}) {
      const Problem pr = make_problem(c.shape, c.n, 23);
      const ExactGrid g = grid_of(c.shape, c.cell, c.stagger);
      GridRun scalar;
      {
        IsaGuard ig(Isa::Portable);
        scalar = run_schedule(pr, g, bf16, token_by_token(1, pr.n));
      }
      if (!cpu_has(Isa::Avx512)) continue;
      IsaGuard ig(Isa::Avx512);
      EXPECT_TRUE(same_run(run_schedule(pr, g, bf16, token_by_token(1, pr.n)), scalar))
          << "cell " << c.cell << " groups " << c.shape.ngroups << (bf16 ? " bf16" : " f32");
    }
}

// The stream plans (kernels/stream_plan.h) change how the decode streams the state (prefetches,
// bf16 rows one or four at a time, c in registers at dstate 128), never an operation: token-by-token
// decode at mamba2-130m's head shape gives the scalar twin's bits under every plan. (The companion
// below shows the comparison sees a one-element change.)
TEST(KernelsSsdGrid, EveryStreamPlanDecodesTheScalarTwinsBits) {
  if (!cpu_has(Isa::Avx512)) return;  // the plans only steer the AVX-512 kernels (recorded by cpu_has)
  const Problem pr = make_problem(kLarge, 40, 31);
  const ExactGrid g = grid_of(kLarge, 8, true);
  for (bool bf16 : {false, true}) {
    GridRun scalar;
    {
      IsaGuard ig(Isa::Portable);
      scalar = run_schedule(pr, g, bf16, token_by_token(1, pr.n));
    }
    IsaGuard ig(Isa::Avx512);
    for (const StreamPlan& plan : stream_plans()) {
      set_stream_plan(plan);
      EXPECT_TRUE(same_run(run_schedule(pr, g, bf16, token_by_token(1, pr.n)), scalar))
          << plan.name << (bf16 ? " bf16" : " f32");
    }
    clear_stream_plan();
  }
}

// Companion: the comparison above sees one decode step whose C differs in one element (so one
// step's CB, shared by the heads of a group, differs): that row differs in the group's heads, and
// neither the rows before it nor the other group's heads do.
TEST(KernelsSsdGridCompanion, DecodeWithAnotherCDiffers) {
  const Problem pr = make_problem(kSmall, 30, 23);
  Problem other = pr;
  const int step = 13;
  other.C[size_t(step) * pr.ldb() + 3] += 0.25f;
  const ExactGrid g = grid_of(kSmall, 8, true);
  const GridRun a = run_schedule(pr, g, false, token_by_token(1, pr.n));
  const GridRun b = run_schedule(other, g, false, token_by_token(1, pr.n));
  EXPECT_TRUE(same_bits(a.y.data(), b.y.data(), size_t(step) * pr.ldx()));
  // kSmall: 4 heads, 2 groups; element 3 of the row's C belongs to group 0 (heads 0 and 1).
  const size_t half = size_t(pr.ldx()) / 2;
  EXPECT_GT(count_bit_mismatches(a.y.data() + step * pr.ldx(), b.y.data() + step * pr.ldx(), half), half * 3 / 4);
  EXPECT_TRUE(same_bits(a.y.data() + step * pr.ldx() + half, b.y.data() + step * pr.ldx() + half, half));
}

TEST(KernelsSsdGrid, StaggerSpreadsTheFoldsOverTheSteps) {
  for (int cell : {4, 16, 64}) {
    const ExactGrid g{cell, true, 24};
    for (int64_t pos = 0; pos < 4 * cell; ++pos) {
      int folds = 0;
      for (int h = 0; h < 24; ++h) {
        const int64_t b = g.cell_start(h, pos);
        ASSERT_LE(b, pos);
        ASSERT_LT(pos - b, cell) << "a cell holds at most `cell` rows";
        folds += pos + 1 == g.cell_end(h, b);
      }
      EXPECT_LE(folds, (24 + cell - 1) / cell) << "cell " << cell << " pos " << pos;
    }
  }
}

// x read in place from wider rows gives the packed rows' bits on the exact grid too (every ISA,
// both thread counts, both state dtypes, the twin); the companion reads them as packed rows.
TEST(KernelsSsdGrid, StridedXGivesPackedBits) {
  for (const Case& c : kCases)
    for (bool bf16 : {false, true}) {
      const Problem pr = make_problem(c.shape, c.n, 5);
      const ExactGrid g = grid_of(c.shape, c.cell, c.stagger);
      const int64_t stride = pr.ldx() + 2 * pr.ldb() + 3;
      const std::vector<float> xs = strided_x(pr, stride);
      GridRun want = start_run(pr, g, bf16);
      ssd_scan_grid_reference(pr.shape, g, pr.x.data(), pr.dt.data(), pr.A.data(), pr.B.data(), pr.C.data(),
                              pr.D.data(), 0, pr.n, 0, want.state(), want.y.data());
      auto strided = [&](bool reference, int64_t ld) {
        GridRun r = start_run(pr, g, bf16);
        (reference ? ssd_scan_grid_reference : ssd_scan_grid)(pr.shape, g, xs.data(), pr.dt.data(), pr.A.data(),
                                                              pr.B.data(), pr.C.data(), pr.D.data(), 0, pr.n, 0,
                                                              r.state(), r.y.data(), ld);
        return r;
      };
      EXPECT_TRUE(same_run(strided(true, stride), want)) << "reference cell " << c.cell;
      for_each_isa_and_threads([&](Isa isa, int threads) {
        EXPECT_TRUE(same_run(strided(false, stride), want))
            << isa_name(isa) << " threads " << threads << " cell " << c.cell << (bf16 ? " bf16" : " f32");
      });
      EXPECT_FALSE(same_run(strided(false, 0), want)) << "companion, cell " << c.cell;
    }
}

TEST(KernelsSsdGrid, RejectsBadArguments) {
  const Problem pr = make_problem(kSmall, 20, 1);
  GridRun r = start_run(pr, grid_of(kSmall, 16, true), false);
  auto call = [&](const ExactGrid& g, int64_t pos0, int first_out) {
    ssd_scan_grid(pr.shape, g, pr.x.data(), pr.dt.data(), pr.A.data(), pr.B.data(), pr.C.data(), pr.D.data(), pos0,
                  pr.n, first_out, r.state(), r.y.data());
  };
  EXPECT_THROW(call(grid_of(kSmall, 12, true), 0, 0), Error);  // not a power of two
  EXPECT_THROW(call(grid_of(kSmall, 16, true), 20, 0), Error);  // heads' cells start before the call
  EXPECT_THROW(call({16, true, 3}, 0, 0), Error);               // grid for another head count
  EXPECT_THROW(ssd_scan_grid(pr.shape, grid_of(kSmall, 16, true), pr.x.data(), pr.dt.data(), pr.A.data(), pr.B.data(),
                             pr.C.data(), pr.D.data(), 0, pr.n, 0, r.state(), r.y.data(), pr.ldx() - 1),
               Error);  // an x row stride shorter than a row
  EXPECT_NO_THROW(call(grid_of(kSmall, 16, true), 0, 0));
}

}  // namespace
}  // namespace parity::kernels
