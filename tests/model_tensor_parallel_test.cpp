// Tensor parallelism on CPU ranks (docs/tensor-parallel.md): exact mode stays bit-identical under every
// schedule at TP = 2 (with the plain-mode companion), TP = 2 stays within a stated tolerance of TP = 1,
// thread counts do not move TP = 2's bits, splits that do not fit are refused, and the collective sums
// in rank order.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "common/error.h"
#include "engine/exactness_gate.h"
#include "kernels/isa.h"
#include "model/column_split.h"
#include "model/in_process_collective.h"
#include "model/tensor_parallel_model.h"
#include "test_support.h"
#include "tp_compare_support.h"

using namespace parity;
using model::ScanMode;

namespace {

// TP = 2 against TP = 1 on the logits: each row-split projection adds two partial sums instead of
// running one K-chain, so the bits differ; measured max |Δ| on the fixtures below is 7.2e-6 (logits up
// to |9|), the bound leaves a margin of about 14×.
constexpr float kTpLogitTolerance = 1e-4f;

// The models: the built-ins whose shapes split in two: tiny-g2 (Mamba2, n_groups 2), tiny-hybrid-g2
// (GraniteMoeHybrid: RoPE attention, the softmax-routed MoE and shared MLP, µP multipliers), tiny-nemotron-h (Mamba2,
// attention with 2 KV heads, ReLU² MLP and a sigmoid-routed MoE with a shared expert), tiny-falcon-h1
// (attention beside Mamba2, SwiGLU MLP, µP multipliers).

class TensorParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallel, Tp2LogitsWithinToleranceOfTp1) {
  const auto& one = test::cached_model(GetParam());
  const auto& two = test::cached_model(GetParam(), {}, 2);
  EXPECT_EQ(two.probe_points().size(), one.probe_points().size());
  test::expect_tp2_near_tp1(one, two, test::random_tokens(7, 3 * one.chunk_size() + 5, one.vocab_size()), GetParam(),
                            test::max_abs_bound(kTpLogitTolerance));
}

TEST_P(TensorParallel, ExactModeBitIdenticalInEveryGateScenarioAtTp2) {
  const auto& m = test::cached_model(GetParam(), {}, 2);
  const int cs = m.chunk_size();
  engine::GateOptions g;
  g.prompt_len = 2 * cs + cs / 3 + 1;
  g.forced_len = cs + 6;
  g.modes = {ScanMode::Exact};
  const auto res = engine::run_exactness_gate(m, g);
  ASSERT_EQ(res.size(), 2 * (engine::gate_scenarios().size() + 2));
  for (const auto& r : res) {
    SCOPED_TRACE(r.scenario + " " + r.numerics.describe());
    if (!r.not_run.empty()) {
      EXPECT_EQ(r.scenario.rfind("isa-", 0), 0u) << "only an instruction set this CPU lacks may be skipped";
      continue;
    }
    EXPECT_GT(r.all.rows, 0);
    EXPECT_EQ(r.all.mismatched, 0);
    EXPECT_EQ(r.max_abs, 0.0f);
  }
}

// The companion: the same scenarios in plain mode find differences at TP = 2, so the assertions above
// can fail.
TEST_P(TensorParallel, PlainModeDiffersAcrossSchedulesAtTp2) {
  const auto& m = test::cached_model(GetParam(), {}, 2);
  const int cs = m.chunk_size();
  engine::GateOptions g;
  g.prompt_len = 2 * cs + cs / 3 + 1;
  g.forced_len = cs + 6;
  g.modes = {ScanMode::Plain};
  g.scenarios = {"decode", "chunked-prefill", "preempt-recompute", "concurrent-8"};
  const auto res = engine::run_exactness_gate(m, g);
  ASSERT_EQ(res.size(), g.scenarios.size());
  for (const auto& r : res) {
    SCOPED_TRACE(r.scenario);
    EXPECT_GT(r.all.mismatched, 0);
  }
}

TEST_P(TensorParallel, ThreadCountsDoNotChangeTp2Bits) {
  const auto& m = test::cached_model(GetParam(), {}, 2);
  const auto t = test::random_tokens(11, 2 * m.chunk_size() + 3, m.vocab_size());
  const int threads = kernels::num_threads();
  kernels::set_num_threads(1);
  const auto a = model::score_all_rows(m, t, ScanMode::Exact);
  kernels::set_num_threads(3);
  kernels::set_force_parallel(true);  // small models would otherwise run every kernel on one thread
  const auto b = model::score_all_rows(m, t, ScanMode::Exact);
  kernels::set_force_parallel(false);
  kernels::set_num_threads(threads);
  EXPECT_TRUE(test::same_bits(a, b));
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallel,
                         ::testing::Values("builtin:tiny-g2", "builtin:tiny-hybrid-g2", "builtin:tiny-nemotron-h",
                                           "builtin:tiny-falcon-h1"),
                         test::builtin_param_name);

// What a check reports when run on purpose where it must fail; the failures are not this test's.
template <class F>
std::vector<std::string> failures_of(F check) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter intercept(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    check();
  }
  std::vector<std::string> out;
  for (int i = 0; i < results.size(); ++i) out.push_back(results.GetTestPartResult(i).message());
  return out;
}

bool any_contains(const std::vector<std::string>& messages, const std::string& what) {
  for (const std::string& m : messages)
    if (m.find(what) != std::string::npos) return true;
  return false;
}

