// Probe points under tensor parallelism (docs/tensor-parallel.md, "Capture and tensor replacement"): a
// capture at TP = 2 has TP = 1's names and shapes and its values within tolerance (sharded points are
// gathered to their whole width); a replacement given unsharded gives the same logits at TP = 1 and
// TP = 2 within tolerance (each rank takes its slice); a hook that fails on one rank fails the pass
// with its own message and leaves the model usable.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "accuracy/captures_file.h"
#include "accuracy/replacement_hooks.h"
#include "accuracy/tensor_replacer.h"
#include "common/error.h"
#include "model/model.h"
#include "test_support.h"

using namespace parity;
using model::ScanMode;

namespace {

// Intermediate tensors at TP = 2 against TP = 1, relative to the tensor's largest magnitude (at least
// 1): measured at most 2e-6 on these fixtures.
constexpr float kTpRelTolerance = 1e-4f;

struct Seen {
  std::vector<std::string> order;
  std::map<std::string, accuracy::Matrix> tensors;
};

// Keeps every probe point's tensor of a single-shot pass.
class RecordAll : public model::ProbeHooks {
 public:
  explicit RecordAll(Seen& s) : s_(s) {}
  bool wants(const std::string&) const override { return true; }
  void visit(const std::string& name, float* data, int rows, int cols, const model::ProbeRows&) override {
    s_.order.push_back(name);
    accuracy::Matrix& m = s_.tensors[name];
    m.rows = rows;
    m.cols = cols;
    m.data.assign(data, data + std::size_t(rows) * std::size_t(cols));
  }

 private:
  Seen& s_;
};

std::vector<int32_t> prompt(const model::Model& m) {
  std::vector<int32_t> t;
  for (int i = 0; i < m.chunk_size() + 9; ++i) t.push_back(static_cast<int32_t>((i * 37 + 5) % m.vocab_size()));
  return t;
}

float rel_diff(const accuracy::Matrix& a, const accuracy::Matrix& b) {
  float d = 0, scale = 1;
  for (std::size_t i = 0; i < a.data.size(); ++i) {
    d = std::max(d, std::fabs(a.data[i] - b.data[i]));
    scale = std::max(scale, std::fabs(a.data[i]));
  }
  return d / scale;
}

class TensorParallelProbes : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelProbes, CaptureAtTp2MatchesTp1NamesShapesAndValues) {
  const auto& one = test::cached_model(GetParam());
  const auto& two = test::cached_model(GetParam(), {}, 2);
  const auto t = prompt(one);
  Seen a, b;
  RecordAll ha(a), hb(b);
  model::score_all_rows(one, t, ScanMode::Exact, &ha);
  model::score_all_rows(two, t, ScanMode::Exact, &hb);
  ASSERT_EQ(a.order, b.order);
  EXPECT_EQ(a.order.size(), one.probe_points().size());
  float worst = 0;
  for (const std::string& name : a.order) {
    SCOPED_TRACE(name);
    const accuracy::Matrix &x = a.tensors[name], &y = b.tensors[name];
    ASSERT_EQ(x.rows, y.rows);
    ASSERT_EQ(x.cols, y.cols);
    const float d = rel_diff(x, y);
    worst = std::max(worst, d);
    EXPECT_LE(d, kTpRelTolerance);
  }
  std::fprintf(stderr, "[ tp2-tp1  ] %s: %zu probe points, worst relative |delta| %.3g\n", GetParam().c_str(),
               a.order.size(), double(worst));
}

// Probe points to replace: the first sharded Mamba in_proj, the first attention q_proj (sharded by KV
// heads) and the first MoE router (replicated, intercepted before it is computed) the model has.
std::vector<std::string> replaced_points(const model::Model& m) {
  std::vector<std::string> out;
  bool in_proj = false, q = false, router = false;
  for (const auto& p : m.probe_points()) {
    if (!in_proj && p.meaning.rfind("in_proj output", 0) == 0) out.push_back(p.name), in_proj = true;
    if (!q && p.meaning.rfind("q_proj output", 0) == 0) out.push_back(p.name), q = true;
    if (!router && p.meaning.rfind("router logits", 0) == 0) out.push_back(p.name), router = true;
  }
  return out;
}

std::vector<float> score_replaced(const model::Model& m, const std::vector<int32_t>& t,
                                  std::map<std::string, accuracy::Matrix> reference) {
  accuracy::TensorReplacer r({std::move(reference)}, {t});
  r.register_request(0, t);
  accuracy::ReplacementHooks hooks(r);
  return model::score_all_rows(m, t, ScanMode::Exact, &hooks);
}

TEST_P(TensorParallelProbes, UnshardedReplacementGivesTp1LogitsAtTp2) {
  const auto& one = test::cached_model(GetParam());
  const auto& two = test::cached_model(GetParam(), {}, 2);
  const auto t = prompt(one);
  Seen seen;
  RecordAll rec(seen);
  const auto plain = model::score_all_rows(one, t, ScanMode::Exact, &rec);
  // The reference: TP = 1's own tensors, changed enough to move the logits.
  std::map<std::string, accuracy::Matrix> ref;
  for (const std::string& name : replaced_points(one)) {
    accuracy::Matrix m = seen.tensors.at(name);
    for (std::size_t i = 0; i < m.data.size(); ++i) m.data[i] = m.data[i] * 0.5f + float(i % 7) * 0.05f;
    ref[name] = std::move(m);
  }
  ASSERT_FALSE(ref.empty());
  const auto a = score_replaced(one, t, ref), b = score_replaced(two, t, ref);
  float moved = 0, d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    moved = std::max(moved, std::fabs(a[i] - plain[i]));
    d = std::max(d, std::fabs(a[i] - b[i]));
  }
  std::fprintf(stderr, "[ tp2-tp1  ] %s: %zu points replaced, logits moved by %.3g, TP 2 vs 1 %.3g\n",
               GetParam().c_str(), ref.size(), double(moved), double(d));
  EXPECT_GT(moved, 0.01f) << "the replacement must change the logits for the comparison to mean anything";
  EXPECT_LE(d, 1e-4f);
}

TEST_P(TensorParallelProbes, AFailingHookFailsThePassWithItsMessageAndTheModelStaysUsable) {
  const auto& two = test::cached_model(GetParam(), {}, 2);
  const auto t = prompt(two);
  const auto before = model::score_all_rows(two, t, ScanMode::Exact);
  const std::string name = replaced_points(two).front();
  accuracy::Matrix wrong;  // one feature too few: refused when the point is visited on rank 0
  wrong.rows = static_cast<int64_t>(t.size());
  wrong.cols = 3;
  wrong.data.assign(std::size_t(wrong.rows * wrong.cols), 0.0f);
  try {
    score_replaced(two, t, {{name, wrong}});
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
    EXPECT_LE(rel_diff(m, n), kTpRelTolerance) << name;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
