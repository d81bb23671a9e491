// The stream plans (kernels/stream_plan.h): which one this CPU gets, switching between them, and
// that none of them changes a bit of a decode (the GEMM's few-rows path and both modes' decode
// kernels are where the plans ask for memory ahead).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "engine/engine.h"
#include "kernels/gemm.h"
#include "kernels/isa.h"
#include "kernels/stream_plan.h"
#include "test_support.h"

using namespace parity;

namespace {

// Restores the detected plan whatever a test does.
struct PlanScope {
  ~PlanScope() { kernels::clear_stream_plan(); }
};

TEST(StreamPlan, TheDetectedPlanIsActiveAndSwitchingBackRestoresIt) {
  PlanScope scope;
  const auto plans = kernels::stream_plans();
  ASSERT_EQ(plans.size(), 2u);
  const kernels::StreamPlan& d = kernels::detected_stream_plan();
  bool listed = false;
  for (const auto& p : plans) listed |= std::strcmp(p.name, d.name) == 0;
  EXPECT_TRUE(listed) << d.name;
  std::fprintf(stderr, "[ measured ] this CPU's stream plan: %s\n", d.name);
  EXPECT_STREQ(kernels::active_stream_plan().name, d.name);
  for (const auto& p : plans) {
    kernels::set_stream_plan(p);
    EXPECT_STREQ(kernels::active_stream_plan().name, p.name);
    EXPECT_EQ(kernels::gemm_prefetch_ahead(), p.gemm_ahead);
    EXPECT_EQ(kernels::state_prefetch_near(), p.state_near);
    EXPECT_EQ(kernels::state_prefetch_far(), p.state_far);
    EXPECT_EQ(kernels::fold_prefetch_next(), p.fold_next);
    EXPECT_EQ(kernels::bf16_dot_rows(), p.bf16_dot_rows);
  }
  kernels::set_stream_plan({"mine", 4096, 1024, -5, 7, 3});
  EXPECT_STREQ(kernels::active_stream_plan().name, "custom");
  EXPECT_EQ(kernels::state_prefetch_near(), 1024);
  EXPECT_EQ(kernels::state_prefetch_far(), 0) << "a negative distance means none";
  EXPECT_EQ(kernels::fold_prefetch_next(), 0) << "neither L1 (1) nor L2 (2) means none";
  EXPECT_EQ(kernels::bf16_dot_rows(), 4) << "rows side by side: 1, or else 4";
  kernels::clear_stream_plan();
  EXPECT_STREQ(kernels::active_stream_plan().name, d.name);
  EXPECT_EQ(kernels::gemm_prefetch_ahead(), d.gemm_ahead);
}

// Three requests decoding side by side (every step a 3-row GEMM and three decode rows), each token
// forced, every logit row returned.
std::map<uint64_t, engine::RequestResult> decode(model::ScanMode mode, DType state, int32_t first_token) {
  const auto& m = test::tiny_model();
  engine::EngineConfig cfg;
  cfg.mode = mode;
  cfg.ssm_cache_dtype = state;
  engine::Engine e(m, cfg);
  std::mt19937 rng(11);
  for (int i = 0; i < 3; ++i) {
    auto s = test::random_tokens(rng, 10 + 3 * i + 2 * m.chunk_size(), m.vocab_size());
    s[0] = first_token;
    e.add_request(test::teacher_forced_all_rows(s, 10 + 3 * i));
  }
  return e.run_to_completion();
}

std::size_t mismatches(const std::map<uint64_t, engine::RequestResult>& a,
                       const std::map<uint64_t, engine::RequestResult>& b) {
  std::size_t bad = 0;
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [id, ra] : a) {
    const auto& rb = b.at(id);
    EXPECT_EQ(ra.logit_rows.size(), rb.logit_rows.size());
    for (std::size_t r = 0; r < ra.logit_rows.size() && r < rb.logit_rows.size(); ++r)
      bad += test::count_bit_mismatches(ra.logit_rows[r].data(), rb.logit_rows[r].data(), ra.logit_rows[r].size());
  }
  return bad;
}

