// Probe points under tensor parallelism (docs/tensor-parallel.md, "Capture and tensor replacement"): a
// capture at TP = 2 has TP = 1's names and shapes and its values within tolerance (sharded points are
// gathered to their whole width); a replacement given unsharded gives the same logits at TP = 1 and
// TP = 2 within tolerance (each rank takes its slice); a hook that fails on one rank fails the pass
// with its own message and leaves the model usable.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "accuracy/captures_file.h"
#include "common/error.h"
#include "model/model.h"
#include "test_support.h"
#include "tp_compare_support.h"

using namespace parity;
using model::ScanMode;

namespace {

// Intermediate tensors at TP = 2 against TP = 1, relative to the tensor's largest magnitude (at least
// 1): measured at most 2e-6 on these fixtures.
constexpr float kTpRelTolerance = 1e-4f;

std::vector<int32_t> chunk_crossing_prompt(const model::Model& m) {
  std::vector<int32_t> t;
  for (int i = 0; i < m.chunk_size() + 9; ++i) t.push_back(static_cast<int32_t>((i * 37 + 5) % m.vocab_size()));
  return t;
}

class TensorParallelProbes : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelProbes, CaptureAtTp2MatchesTp1NamesShapesAndValues) {
  const auto& one = test::cached_model(GetParam());
  test::expect_tp2_captures_near_tp1(one, test::cached_model(GetParam(), {}, 2), chunk_crossing_prompt(one), GetParam(),
                                     kTpRelTolerance);
}

TEST_P(TensorParallelProbes, UnshardedReplacementGivesTp1LogitsAtTp2) {
  const auto& one = test::cached_model(GetParam());
  test::expect_tp2_replacement_near_tp1(one, test::cached_model(GetParam(), {}, 2), chunk_crossing_prompt(one),
                                        GetParam(), test::max_abs_bound(1e-4f));
}

TEST_P(TensorParallelProbes, AFailingHookFailsThePassWithItsMessageAndTheModelStaysUsable) {
  const auto& two = test::cached_model(GetParam(), {}, 2);
  const auto t = chunk_crossing_prompt(two);
  const auto before = model::score_all_rows(two, t, ScanMode::Exact);
  const std::string name = test::replaced_points(two).front();
  accuracy::Matrix wrong;  // one feature too few: refused when the point is visited on rank 0
  wrong.rows = static_cast<int64_t>(t.size());
  wrong.cols = 3;
  wrong.data.assign(std::size_t(wrong.rows * wrong.cols), 0.0f);
  try {
    test::score_replaced(two, t, {{name, wrong}});
    ADD_FAILURE() << "expected the replacement to be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("features in the reference"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(test::same_bits(model::score_all_rows(two, t, ScanMode::Exact), before));
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallelProbes,
                         ::testing::Values("builtin:tiny-g2", "builtin:tiny-nemotron-h", "builtin:tiny-falcon-h1"),
                         test::builtin_param_name);

TEST(TensorParallelProbesCli, CaptureAtTp2WritesTp1sModulesAndShapes) {
  auto dir = test::scratch_dir("tp_capture");
  const std::string common = "capture builtin:tiny-nemotron-h --prompt 1,2,3,4,5,6,7 --forced 8,9,10 "
                             "--modules 're:.*' --out ";
  const auto r1 = test::run_cli(common + (dir / "tp1.safetensors").string());
  const auto r2 = test::run_cli(common + (dir / "tp2.safetensors").string() + " --tensor-parallel-size 2");
  ASSERT_EQ(r1.status, 0) << r1.err;
  ASSERT_EQ(r2.status, 0) << r2.err;
  const auto a = accuracy::read_captures((dir / "tp1.safetensors").string());
  const auto b = accuracy::read_captures((dir / "tp2.safetensors").string());
  ASSERT_EQ(accuracy::captured_modules(a), accuracy::captured_modules(b));
  for (const auto& [name, m] : a.prompts.at(0).flat) {
    const auto& n = b.prompts.at(0).flat.at(name);
    EXPECT_EQ(m.rows, n.rows) << name;
    EXPECT_EQ(m.cols, n.cols) << name;
    EXPECT_LE(test::tensor_rel_diff(m, n), kTpRelTolerance) << name;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
