// Granite MoE kernel tests: router top-k order and tie rule, softmax over the k selected logits,
// the dense affinity scatter of seed 000, SwiGLU's gate half and its ISA twins, grouping by
// expert, and the batch-invariance contract: a token's MoE output has the same bits alone or
// among 100 other tokens, on every instruction set and thread count. A companion shows that the
// combine order is observable (so the invariance check can fail).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "kernels/gemm.h"
#include "kernels/isa.h"
#include "isa_test_support.h"
#include "test_support.h"
#include "kernels/math.h"
#include "kernels/moe.h"
#include "kernels/moe_sigmoid.h"

namespace parity::kernels {
namespace {

using namespace test;


using parity::test::same_bits;

struct Routed {
  std::vector<int> idx;
  std::vector<float> w;
};

Routed route(const std::vector<float>& logits, int T, int E, int k) {
  Routed r{std::vector<int>(size_t(T) * k), std::vector<float>(size_t(T) * k)};
  router_topk_softmax(logits.data(), T, E, k, r.idx.data(), r.w.data());
  return r;
}

// ---------------------------------------------------------------------------------------------
// Router.

TEST(KernelsMoe, TopkTiesGoToTheLowerExpertId) {
  const std::vector<float> lg = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f, 0.0f};
  EXPECT_EQ(route(lg, 1, 6, 2).idx, (std::vector<int>{1, 2}));
  EXPECT_EQ(route(lg, 1, 6, 4).idx, (std::vector<int>{1, 2, 4, 3}));
  EXPECT_EQ(route(lg, 1, 6, 6).idx, (std::vector<int>{1, 2, 4, 3, 0, 5}));
  // +0 and -0 are equal logits: the lower id first, whichever sign it has.
  EXPECT_EQ(route({-1.0f, 0.0f, -0.0f}, 1, 3, 2).idx, (std::vector<int>{1, 2}));
  EXPECT_EQ(route({-1.0f, -0.0f, 0.0f}, 1, 3, 2).idx, (std::vector<int>{1, 2}));
  // NaN ranks above every number (torch.topk's rule), NaNs among themselves by id.
  EXPECT_EQ(route({5.0f, NAN, 1.0f, NAN}, 1, 4, 3).idx, (std::vector<int>{1, 3, 0}));
  EXPECT_THROW(route({1.0f, 2.0f}, 1, 2, 3), Error);
}

// Against a brute force (stable sort by descending logit) on logits drawn from a few values, so
// that ties are everywhere.
TEST(KernelsMoe, TopkMatchesStableSortOnTiedLogits) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> ui(-3, 3);
  const int T = 500, E = 40;
  for (int k : {1, 2, 6, 8, 40}) {
    std::vector<float> lg(size_t(T) * E);
    for (auto& x : lg) x = 0.5f * static_cast<float>(ui(rng));
    const Routed r = route(lg, T, E, k);
    for (int t = 0; t < T; ++t) {
      std::vector<int> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return lg[size_t(t) * E + a] > lg[size_t(t) * E + b]; });
      ASSERT_TRUE(std::equal(order.begin(), order.begin() + k, r.idx.begin() + size_t(t) * k)) << "k " << k << " t " << t;
    }
  }
}

