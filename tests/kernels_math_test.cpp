// The project's transcendentals (DESIGN.md rule 4): accuracy against double precision over dense
// sweeps, special values, and bit equality of the SIMD twins with the scalar definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "isa_test_support.h"
#include "kernels/isa.h"
#include "kernels/math.h"
#include "kernels/rowops_internal.h"

namespace parity::kernels {
namespace {

constexpr double kMaxRel = 2e-7;

// Every float in [lo, hi] whose bit pattern is a multiple of `stride` away from lo's, plus hi.
// Walking bit patterns samples every binade evenly, unlike a uniform grid.
std::vector<float> sweep(float lo, float hi, uint32_t stride) {
  std::vector<float> v;
  for (float x = lo; x < hi;) {
    v.push_back(x);
    // next float `stride` ulps towards +inf
    uint32_t u = float_to_bits(x);
    if (x < 0.0f) {
      u = u > 0x80000000u + stride ? u - stride : 0u;  // crosses -0 → +0
    } else {
      u += stride;
    }
    x = bits_to_float(u);
  }
  v.push_back(hi);
  return v;
}

struct RelStats {
  double worst = 0.0;
  float at = 0.0f;
  void add(float x, double got, double want) {
    double rel = want == 0.0 ? std::fabs(got) : std::fabs(got - want) / std::fabs(want);
    if (rel > worst) {
      worst = rel;
      at = x;
    }
  }
};

TEST(KernelsMath, ExpAccuracy) {
  RelStats st;
  // Results are normal floats from ln(FLT_MIN) ≈ -87.34 up to ln(FLT_MAX) ≈ 88.7228391.
  for (float x : sweep(-87.3f, 88.72283f, 1001)) st.add(x, exp_f(x), std::exp(static_cast<double>(x)));
  EXPECT_LE(st.worst, kMaxRel) << "at x=" << st.at;
  // Subnormal results: within one subnormal step (2^-149) plus the normal-range relative bound.
  for (float x : sweep(mathc::kExpMin, -87.3f, 7)) {
    double want = std::exp(static_cast<double>(x));
    EXPECT_LE(std::fabs(exp_f(x) - want), std::ldexp(1.0, -149) + kMaxRel * want) << "x=" << x;
  }
  EXPECT_EQ(exp_f(0.0f), 1.0f);
  EXPECT_EQ(exp_f(-0.0f), 1.0f);
}

TEST(KernelsMath, ExpSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(exp_f(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(exp_f(inf), inf);
  EXPECT_EQ(exp_f(-inf), 0.0f);
  EXPECT_EQ(exp_f(89.0f), inf);
  EXPECT_EQ(exp_f(-104.0f), 0.0f);
  // Near the ends the true result rounds to inf / to 0 already; the cut-offs only decide NaN-free
  // saturation, they do not clip representable results.
  EXPECT_EQ(exp_f(mathc::kExpMax), inf);  // e^88.7228394 > FLT_MAX + half an ulp
  EXPECT_TRUE(std::isfinite(exp_f(88.7228f)));
  EXPECT_EQ(exp_f(mathc::kExpMin), 0.0f);  // 2^-150 rounds to even, i.e. 0
  EXPECT_EQ(exp_f(-103.9f), std::numeric_limits<float>::denorm_min());
}

TEST(KernelsMath, LogAccuracy) {
  RelStats st;
  // Every binade of positive floats, subnormals included (their log is far from 0).
  for (float x : sweep(std::numeric_limits<float>::denorm_min(), FLT_MAX, 4099)) {
    st.add(x, log_f(x), std::log(static_cast<double>(x)));
  }
  // Dense around 1, where log(x) → 0 and only a relative bound says anything.
  for (float x : sweep(0.5f, 2.0f, 31)) {
    if (x == 1.0f) continue;
    st.add(x, log_f(x), std::log(static_cast<double>(x)));
  }
  EXPECT_LE(st.worst, kMaxRel) << "at x=" << st.at;
  EXPECT_EQ(log_f(1.0f), 0.0f);
}

// softplus = log1p_f(exp_f(x)) compounds two roundings-worth of error from exp_f and log_f; the
// measured worst case over the sweep is 2.7e-7, so its bound is 4e-7 rather than kMaxRel.
TEST(KernelsMath, SoftplusAccuracyAndThreshold) {
  RelStats st;
  for (float x : sweep(-87.0f, 40.0f, 251)) {
    double xd = x;
    double want = xd > 0 ? xd + std::log1p(std::exp(-xd)) : std::log1p(std::exp(xd));
    st.add(x, softplus_f(x), want);
  }
  EXPECT_LE(st.worst, 4e-7) << "at x=" << st.at;
  // PyTorch's threshold: above 20 the input is returned unchanged, at 20 the formula is used.
  for (float x : {20.000002f, 21.0f, 100.0f, 3e38f}) EXPECT_EQ(softplus_f(x), x);
  EXPECT_EQ(softplus_f(20.0f), log1p_f(exp_f(20.0f)));
  EXPECT_NE(softplus_f(5.0f), 5.0f);
  // log1p_f(y) returns y when 1 + y rounds to 1 (tiny exp): softplus(x) = exp(x) there.
  EXPECT_EQ(softplus_f(-30.0f), exp_f(-30.0f));
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(softplus_f(inf), inf);
  EXPECT_EQ(softplus_f(-inf), 0.0f);
  EXPECT_TRUE(std::isnan(softplus_f(std::numeric_limits<float>::quiet_NaN())));
}

TEST(KernelsMath, SigmoidAndSiluAccuracy) {
  RelStats sg, sl;
  // Down to -87 sigmoid stays a normal float; silu is checked relatively where it is normal and
  // to one subnormal step below that (x/2 of a subnormal x rounds).
  for (float x : sweep(-87.0f, 88.0f, 1001)) {
    double xd = x;
    double s = 1.0 / (1.0 + std::exp(-xd));
    sg.add(x, sigmoid_f(x), s);
    if (std::fabs(xd * s) >= FLT_MIN) {
      sl.add(x, silu_f(x), xd * s);
    } else {
      ASSERT_LE(std::fabs(silu_f(x) - xd * s), std::ldexp(1.0, -149)) << "x=" << x;
    }
  }
  EXPECT_LE(sg.worst, kMaxRel) << "sigmoid at x=" << sg.at;
  EXPECT_LE(sl.worst, kMaxRel) << "silu at x=" << sl.at;
}

TEST(KernelsMath, SigmoidAndSiluSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(sigmoid_f(inf), 1.0f);
  EXPECT_EQ(sigmoid_f(-inf), 0.0f);
  EXPECT_EQ(sigmoid_f(0.0f), 0.5f);
  EXPECT_TRUE(std::isnan(sigmoid_f(nan)));
  EXPECT_EQ(silu_f(inf), inf);
  EXPECT_EQ(silu_f(0.0f), 0.0f);
  EXPECT_TRUE(std::isnan(silu_f(nan)));
  // -inf / (1 + inf): NaN, as PyTorch's x * sigmoid(x) gives -inf * 0.
  EXPECT_TRUE(std::isnan(silu_f(-inf)));
  // Large negative inputs underflow to -0 (exp(-x) overflows first), never to garbage.
  EXPECT_EQ(silu_f(-100.0f), 0.0f);
}

// Scalar definitions of the array forms: exp_f and silu_f, element by element.
std::vector<float> scalar_map(const std::vector<float>& x, bool silu) {
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = silu ? silu_f(x[i]) : exp_f(x[i]);
  return y;
}

TEST(KernelsMath, SimdTwinsMatchScalarBitwise) {
  // A stride through all 2^32 patterns (NaNs, infinities, subnormals, both zeros) plus a dense
  // walk over the range where exp is neither 0 nor inf, and an odd length for the tails.
  std::vector<float> xs;
  for (uint64_t u = 0; u < (1ull << 32); u += 1009) xs.push_back(bits_to_float(static_cast<uint32_t>(u)));
  for (float x : sweep(-110.0f, 95.0f, 1013)) xs.push_back(x);
  for (float x : {0.0f, -0.0f, mathc::kExpMax, mathc::kExpMin, std::nextafter(mathc::kExpMax, 100.0f),
                  std::nextafter(mathc::kExpMin, -200.0f), 0.5f * std::log(2.0f), -0.5f * std::log(2.0f)}) {
    xs.push_back(x);
  }
  xs.push_back(1.0f);  // odd total length exercises the masked tails
  const std::vector<float> want_exp = scalar_map(xs, false), want_silu = scalar_map(xs, true);
  bool any = false;
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (!test::cpu_has(isa)) continue;
    any = true;
    const detail::RowOps& ops = detail::row_ops(isa);
    std::vector<float> got(xs.size());
    ops.exp_array(xs.data(), static_cast<int>(xs.size()), got.data());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      ASSERT_EQ(float_to_bits(got[i]), float_to_bits(want_exp[i])) << isa_name(isa) << " exp x=" << xs[i];
    }
    ops.silu_array(xs.data(), static_cast<int>(xs.size()), got.data());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      ASSERT_EQ(float_to_bits(got[i]), float_to_bits(want_silu[i])) << isa_name(isa) << " silu x=" << xs[i];
    }
  }
  if (!any) GTEST_SKIP() << "no SIMD instruction set on this CPU";
}

// Mamba2's dt row (kernels/mamba_dt.h): softplus_f of raw + bias, then the clamp as
// std::min(std::max(v, lo), hi), on every instruction set, bit for bit. The sweep covers both
// sides of softplus's threshold (20), 1 + exp(x) rounding to 1, exp's 0 and inf, NaNs and the tails.
TEST(KernelsMath, DtRowMatchesScalarBitwiseOnEveryIsa) {
  std::vector<float> raw;
  for (uint64_t u = 0; u < (1ull << 32); u += 100003) raw.push_back(bits_to_float(static_cast<uint32_t>(u)));
  for (float x : sweep(-110.0f, 95.0f, 2011)) raw.push_back(x);
  for (float x : {20.0f, std::nextafter(20.0f, 30.0f), -17.0f, -16.5f, -88.0f, 0.0f, -0.0f, NAN, INFINITY, -INFINITY})
    raw.push_back(x);
  raw.push_back(0.25f);  // odd length: the masked tails
  std::vector<float> bias(raw.size());
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = (i % 3 == 0) ? 0.0f : (i % 3 == 1 ? -1.5f : 0.75f);
  const int n = static_cast<int>(raw.size());
  struct Clamp {
    float lo, hi;
  };
  int compared = 0;
  for (const Clamp c : {Clamp{0.0f, INFINITY}, Clamp{1e-3f, 0.1f}, Clamp{-INFINITY, INFINITY}}) {
    std::vector<float> want(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i) want[i] = std::min(std::max(softplus_f(raw[i] + bias[i]), c.lo), c.hi);
    for (Isa isa : {Isa::Portable, Isa::Avx2, Isa::Avx512}) {
      if (!test::cpu_has(isa)) {
        std::printf("  dt row: %s not run (this CPU lacks it)\n", isa_name(isa));
        continue;
      }
      std::vector<float> got(raw.size());
      detail::row_ops(isa).dt_row(raw.data(), bias.data(), n, c.lo, c.hi, got.data());
      ++compared;
      for (std::size_t i = 0; i < raw.size(); ++i) {
        ASSERT_EQ(float_to_bits(got[i]), float_to_bits(want[i]))
            << isa_name(isa) << " raw=" << raw[i] << " bias=" << bias[i] << " lo=" << c.lo << " hi=" << c.hi;
      }
    }
  }
  EXPECT_GE(compared, 3);
  // Companion: a clamp that lets no value through unchanged differs from the unclamped row.
  std::vector<float> a(raw.size()), b(raw.size());
  detail::row_ops(Isa::Portable).dt_row(raw.data(), bias.data(), n, 1e-3f, 0.1f, a.data());
  detail::row_ops(Isa::Portable).dt_row(raw.data(), bias.data(), n, -INFINITY, INFINITY, b.data());
  int differ = 0;
  for (std::size_t i = 0; i < raw.size(); ++i) differ += float_to_bits(a[i]) != float_to_bits(b[i]);
  EXPECT_GT(differ, n / 2);
}

}  // namespace
}  // namespace parity::kernels