// The companion of the shared comparisons (tp_compare_support.h), which the CPU and the GPU tests both rely
// on: each fails where it must, so their passes above mean something.
TEST(TensorParallelCompare, TheSharedChecksFailOnAnUnsplitModelAndOnAGapPastTheirBound) {
  const auto& one = test::cached_model("builtin:tiny-g2");
  const auto& two = test::cached_model("builtin:tiny-g2", {}, 2);
  const auto t = test::random_tokens(13, one.chunk_size() + 9, one.vocab_size());
  const auto unsplit = failures_of([&] { test::expect_tp2_near_tp1(one, one, t, "tp1 twice", test::max_abs_bound(1)); });
  EXPECT_EQ(unsplit.size(), 2u);  // exact and plain
  EXPECT_TRUE(any_contains(unsplit, "was the model split at all")) << ::testing::PrintToString(unsplit);
  const auto tight =
      failures_of([&] { test::expect_tp2_near_tp1(one, two, t, "tight", test::relative_bound(1e-12)); });
  EXPECT_EQ(tight.size(), 2u);
  EXPECT_TRUE(any_contains(tight, "(TP 2) vs")) << ::testing::PrintToString(tight);
  EXPECT_FALSE(failures_of([&] { test::expect_tp2_captures_near_tp1(one, two, t, "tight", 1e-12); }).empty());
  EXPECT_FALSE(
      failures_of([&] { test::expect_tp2_replacement_near_tp1(one, two, t, "tight", test::max_abs_bound(1e-12f)); })
          .empty());
}

std::string tp_load_error(const std::string& spec, int tp) {
  try {
    model::load_model(model::open_checkpoint(spec), tp);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TensorParallelSplit, CuttingAGatedNormGroupIsRefusedNamingNGroups) {
  const std::string e1 = tp_load_error("builtin:tiny", 2);  // n_groups = 1
  EXPECT_NE(e1.find("n_groups = 1"), std::string::npos) << e1;
  EXPECT_NE(e1.find("tensor parallel size 2"), std::string::npos) << e1;
  const std::string e2 = tp_load_error("builtin:tiny-g2", 4);  // n_groups = 2
  EXPECT_NE(e2.find("n_groups = 2"), std::string::npos) << e2;
  EXPECT_NE(e2.find("tensor parallel size 4"), std::string::npos) << e2;
  EXPECT_NE(tp_load_error("builtin:tiny-hybrid", 2).find("n_groups = 1"), std::string::npos);
}

TEST(TensorParallelSplit, TheCliRefusesItBeforeRunning) {
  const auto r = test::run_cli("score builtin:tiny --tokens 1,2,3 --out /dev/null --tensor-parallel-size 2");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("n_groups = 1 is not a multiple of 2"), std::string::npos) << r.err;
}

TEST(TensorParallelSplit, VerifyRunsTheGateAtTp2) {
  const auto r = test::run_cli("verify builtin:tiny-g2 --tensor-parallel-size 2");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
}

TEST(TensorParallelSplit, ACacheBuiltForAnotherTpSizeIsRefused) {
  const auto& one = test::cached_model("builtin:tiny-g2");
  const auto& two = test::cached_model("builtin:tiny-g2", {}, 2);
  cache::ModelCache c = cache::make_single_cache(one.cache_spec(), 4, model::default_numerics(one, ScanMode::Exact));
  model::ForwardBatch b;
  b.tokens = {1, 2, 3};
  b.seqs.push_back({c.allocate(), 0, 3});
  std::vector<float> logits;
  EXPECT_THROW(two.forward(b, c, ScanMode::Exact, logits.data()), Error);
}

TEST(TensorParallelCollective, SumsPartialsInRankOrderOnEveryRank) {
  // Values whose sum depends on the order: ((a + b) + c) differs from (a + (b + c)).
  const float p[3] = {1.0f, 1e8f, -1e8f};
  model::InProcessCollective c(3);
  float got[3];
  std::vector<std::thread> ts;
  for (int r = 0; r < 3; ++r)
    ts.emplace_back([&, r] {
      got[r] = p[r];
      c.sum_partials(r, &got[r], 1);
    });
  for (auto& t : ts) t.join();
  const float want = (p[0] + p[1]) + p[2];
  for (float g : got) EXPECT_TRUE(test::same_bits(&g, &want, 1));
  EXPECT_NE(want, p[0] + (p[1] + p[2]));
}

TEST(TensorParallelCollective, AbortReleasesWaitingRanks) {
  model::InProcessCollective c(2);
  std::thread waiter([&] {
    float v = 0;
    EXPECT_THROW(c.broadcast(1, &v, 1), model::CollectiveAborted);
  });
  c.abort();
  waiter.join();
  c.reset();
  float a = 5, b = 0;
  std::thread t([&] { c.broadcast(1, &b, 1); });
  c.broadcast(0, &a, 1);
  t.join();
  EXPECT_EQ(b, 5.0f);
}

TEST(TensorParallelColumns, GatherThenTakeRoundTripsEverySegmentPiece) {
  const model::ColumnSplit split{{4, 2, 6}};  // e.g. [x | B | dt]; rank r holds piece r of each
  const int tp = 2, rows = 3, W = 12, L = 6;
  std::vector<float> whole(rows * W), all(std::size_t(tp) * rows * L), back(rows * W);
  for (int i = 0; i < rows * W; ++i) whole[std::size_t(i)] = float(i);
  for (int r = 0; r < tp; ++r) model::take_columns(split, r, tp, whole.data(), rows, all.data() + r * rows * L);
  // rank 1, row 0: x columns 2..3, B column 5, dt columns 9..11
  const std::vector<float> want{2, 3, 5, 9, 10, 11};
  EXPECT_EQ(std::vector<float>(all.begin() + rows * L, all.begin() + rows * L + L), want);
  model::gather_columns(split, tp, all.data(), rows, back.data());
  EXPECT_EQ(back, whole);
}

}  // namespace