// Softmax over the k selected logits only (Granite's order), in the documented op sequence.
TEST(KernelsMoe, SoftmaxIsOverTheSelectedLogits) {
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int T = 200, E = 32, k = 6;
  std::vector<float> lg(size_t(T) * E);
  for (auto& x : lg) x = nd(rng);
  const Routed r = route(lg, T, E, k);
  double worst = 0;
  for (int t = 0; t < T; ++t) {
    const float* l = lg.data() + size_t(t) * E;
    const int* id = r.idx.data() + size_t(t) * k;
    const float* w = r.w.data() + size_t(t) * k;
    // Bits: the documented sequence.
    float e[k], s = 0.0f;
    for (int j = 0; j < k; ++j) s = s + (e[j] = exp_f(l[id[j]] - l[id[0]]));
    for (int j = 0; j < k; ++j) ASSERT_EQ(w[j], e[j] / s);
    // Values: a float64 softmax over the k values (not over all E), weights descending.
    double m = l[id[0]], z = 0;
    for (int j = 0; j < k; ++j) z += std::exp(double(l[id[j]]) - m);
    for (int j = 0; j < k; ++j) {
      worst = std::max(worst, std::abs(w[j] - std::exp(double(l[id[j]]) - m) / z));
      if (j > 0) {
        EXPECT_GE(w[j - 1], w[j]);
      }
    }
  }
  std::printf("  router softmax vs f64: max |d| %.3g\n", worst);
  EXPECT_LE(worst, 3e-7);  // a few fp32 roundings of values <= 1 (measured ~1e-7)
}

TEST(KernelsMoe, DenseAffinitiesScatterTheTopkWeights) {
  const int T = 3, E = 5, k = 2;
  const std::vector<float> lg = {0.f, 1.f, 2.f, 3.f, 4.f, 4.f, 4.f, 0.f, 0.f, 0.f, -1.f, 9.f, -2.f, 9.f, 1.f};
  const Routed r = route(lg, T, E, k);
  std::vector<float> dense(size_t(T) * E, NAN);
  moe_dense_affinities(r.idx.data(), r.w.data(), T, E, k, dense.data());
  for (int t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) {
      float want = 0.0f;
      for (int j = 0; j < k; ++j) {
        if (r.idx[t * k + j] == e) want = r.w[t * k + j];
      }
      EXPECT_EQ(dense[t * E + e], want) << t << "," << e;
    }
  }
  EXPECT_EQ(dense[0 * E + 4], r.w[0]);
  EXPECT_EQ(dense[1 * E + 0], 0.5f);  // tied top-2 {0, 1}: equal halves
  EXPECT_EQ(dense[1 * E + 1], 0.5f);
  EXPECT_EQ(dense[2 * E + 1], 0.5f);
  EXPECT_EQ(dense[2 * E + 3], 0.5f);
}

// ---------------------------------------------------------------------------------------------
// SwiGLU.

TEST(KernelsMoe, SwigluGatesTheFirstHalf) {
  const int F = 3;
  const std::vector<float> gu = {-1.0f, 0.5f, 2.0f, 10.0f, -3.0f, 0.25f};
  std::vector<float> out(F);
  swiglu(gu.data(), 1, F, out.data());
  for (int i = 0; i < F; ++i) {
    EXPECT_EQ(out[i], silu_f(gu[i]) * gu[F + i]);
    EXPECT_NE(out[i], silu_f(gu[F + i]) * gu[i]);
  }
}

TEST(KernelsMoe, SwigluEveryIsaEqualsScalarTwin) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (int F : {1, 7, 16, 37, 512}) {
    const int n = 9;
    std::vector<float> gu(size_t(n) * 2 * F);
    for (auto& x : gu) x = nd(rng);
    gu[0] = 100.0f;  // exp_f's clamps inside the silu
    gu[1 % gu.size()] = -100.0f;
    std::vector<float> ref(size_t(n) * F), out(ref.size());
    swiglu_reference(gu.data(), n, F, ref.data());
    for (Isa isa : kAllIsas) {
      if (!cpu_has(isa)) continue;
      IsaGuard g(isa);
      std::fill(out.begin(), out.end(), NAN);
      swiglu(gu.data(), n, F, out.data());
      EXPECT_TRUE(same_bits(out.data(), ref.data(), ref.size())) << "F " << F << " " << isa_name(isa);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Grouping and combine.

TEST(KernelsMoe, RouteGroupsTokensByExpertInTokenOrder) {
  const int T = 5, E = 4, k = 2;
  const std::vector<int> idx = {3, 1, 1, 0, 3, 2, 1, 3, 0, 1};
  const MoeRouting r = moe_route(idx.data(), T, E, k);
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 2, 6, 7, 10}));
  EXPECT_EQ(r.token, (std::vector<int>{1, 4, 0, 1, 3, 4, 2, 0, 2, 3}));
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < k; ++j) {
      const int64_t g = r.row[t * k + j];
      EXPECT_EQ(r.token[g], t);
      EXPECT_GE(g, r.offsets[idx[t * k + j]]);
      EXPECT_LT(g, r.offsets[idx[t * k + j] + 1]);
    }
  }
  const std::vector<int> bad = {0, 4};
  EXPECT_THROW(moe_route(bad.data(), 1, 4, 2), Error);
}

