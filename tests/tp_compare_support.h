#pragma once
// TP = 2 against TP = 1: the comparisons the CPU ranks' tests (model_tensor_parallel_test.cpp,
// accuracy_tensor_parallel_test.cpp) and the GPU ranks' (cuda/cuda_tensor_parallel_test.cpp) all make,
// written once: the logits of a single-shot pass in exact and plain mode, every probe point's tensor, and the
// logits under an unsharded tensor replacement. The suites differ only in their tokens and the bounds they
// pass: absolute ones on the CPU (fp32 throughout), relative ones on the GPU (bf16 GEMM inputs). No CUDA
// here: the CPU suite includes it. Each check prints its measured figures as "[ tp2-tp1  ] LABEL …".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "accuracy/captures_file.h"
#include "accuracy/replacement_hooks.h"
#include "accuracy/tensor_replacer.h"
#include "engine/exactness_gate.h"
#include "float_compare.h"
#include "model/model.h"

namespace parity::test {

// How far got is from ref: ‖got − ref‖ / ‖ref‖, and the largest |got − ref| and where.
struct LogitGap {
  double relative = 0;
  float max_abs = 0;
  std::size_t worst = 0;
};

inline LogitGap logit_gap(const std::vector<float>& got, const std::vector<float>& ref) {
  LogitGap g;
  g.relative = relative_error(got, ref.data());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::fabs(got[i] - ref[i]) > g.max_abs) g.max_abs = std::fabs(got[i] - ref[i]), g.worst = i;
  return g;
}

// What TP = 2's logits may differ by; an unset bound is not checked.
struct TpBound {
  std::optional<float> max_abs;
  std::optional<double> relative;
};
inline TpBound max_abs_bound(float b) { return {b, std::nullopt}; }
inline TpBound relative_bound(double b) { return {std::nullopt, b}; }

inline void expect_within(const LogitGap& d, const TpBound& bound, const std::vector<float>& tp2,
                          const std::vector<float>& tp1) {
  const std::string where = "worst at " + std::to_string(d.worst) + ": " + std::to_string(tp2[d.worst]) +
                            " (TP 2) vs " + std::to_string(tp1[d.worst]) + " (TP 1)";
  if (bound.max_abs) {
    EXPECT_LE(d.max_abs, *bound.max_abs) << where;
  }
  if (bound.relative) {
    EXPECT_LE(d.relative, *bound.relative) << where;
  }
}

// Scores `tokens` on one (TP = 1) and two (TP = 2) in exact and plain mode. Per mode: the gap within
// `bound`, and the bits differ (a row-split projection adds partial sums instead of running one K chain:
// equal bits would mean the model was not split at all).
inline void expect_tp2_near_tp1(const model::Model& one, const model::Model& two, const std::vector<int32_t>& tokens,
                                const std::string& label, const TpBound& bound) {
  for (model::ScanMode mode : {model::ScanMode::Exact, model::ScanMode::Plain}) {
    SCOPED_TRACE(label + " " + engine::mode_name(mode));
    const auto a = model::score_all_rows(one, tokens, mode), b = model::score_all_rows(two, tokens, mode);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_FALSE(a.empty());
    const LogitGap d = logit_gap(b, a);
    std::fprintf(stderr, "[ tp2-tp1  ] %s %s: relative %.3g, max |logit delta| %.3g at %zu (%.6g vs %.6g)\n",
                 label.c_str(), engine::mode_name(mode), d.relative, double(d.max_abs), d.worst, double(b[d.worst]),
                 double(a[d.worst]));
    expect_within(d, bound, b, a);
    EXPECT_FALSE(same_bits(a, b))
        << "TP = 2 is expected to differ from TP = 1 in the last bits (was the model split at all?)";
  }
}

// Every probe point's tensor of a pass, in the order the model visits them.
struct ProbeCapture {
  std::vector<std::string> order;
  std::map<std::string, accuracy::Matrix> tensors;
};

class ProbeRecorder : public model::ProbeHooks {
 public:
  explicit ProbeRecorder(ProbeCapture& c) : c_(c) {}
  bool wants(const std::string&) const override { return true; }
  void visit(const std::string& name, float* data, int rows, int cols, const model::ProbeRows&) override {
    c_.order.push_back(name);
    accuracy::Matrix& m = c_.tensors[name];
    m.rows = rows;
    m.cols = cols;
    m.data.assign(data, data + std::size_t(rows) * std::size_t(cols));
  }

 private:
  ProbeCapture& c_;
};

// max |a − b| over the tensor's largest magnitude in a (at least 1), and where (at).
inline float tensor_rel_diff(const accuracy::Matrix& a, const accuracy::Matrix& b, std::size_t* at = nullptr) {
  float d = 0, scale = 1;
  for (std::size_t i = 0; i < a.data.size(); ++i) {
    if (std::fabs(a.data[i] - b.data[i]) > d) {
      d = std::fabs(a.data[i] - b.data[i]);
      if (at) *at = i;
    }
    scale = std::max(scale, std::fabs(a.data[i]));
  }
  return d / scale;
}