TEST(StreamPlan, EveryPlanDecodesTheSameBits) {
  PlanScope scope;
  for (auto mode : {model::ScanMode::Plain, model::ScanMode::Exact}) {
    for (DType state : {DType::F32, DType::BF16}) {
      kernels::clear_stream_plan();
      const auto want = decode(mode, state, 3);
      std::size_t rows = 0;
      for (const auto& [id, r] : want) rows += r.logit_rows.size();
      ASSERT_EQ(rows, 3u * 2 * test::tiny_model().chunk_size() + 10 + 13 + 16);
      for (const auto& p : kernels::stream_plans()) {
        kernels::set_stream_plan(p);
        EXPECT_EQ(mismatches(decode(mode, state, 3), want), 0u)
            << p.name << (mode == model::ScanMode::Exact ? " exact " : " plain ") << dtype_name(state);
      }
    }
  }
}

// The companion: the comparison above does see a difference where there is one (another first token).
TEST(StreamPlan, TheDecodeComparisonSeesAChangedToken) {
  PlanScope scope;
  EXPECT_GT(mismatches(decode(model::ScanMode::Exact, DType::F32, 3), decode(model::ScanMode::Exact, DType::F32, 4)),
            0u);
}

// The GEMM's few-rows path (where the weight-panel streams are prefetched) at 1..6 rows, with a
// partial last panel: the same bits under every plan.
constexpr int kGemmK = 768, kGemmN = 200;

// Random bf16 weights of kGemmN x kGemmK, packed.
kernels::PackedWeight gemm_weight() {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<uint16_t> w(static_cast<std::size_t>(kGemmN) * kGemmK);
  for (auto& v : w) v = f32_to_bf16(nd(rng));
  return kernels::pack_weight(w.data(), DType::BF16, kGemmN, kGemmK);
}

TEST(StreamPlan, EveryPlanGivesTheSameGemmBits) {
  PlanScope scope;
  const int k = kGemmK, n = kGemmN;
  const kernels::PackedWeight pw = gemm_weight();
  const std::vector<float> a = test::random_floats(std::size_t(6) * k, 9);
  for (int m = 1; m <= 6; ++m) {
    kernels::clear_stream_plan();
    std::vector<float> want(std::size_t(m) * n), got(want.size());
    kernels::gemm(a.data(), m, k, pw, nullptr, want.data(), n);
    for (const auto& p : kernels::stream_plans()) {
      kernels::set_stream_plan(p);
      kernels::gemm(a.data(), m, k, pw, nullptr, got.data(), n);
      EXPECT_EQ(test::count_bit_mismatches(got.data(), want.data(), got.size()), 0u) << p.name << " m=" << m;
    }
  }
}

// The companion: the GEMM comparison above sees one changed input value (row 2's outputs differ, the
// other rows' do not).
TEST(StreamPlan, TheGemmComparisonSeesAChangedInput) {
  const int k = kGemmK, n = kGemmN, m = 4;
  const kernels::PackedWeight pw = gemm_weight();
  std::vector<float> a = test::random_floats(std::size_t(m) * k, 9), want(std::size_t(m) * n), got(want.size());
  kernels::gemm(a.data(), m, k, pw, nullptr, want.data(), n);
  a[std::size_t(2) * k + 100] += 0.25f;
  kernels::gemm(a.data(), m, k, pw, nullptr, got.data(), n);
  EXPECT_GT(test::count_bit_mismatches(got.data() + 2 * n, want.data() + 2 * n, n), 0u);
  EXPECT_EQ(test::count_bit_mismatches(got.data(), want.data(), 2 * n), 0u);
  EXPECT_EQ(test::count_bit_mismatches(got.data() + 3 * n, want.data() + 3 * n, n), 0u);
}

}  // namespace