// The sum runs over a token's top-k list in order, products rounded before each add.
TEST(KernelsMoe, CombineSumsInTopkOrder) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int T = 30, E = 8, k = 4, D = 33;
  std::vector<float> lg(size_t(T) * E);
  for (auto& x : lg) x = nd(rng);
  const Routed rt = route(lg, T, E, k);
  const MoeRouting r = moe_route(rt.idx.data(), T, E, k);
  std::vector<float> yg(size_t(T) * k * D);
  for (auto& x : yg) x = 1000.0f * nd(rng);  // wide magnitudes: the order shows in the bits
  std::vector<float> out(size_t(T) * D), reversed(out.size());
  moe_combine(yg.data(), D, r, rt.w.data(), out.data());
  size_t order_matters = 0;
  for (int t = 0; t < T; ++t) {
    for (int d = 0; d < D; ++d) {
      float a = 0.0f, b = 0.0f;
      for (int j = 0; j < k; ++j) a = a + rt.w[t * k + j] * yg[r.row[t * k + j] * D + d];
      for (int j = k - 1; j >= 0; --j) b = b + rt.w[t * k + j] * yg[r.row[t * k + j] * D + d];
      EXPECT_EQ(std::memcmp(&out[t * D + d], &a, 4), 0);
      order_matters += std::memcmp(&a, &b, 4) != 0;
    }
  }
  // Companion: summing the same terms in the reverse order changes some bits, so a combine whose
  // order followed the batch (e.g. expert processing order) would be caught by the tests below.
  std::printf("  combine: %zu of %d outputs change when the k terms are summed in reverse\n", order_matters, T * D);
  EXPECT_GT(order_matters, 0u);
}

// ---------------------------------------------------------------------------------------------
// Batch invariance of the whole sparse block.

struct Experts {
  int E, D, F, k;
  std::vector<PackedWeight> w_in, w_out;
  std::vector<std::vector<float>> raw_in, raw_out;
  std::vector<float> router;  // [E][D]
};

Experts make_experts(int E, int D, int F, int k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Experts x{E, D, F, k, {}, {}, {}, {}, {}};
  for (int e = 0; e < E; ++e) {
    std::vector<float> a(size_t(2) * F * D), b(size_t(D) * F);
    for (auto& v : a) v = nd(rng) / std::sqrt(float(D));
    for (auto& v : b) v = nd(rng) / std::sqrt(float(F));
    x.w_in.push_back(pack_weight(a.data(), DType::F32, 2 * F, D));
    x.w_out.push_back(pack_weight(b.data(), DType::F32, D, F));
    x.raw_in.push_back(std::move(a));
    x.raw_out.push_back(std::move(b));
  }
  x.router.resize(size_t(E) * D);
  for (auto& v : x.router) v = nd(rng);
  return x;
}

// Router logits through the same M-invariant gemm, then the whole block.
std::vector<float> moe_block(const Experts& x, const std::vector<float>& h, int T) {
  const PackedWeight router = pack_weight(x.router.data(), DType::F32, x.E, x.D);
  std::vector<float> logits(size_t(T) * x.E);
  gemm(h.data(), T, x.D, router, nullptr, logits.data(), x.E);
  const Routed rt = route(logits, T, x.E, x.k);
  const MoeRouting r = moe_route(rt.idx.data(), T, x.E, x.k);
  std::vector<float> out(size_t(T) * x.D, NAN);
  moe_experts(h.data(), x.D, x.F, r, rt.w.data(), x.w_in.data(), x.w_out.data(), out.data());
  return out;
}