// A single-shot exact pass over `tokens` on both models with every probe point captured: the same names in
// the same order, one per probe point, the same shapes (sharded points gathered to their whole width), and
// each tensor within `tolerance` of TP = 1's (tensor_rel_diff).
inline void expect_tp2_captures_near_tp1(const model::Model& one, const model::Model& two,
                                         const std::vector<int32_t>& tokens, const std::string& label,
                                         double tolerance) {
  ProbeCapture a, b;
  ProbeRecorder ha(a), hb(b);
  model::score_all_rows(one, tokens, model::ScanMode::Exact, &ha);
  model::score_all_rows(two, tokens, model::ScanMode::Exact, &hb);
  ASSERT_EQ(a.order, b.order);
  EXPECT_EQ(a.order.size(), one.probe_points().size());
  float worst = 0;
  std::string worst_name;
  for (const std::string& name : a.order) {
    SCOPED_TRACE(name);
    const accuracy::Matrix &x = a.tensors[name], &y = b.tensors[name];
    ASSERT_EQ(x.rows, y.rows);
    ASSERT_EQ(x.cols, y.cols);
    std::size_t at = 0;
    const float d = tensor_rel_diff(x, y, &at);
    if (d > worst) worst = d, worst_name = name;
    EXPECT_LE(d, tolerance) << "at " << at << ": " << y.data[at] << " (TP 2) vs " << x.data[at] << " (TP 1)";
  }
  std::fprintf(stderr, "[ tp2-tp1  ] %s: %zu probe points, worst relative |delta| %.3g (%s)\n", label.c_str(),
               a.order.size(), double(worst), worst_name.c_str());
}

// Probe points to replace: the first sharded Mamba in_proj, the first attention q_proj (sharded by KV
// heads) and the first MoE router (replicated, intercepted before it is computed) the model has.
inline std::vector<std::string> replaced_points(const model::Model& m) {
  std::vector<std::string> out;
  bool in_proj = false, q = false, router = false;
  for (const auto& p : m.probe_points()) {
    if (!in_proj && p.meaning.rfind("in_proj output", 0) == 0) out.push_back(p.name), in_proj = true;
    if (!q && p.meaning.rfind("q_proj output", 0) == 0) out.push_back(p.name), q = true;
    if (!router && p.meaning.rfind("router logits", 0) == 0) out.push_back(p.name), router = true;
  }
  return out;
}

// A single-shot exact pass over t with `reference` injected (seed 000's tensor replacement).
inline std::vector<float> score_replaced(const model::Model& m, const std::vector<int32_t>& t,
                                         std::map<std::string, accuracy::Matrix> reference) {
  accuracy::TensorReplacer r({std::move(reference)}, {t});
  r.register_request(0, t);
  accuracy::ReplacementHooks hooks(r);
  return model::score_all_rows(m, t, model::ScanMode::Exact, &hooks);
}

// TP = 1's own tensors at replaced_points, changed enough to move the logits, injected unsharded into both
// models (each rank takes its slice): the logits move (by more than 0.01, or the comparison means nothing)
// and TP = 2's stay within `bound` of TP = 1's.
inline void expect_tp2_replacement_near_tp1(const model::Model& one, const model::Model& two,
                                            const std::vector<int32_t>& tokens, const std::string& label,
                                            const TpBound& bound) {
  ProbeCapture seen;
  ProbeRecorder rec(seen);
  const auto plain = model::score_all_rows(one, tokens, model::ScanMode::Exact, &rec);
  std::map<std::string, accuracy::Matrix> ref;
  for (const std::string& name : replaced_points(one)) {
    accuracy::Matrix m = seen.tensors.at(name);
    for (std::size_t i = 0; i < m.data.size(); ++i) m.data[i] = m.data[i] * 0.5f + float(i % 7) * 0.05f;
    ref[name] = std::move(m);
  }
  ASSERT_FALSE(ref.empty());
  const auto a = score_replaced(one, tokens, ref), b = score_replaced(two, tokens, ref);
  ASSERT_EQ(a.size(), b.size());
  const LogitGap moved = logit_gap(a, plain), d = logit_gap(b, a);
  std::fprintf(stderr,
               "[ tp2-tp1  ] %s: %zu points replaced, logits moved by %.3g (relative %.3g), TP 2 vs 1 relative %.3g, "
               "max %.3g\n",
               label.c_str(), ref.size(), double(moved.max_abs), moved.relative, d.relative, double(d.max_abs));
  EXPECT_GT(moved.max_abs, 0.01f) << "the replacement must change the logits for the comparison to mean anything";
  expect_within(d, bound, b, a);
}

}  // namespace parity::test