TEST(KernelsMoe, TokenAloneEqualsTokenAmongHundredOthers) {
  const Experts x = make_experts(8, 64, 48, 3, 5);
  std::mt19937 rng(6);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int T = 101;
  std::vector<float> h(size_t(T) * x.D);
  for (auto& v : h) v = nd(rng);
  for (Isa isa : kAllIsas) {
    if (!cpu_has(isa)) continue;
    IsaGuard g(isa);
    for (int threads : {1, 2}) {
      ThreadGuard tg(threads);
      const std::vector<float> crowd = moe_block(x, h, T);
      // Every token alone (group sizes of 1 per expert) against its row in the crowd.
      for (int t = 0; t < T; t += 10) {
        const std::vector<float> one(h.begin() + size_t(t) * x.D, h.begin() + size_t(t + 1) * x.D);
        const std::vector<float> alone = moe_block(x, one, 1);
        EXPECT_TRUE(same_bits(alone.data(), crowd.data() + size_t(t) * x.D, x.D))
            << "token " << t << " " << isa_name(isa) << " threads " << threads;
      }
      // The crowd reversed: each token now shares every expert with others in another order.
      std::vector<float> rev(h.size());
      for (int t = 0; t < T; ++t) std::copy_n(h.begin() + size_t(T - 1 - t) * x.D, x.D, rev.begin() + size_t(t) * x.D);
      const std::vector<float> crowd_rev = moe_block(x, rev, T);
      for (int t = 0; t < T; ++t) {
        ASSERT_TRUE(same_bits(crowd_rev.data() + size_t(T - 1 - t) * x.D, crowd.data() + size_t(t) * x.D, x.D)) << t;
      }
    }
  }
  // And the bits are the same on every instruction set.
  std::vector<float> first;
  for (Isa isa : kAllIsas) {
    if (!cpu_has(isa)) continue;
    IsaGuard g(isa);
    const std::vector<float> o = moe_block(x, h, T);
    if (first.empty()) first = o;
    EXPECT_TRUE(same_bits(o.data(), first.data(), o.size())) << isa_name(isa);
  }
}

// The expert GEMM's per-row bits do not depend on how many rows the expert got.
TEST(KernelsMoe, ExpertGemmRowBitsIndependentOfGroupSize) {
  const Experts x = make_experts(1, 96, 40, 1, 7);
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> rows(size_t(100) * x.D);
  for (auto& v : rows) v = nd(rng);
  std::vector<float> all(size_t(100) * 2 * x.F);
  gemm(rows.data(), 100, x.D, x.w_in[0], nullptr, all.data(), 2 * x.F);
  for (int m : {1, 2, 3, 17}) {
    std::vector<float> part(size_t(m) * 2 * x.F);
    gemm(rows.data() + size_t(50) * x.D, m, x.D, x.w_in[0], nullptr, part.data(), 2 * x.F);
    EXPECT_TRUE(same_bits(part.data(), all.data() + size_t(50) * 2 * x.F, part.size())) << m;
  }
}

// The block against float64 (router decisions taken from the fp32 run; values N(0, 1) through
// 1/sqrt(fan-in) weights keep outputs O(1)). Measured <= 2e-6; the bound allows for the two
// GEMMs' K-long sums and the activation.
TEST(KernelsMoe, BlockMatchesFloat64) {
  const Experts x = make_experts(8, 64, 48, 3, 9);
  std::mt19937 rng(10);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int T = 40;
  std::vector<float> h(size_t(T) * x.D);
  for (auto& v : h) v = nd(rng);
  const std::vector<float> out = moe_block(x, h, T);
  const PackedWeight router = pack_weight(x.router.data(), DType::F32, x.E, x.D);
  std::vector<float> logits(size_t(T) * x.E);
  gemm(h.data(), T, x.D, router, nullptr, logits.data(), x.E);
  const Routed rt = route(logits, T, x.E, x.k);
  double worst = 0;
  for (int t = 0; t < T; ++t) {
    std::vector<double> acc(x.D, 0.0);
    for (int j = 0; j < x.k; ++j) {
      const int e = rt.idx[t * x.k + j];
      std::vector<double> a(x.F);
      for (int f = 0; f < x.F; ++f) {
        double g = 0, u = 0;
        for (int d = 0; d < x.D; ++d) {
          g += double(x.raw_in[e][size_t(f) * x.D + d]) * h[size_t(t) * x.D + d];
          u += double(x.raw_in[e][size_t(x.F + f) * x.D + d]) * h[size_t(t) * x.D + d];
        }
        a[f] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int d = 0; d < x.D; ++d) {
        double y = 0;
        for (int f = 0; f < x.F; ++f) y += double(x.raw_out[e][size_t(d) * x.F + f]) * a[f];
        acc[d] += double(rt.w[t * x.k + j]) * y;
      }
    }
    for (int d = 0; d < x.D; ++d) worst = std::max(worst, std::abs(out[size_t(t) * x.D + d] - acc[d]));
  }
  std::printf("  moe block vs f64: max |d| %.3g\n", worst);
  EXPECT_LE(worst, 1e-5);
}

}  // namespace
}  // namespace parity::kernels

// DeepSeek-V3 / NemotronH router (kernels/moe_sigmoid.h), by hand: the correction bias picks the experts, the
// weights are the sigmoids of the picked ones (normalised, scaled), and the order is the choice order.
TEST(MoeSigmoidRouter, BiasChoosesSigmoidWeightsNormalisedAndScaled) {
  const float logits[4] = {2.0f, 0.0f, 1.0f, -1.0f};
  const float bias[4] = {0.0f, 0.9f, 0.0f, 0.0f};  // lifts expert 1 (sigmoid 0.5) above expert 2 (0.731)
  int idx[2];
  float w[2];
  parity::kernels::router_sigmoid_topk(logits, 1, 4, 2, bias, true, 2.5f, idx, w);
  EXPECT_EQ(idx[0], 1);  // 0.5 + 0.9 = 1.4
  EXPECT_EQ(idx[1], 0);  // 0.881
  const double s0 = 1.0 / (1.0 + std::exp(-2.0)), s1 = 0.5;
  EXPECT_NEAR(w[0], s1 / (s0 + s1) * 2.5, 1e-6);
  EXPECT_NEAR(w[1], s0 / (s0 + s1) * 2.5, 1e-6);
  // Without the bias expert 2 is chosen; without normalisation the weights are the sigmoids times the scale.
  parity::kernels::router_sigmoid_topk(logits, 1, 4, 2, nullptr, false, 1.0f, idx, w);
  EXPECT_EQ(idx[0], 0);
  EXPECT_EQ(idx[1], 2);
  EXPECT_NEAR(w[1], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  // Equal choices go to the lower expert id; an impossible top-k is an error.
  const float same[3] = {0.5f, 0.5f, 0.5f};
  parity::kernels::router_sigmoid_topk(same, 1, 3, 2, nullptr, true, 1.0f, idx, w);
  EXPECT_EQ(idx[0], 0);
  EXPECT_EQ(idx[1], 1);
  EXPECT_THROW(parity::kernels::router_sigmoid_topk(same, 1, 3, 4, nullptr, true, 1.0f, idx, w), parity::Error);
}

TEST(MoeSigmoidRouter, ReluSquaredExperts) {
  const float x[5] = {-2.0f, -0.0f, 0.0f, 1.5f, 3.0f};
  float y[5];
  parity::kernels::relu_squared(x, 5, y);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[3], 2.25f);
  EXPECT_EQ(y[4], 9.0f);
}
