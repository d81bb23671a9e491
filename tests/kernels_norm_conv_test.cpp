// RMSNorm, gated RMSNorm and the causal conv1d: accuracy against float64, and the invariances the
// numerics contract needs (row alone vs in a batch, prefill vs decode, split sequences, thread
// count, instruction set), all compared bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/conv1d.h"
#include "kernels/isa.h"
#include "isa_test_support.h"
#include "test_support.h"
#include "kernels/math.h"
#include "kernels/norm.h"

namespace parity::kernels {
namespace {

using namespace test;

using parity::test::random_floats;
using parity::test::same_bits;

double silu64(double x) { return x / (1.0 + std::exp(-x)); }

// ---------------------------------------------------------------------------------------------
// RMSNorm

// Float64 rmsnorm of one run of n values (no gating).
void rms64(const double* x, int n, const float* w, float eps, double* out) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  double r = 1.0 / std::sqrt(ss / n + eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * r * w[i];
}

// Error bound for one output: the sum of squares of positive terms has relative error at most
// (its FMA-chain depth = n/16 + 4 + 15)·u; mean, +eps, sqrt (halves it), the reciprocal and the
// two products add about 5u. Allowed: (n/16 + 32)·2^-23 relative, twice that estimate.
double rms_rel_bound(int n) { return (n / 16.0 + 32.0) * std::ldexp(1.0, -23); }

TEST(KernelsNorm, RmsnormMatchesFloat64) {
  const float eps = 1e-5f;
  for (int dim : {1, 7, 16, 33, 768, 1536, 1541}) {
    const int rows = 5;
    std::vector<float> x = random_floats(static_cast<std::size_t>(rows) * dim, 11u + dim, -2.0f, 2.0f);
    std::vector<float> w = random_floats(dim, 12u + dim, 0.5f, 1.5f);
    for (Isa isa : kAllIsas) {
      if (!cpu_has(isa)) continue;
      IsaGuard g(isa);
      std::vector<float> out(x.size());
      rmsnorm(x.data(), rows, dim, w.data(), eps, out.data());
      for (int r = 0; r < rows; ++r) {
        std::vector<double> xd(x.begin() + r * dim, x.begin() + (r + 1) * dim), want(dim);
        rms64(xd.data(), dim, w.data(), eps, want.data());
        for (int i = 0; i < dim; ++i) {
          ASSERT_LE(std::fabs(out[r * dim + i] - want[i]), rms_rel_bound(dim) * std::fabs(want[i]) + 1e-30)
              << isa_name(isa) << " dim=" << dim << " row=" << r << " i=" << i;
        }
      }
    }
  }
}

TEST(KernelsNorm, RmsnormIsasAgreeBitwise) {
  for (int dim : {1, 5, 15, 16, 17, 31, 100, 768, 1536, 1541}) {
    const int rows = 9;
    std::vector<float> x = random_floats(static_cast<std::size_t>(rows) * dim, 21u + dim, -30.0f, 30.0f);
    std::vector<float> w = random_floats(dim, 22u + dim, -2.0f, 2.0f);
    std::vector<float> ref(x.size());
    {
      IsaGuard g(Isa::Portable);
      rmsnorm(x.data(), rows, dim, w.data(), 1e-6f, ref.data());
    }
    for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
      if (!cpu_has(isa)) continue;
      IsaGuard g(isa);
      std::vector<float> out(x.size());
      rmsnorm(x.data(), rows, dim, w.data(), 1e-6f, out.data());
      EXPECT_TRUE(same_bits(out, ref)) << isa_name(isa) << " dim=" << dim;
    }
  }
}

// A row's bits do not depend on the other rows, on the thread count, or on running in place.
TEST(KernelsNorm, RmsnormRowInBatchEqualsAlone) {
  const int rows = 300, dim = 1536;  // big enough for the threaded path
  std::vector<float> x = random_floats(static_cast<std::size_t>(rows) * dim, 31u, -2.0f, 2.0f);
  std::vector<float> w = random_floats(dim, 32u, -2.0f, 2.0f);
  for (Isa isa : kAllIsas) {
    if (!cpu_has(isa)) continue;
    IsaGuard g(isa);
    std::vector<float> batch(x.size()), batch1(x.size()), alone(x.size());
    {
      ThreadGuard t(2);
      rmsnorm(x.data(), rows, dim, w.data(), 1e-5f, batch.data());
    }
    {
      ThreadGuard t(1);
      rmsnorm(x.data(), rows, dim, w.data(), 1e-5f, batch1.data());
    }
    for (int r = 0; r < rows; ++r) {
      rmsnorm(x.data() + r * dim, 1, dim, w.data(), 1e-5f, alone.data() + r * dim);
    }
    EXPECT_TRUE(same_bits(batch, alone)) << isa_name(isa);
    EXPECT_TRUE(same_bits(batch, batch1)) << isa_name(isa);
    std::vector<float> inplace = x;
    rmsnorm(inplace.data(), rows, dim, w.data(), 1e-5f, inplace.data());
    EXPECT_TRUE(same_bits(batch, inplace)) << isa_name(isa);
  }
}

// The fixed order is observable: summing the same squares in plain sequential order gives other
// bits for some rows, so the bitwise tests above could detect a changed order.
TEST(KernelsNorm, ReductionOrderIsObservable) {
  const int rows = 64, dim = 768;
  std::vector<float> x = random_floats(static_cast<std::size_t>(rows) * dim, 41u, -2.0f, 2.0f);
  std::vector<float> w(dim, 1.0f), out(x.size());
  rmsnorm(x.data(), rows, dim, w.data(), 1e-5f, out.data());
  int differ = 0;
  for (int r = 0; r < rows; ++r) {
    float s = 0.0f;
    for (int i = 0; i < dim; ++i) s = std::fma(x[r * dim + i], x[r * dim + i], s);  // one sequential chain
    const float rr = 1.0f / std::sqrt(s / dim + 1e-5f);
    for (int i = 0; i < dim; ++i) differ += ((x[r * dim + i] * rr) * 1.0f) != out[r * dim + i];
  }
  EXPECT_GT(differ, 0);
}

// ---------------------------------------------------------------------------------------------
// Gated RMSNorm

void gated64(const float* y, const float* z, int dim, int group, const float* w, float eps, bool norm_before_gate,
             double* out) {
  std::vector<double> g(group), o(group);
  for (int s = 0; s < dim; s += group) {
    for (int i = 0; i < group; ++i) {
      g[i] = norm_before_gate ? y[s + i] : y[s + i] * silu64(z[s + i]);
    }
    rms64(g.data(), group, w + s, eps, o.data());
    for (int i = 0; i < group; ++i) out[s + i] = norm_before_gate ? o[i] * silu64(z[s + i]) : o[i];
  }
}

TEST(KernelsNorm, GatedMatchesFloat64) {
  const float eps = 1e-5f;
  struct Case {
    int dim, group;
  };
  for (Case cs : {Case{1536, 1536}, Case{1536, 192}, Case{1536, 768}, Case{40, 8}, Case{51, 17}}) {
    const int rows = 4;
    std::vector<float> y = random_floats(static_cast<std::size_t>(rows) * cs.dim, 51u + cs.dim, -2.0f, 2.0f);
    std::vector<float> z = random_floats(y.size(), 52u + cs.group, -6.0f, 6.0f);
    std::vector<float> w = random_floats(cs.dim, 53u, 0.5f, 1.5f);
    for (bool nbg : {false, true}) {
      for (Isa isa : kAllIsas) {
        if (!cpu_has(isa)) continue;
        IsaGuard g(isa);
        std::vector<float> out(y.size());
        gated_rmsnorm(y.data(), z.data(), rows, cs.dim, cs.group, w.data(), eps, nbg, out.data());
        std::vector<double> want(cs.dim);
        for (int r = 0; r < rows; ++r) {
          gated64(y.data() + r * cs.dim, z.data() + r * cs.dim, cs.dim, cs.group, w.data(), eps, nbg, want.data());
          // rmsnorm's bound plus silu_f (≤ 2e-7 relative, see kernels_math_test) and one product.
          const double rel = rms_rel_bound(cs.group) + 2.5e-7;
          for (int i = 0; i < cs.dim; ++i) {
            ASSERT_LE(std::fabs(out[r * cs.dim + i] - want[i]), rel * std::fabs(want[i]) + 1e-30)
                << isa_name(isa) << " dim=" << cs.dim << " group=" << cs.group << " nbg=" << nbg << " i=" << i;
          }
        }
      }
    }
  }
}

TEST(KernelsNorm, GatedIsasRowsThreadsAliasingBitwise) {
  const int rows = 200, dim = 1536, group = 192;
  std::vector<float> y = random_floats(static_cast<std::size_t>(rows) * dim, 61u, -2.0f, 2.0f);
  std::vector<float> z = random_floats(y.size(), 62u, -12.0f, 12.0f);
  std::vector<float> w = random_floats(dim, 63u, -2.0f, 2.0f);
  for (bool nbg : {false, true}) {
    std::vector<float> ref(y.size());
    {
      IsaGuard g(Isa::Portable);
      ThreadGuard t(1);
      gated_rmsnorm(y.data(), z.data(), rows, dim, group, w.data(), 1e-5f, nbg, ref.data());
    }
    for (Isa isa : kAllIsas) {
      if (!cpu_has(isa)) continue;
      IsaGuard g(isa);
      std::vector<float> out(y.size()), alone(y.size());
      {
        ThreadGuard t(2);
        gated_rmsnorm(y.data(), z.data(), rows, dim, group, w.data(), 1e-5f, nbg, out.data());
      }
      EXPECT_TRUE(same_bits(out, ref)) << isa_name(isa) << " nbg=" << nbg;
      for (int r = 0; r < rows; r += 37) {
        gated_rmsnorm(y.data() + r * dim, z.data() + r * dim, 1, dim, group, w.data(), 1e-5f, nbg,
                      alone.data() + r * dim);
        EXPECT_EQ(0, std::memcmp(alone.data() + r * dim, ref.data() + r * dim, dim * sizeof(float)))
            << isa_name(isa) << " row " << r;
      }
      std::vector<float> in_y = y, in_z = z;
      gated_rmsnorm(in_y.data(), z.data(), rows, dim, group, w.data(), 1e-5f, nbg, in_y.data());
      gated_rmsnorm(y.data(), in_z.data(), rows, dim, group, w.data(), 1e-5f, nbg, in_z.data());
      EXPECT_TRUE(same_bits(in_y, ref)) << isa_name(isa) << " out aliases y";
      EXPECT_TRUE(same_bits(in_z, ref)) << isa_name(isa) << " out aliases z";
    }
  }
}

// Per-group normalisation (mamba_ssm) differs from normalising the whole width (HF with
// n_groups > 1), and group_size = dim is the whole-width case.
TEST(KernelsNorm, GatedGroupsAreIndependent) {
  const int dim = 64;
  std::vector<float> y = random_floats(dim, 71u, -2.0f, 2.0f), z = random_floats(dim, 72u, -2.0f, 2.0f), w(dim, 1.0f);
  for (int i = 0; i < 32; ++i) y[i] *= 100.0f;  // very different scale in the two halves
  std::vector<float> grouped(dim), whole(dim), half(32);
  gated_rmsnorm(y.data(), z.data(), 1, dim, 32, w.data(), 1e-5f, false, grouped.data());
  gated_rmsnorm(y.data(), z.data(), 1, dim, dim, w.data(), 1e-5f, false, whole.data());
  gated_rmsnorm(y.data() + 32, z.data() + 32, 1, 32, 32, w.data(), 1e-5f, false, half.data());
  EXPECT_NE(0, std::memcmp(grouped.data(), whole.data(), dim * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(grouped.data() + 32, half.data(), 32 * sizeof(float)));
  EXPECT_THROW(gated_rmsnorm(y.data(), z.data(), 1, dim, 48, w.data(), 1e-5f, false, grouped.data()), Error);
}

// ---------------------------------------------------------------------------------------------
// conv1d

struct ConvCase {
  int ch, k;
  bool bias, silu;
};

TEST(KernelsConv, MatchesFloat64) {
  const int n = 20;
  for (ConvCase cs : {ConvCase{1792, 4, true, true}, ConvCase{37, 4, true, false}, ConvCase{19, 3, false, true},
                      ConvCase{8, 1, false, false}}) {
    std::vector<float> in = random_floats(static_cast<std::size_t>(n) * cs.ch, 81u + cs.ch, -3.0f, 3.0f);
    std::vector<float> w = random_floats(static_cast<std::size_t>(cs.ch) * cs.k, 82u, -2.0f, 2.0f);
    std::vector<float> bias = random_floats(cs.ch, 83u, -2.0f, 2.0f);
    std::vector<float> state0 = random_floats(static_cast<std::size_t>(cs.k - 1) * cs.ch, 84u, -3.0f, 3.0f);
    for (Isa isa : kAllIsas) {
      if (!cpu_has(isa)) continue;
      IsaGuard g(isa);
      std::vector<float> state = state0, out(in.size());
      conv1d_causal(in.data(), n, cs.ch, w.data(), cs.bias ? bias.data() : nullptr, cs.k, state.data(), cs.silu,
                    out.data());
      for (int t = 0; t < n; ++t) {
        for (int c = 0; c < cs.ch; ++c) {
          double acc = cs.bias ? bias[c] : 0.0, mag = std::fabs(acc);
          for (int j = 0; j < cs.k; ++j) {
            const int r = t + j - (cs.k - 1);  // input row, negative = carried-in state
            const double xv = r < 0 ? state0[(r + cs.k - 1) * cs.ch + c] : in[r * cs.ch + c];
            acc += static_cast<double>(w[c * cs.k + j]) * xv;
            mag += std::fabs(w[c * cs.k + j] * xv);
          }
          // An FMA chain of k terms: |err| <= k·u·Σ|terms| (taken as 2^-23 per term). silu is
          // 1.1-Lipschitz and adds its own 2e-7 relative error.
          double bound = cs.k * std::ldexp(1.0, -23) * mag;
          double want = acc;
          if (cs.silu) {
            want = silu64(acc);
            bound = 1.1 * bound + 2.5e-7 * std::fabs(want);
          }
          ASSERT_LE(std::fabs(out[t * cs.ch + c] - want), bound + 1e-30)
              << isa_name(isa) << " ch=" << cs.ch << " t=" << t << " c=" << c;
        }
      }
      // The state now holds the last k-1 input rows.
      for (int s = 0; s < cs.k - 1; ++s) {
        EXPECT_EQ(0, std::memcmp(state.data() + s * cs.ch, in.data() + (n - (cs.k - 1) + s) * cs.ch, cs.ch * 4));
      }
    }
  }
}

// Prefill vs decode: n rows in one call equal n one-row updates, outputs and final state.
TEST(KernelsConv, CausalEqualsRepeatedUpdates) {
  for (ConvCase cs : {ConvCase{1792, 4, true, true}, ConvCase{45, 4, false, true}, ConvCase{13, 2, true, false}}) {
    const int n = 23;
    std::vector<float> in = random_floats(static_cast<std::size_t>(n) * cs.ch, 91u, -3.0f, 3.0f);
    std::vector<float> w = random_floats(static_cast<std::size_t>(cs.ch) * cs.k, 92u, -2.0f, 2.0f);
    std::vector<float> bias = random_floats(cs.ch, 93u, -2.0f, 2.0f);
    std::vector<float> state0 = random_floats(static_cast<std::size_t>(cs.k - 1) * cs.ch, 94u, -2.0f, 2.0f);
    const float* bp = cs.bias ? bias.data() : nullptr;
    for (Isa isa : kAllIsas) {
      if (!cpu_has(isa)) continue;
      IsaGuard g(isa);
      std::vector<float> s1 = state0, s2 = state0, o1(in.size()), o2(in.size());
      conv1d_causal(in.data(), n, cs.ch, w.data(), bp, cs.k, s1.data(), cs.silu, o1.data());
      for (int t = 0; t < n; ++t) {
        conv1d_update(in.data() + t * cs.ch, cs.ch, w.data(), bp, cs.k, s2.data(), cs.silu, o2.data() + t * cs.ch);
      }
      EXPECT_TRUE(same_bits(o1, o2)) << isa_name(isa) << " ch=" << cs.ch;
      EXPECT_TRUE(same_bits(s1, s2)) << isa_name(isa) << " ch=" << cs.ch;
    }
  }
}

// The model makes the tap-major weights once at load (conv1d_taps) and calls conv1d_causal_taps; the
// layout is taps[j·ch + c] = w[c·k + j], and a step from it gives conv1d_causal's bits.
TEST(KernelsConv, TapMajorWeightsGiveTheBitsOfTheHfLayout) {
  const int ch = 37, k = 4, n = 9;
  const std::vector<float> w = random_floats(static_cast<std::size_t>(ch) * k, 91u, -2.0f, 2.0f);
  const std::vector<float> taps = conv1d_taps(w.data(), ch, k);
  ASSERT_EQ(taps.size(), w.size());
  EXPECT_EQ(taps[0], w[0]);
  EXPECT_EQ(taps[1], w[k]);                                      // channel 1, tap 0
  EXPECT_EQ(taps[static_cast<std::size_t>(ch)], w[1]);           // channel 0, tap 1
  EXPECT_EQ(taps[static_cast<std::size_t>(3) * ch + 36], w[36 * k + 3]);
  const std::vector<float> in = random_floats(static_cast<std::size_t>(n) * ch, 92u, -3.0f, 3.0f);
  const std::vector<float> bias = random_floats(ch, 93u, -2.0f, 2.0f);
  const std::vector<float> state0 = random_floats(static_cast<std::size_t>(k - 1) * ch, 94u, -2.0f, 2.0f);
  for (Isa isa : kAllIsas) {
    if (!cpu_has(isa)) continue;
    IsaGuard g(isa);
    std::vector<float> s1 = state0, s2 = state0, o1(in.size()), o2(in.size());
    conv1d_causal(in.data(), n, ch, w.data(), bias.data(), k, s1.data(), true, o1.data());
    conv1d_causal_taps(in.data(), n, ch, taps.data(), bias.data(), k, s2.data(), true, o2.data());
    EXPECT_TRUE(same_bits(o1, o2)) << isa_name(isa);
    EXPECT_TRUE(same_bits(s1, s2)) << isa_name(isa);
    // The HF layout passed as if it were tap-major is a different conv: the check can fail.
    std::vector<float> s3 = state0, o3(in.size());
    conv1d_causal_taps(in.data(), n, ch, w.data(), bias.data(), k, s3.data(), true, o3.data());
    EXPECT_FALSE(same_bits(o1, o3)) << isa_name(isa);
  }
}

// The mixer reads xBC and z in place, as column ranges of the in_proj output: a row stride wider
// than the row must give the bits of the packed rows, and the conv state must come out the same.
TEST(KernelsConv, StridedInputEqualsPackedRows) {
  const int ch = 45, k = 4, n = 23, ld = 61, off = 7;
  std::vector<float> wide = random_floats(static_cast<std::size_t>(n) * ld, 81u, -3.0f, 3.0f), packed(n * ch);
  for (int t = 0; t < n; ++t) std::memcpy(&packed[t * ch], &wide[t * ld + off], ch * sizeof(float));
  std::vector<float> w = random_floats(static_cast<std::size_t>(ch) * k, 82u, -2.0f, 2.0f), bias = random_floats(ch, 83u, -2.0f, 2.0f);
  std::vector<float> state0 = random_floats(static_cast<std::size_t>(k - 1) * ch, 84u, -2.0f, 2.0f);
  for (Isa isa : kAllIsas) {
    if (!cpu_has(isa)) continue;
    IsaGuard g(isa);
    std::vector<float> s1 = state0, s2 = state0, o1(packed.size()), o2(packed.size());
    conv1d_causal(packed.data(), n, ch, w.data(), bias.data(), k, s1.data(), true, o1.data());
    conv1d_causal(wide.data() + off, n, ch, w.data(), bias.data(), k, s2.data(), true, o2.data(), ld);
    EXPECT_TRUE(same_bits(o1, o2)) << isa_name(isa);
    EXPECT_TRUE(same_bits(s1, s2)) << isa_name(isa);
  }
}

TEST(KernelsNorm, GatedStridedZEqualsPackedRows) {
  const int rows = 19, dim = 96, group = 32, ld = 150, off = 5;
  std::vector<float> y = random_floats(static_cast<std::size_t>(rows) * dim, 85u, -2.0f, 2.0f);
  std::vector<float> wide = random_floats(static_cast<std::size_t>(rows) * ld, 86u, -12.0f, 12.0f), z(y.size());
  for (int r = 0; r < rows; ++r) std::memcpy(&z[r * dim], &wide[r * ld + off], dim * sizeof(float));
  std::vector<float> w = random_floats(dim, 87u, -2.0f, 2.0f);
  for (Isa isa : kAllIsas) {
    if (!cpu_has(isa)) continue;
    IsaGuard g(isa);
    for (bool nbg : {false, true}) {
      std::vector<float> o1(y.size()), o2(y.size());
      gated_rmsnorm(y.data(), z.data(), rows, dim, group, w.data(), 1e-5f, nbg, o1.data());
      gated_rmsnorm(y.data(), wide.data() + off, rows, dim, group, w.data(), 1e-5f, nbg, o2.data(), ld);
      EXPECT_TRUE(same_bits(o1, o2)) << isa_name(isa) << " nbg=" << nbg;
    }
  }
}

// The companion: the prefill-vs-decode comparison sees an order change. The one-token update is
// the documented chain (bias, then FMAs over the window oldest first); a decode that ran the
// chain newest first, as a kernel written another way might, gives other bits for many outputs.
TEST(KernelsConv, DecodeOrderIsObservable) {
  const int ch = 45, k = 4, n = 23;
  std::vector<float> in = random_floats(static_cast<std::size_t>(n) * ch, 95u, -3.0f, 3.0f);
  std::vector<float> w = random_floats(static_cast<std::size_t>(ch) * k, 96u, -2.0f, 2.0f);
  std::vector<float> bias = random_floats(ch, 97u, -2.0f, 2.0f);
  std::vector<float> state0 = random_floats(static_cast<std::size_t>(k - 1) * ch, 98u, -2.0f, 2.0f);
  // [state0; in]: row r of the input is row r + k - 1 here.
  std::vector<float> rows = state0;
  rows.insert(rows.end(), in.begin(), in.end());
  std::vector<float> oldest_first(in.size()), newest_first(in.size());
  for (int t = 0; t < n; ++t) {
    for (int c = 0; c < ch; ++c) {
      float a = bias[c], b = bias[c];
      for (int j = 0; j < k; ++j) a = std::fma(w[c * k + j], rows[(t + j) * ch + c], a);
      for (int j = k - 1; j >= 0; --j) b = std::fma(w[c * k + j], rows[(t + j) * ch + c], b);
      oldest_first[t * ch + c] = a;
      newest_first[t * ch + c] = b;
    }
  }
  for (Isa isa : kAllIsas) {
    if (!cpu_has(isa)) continue;
    IsaGuard g(isa);
    std::vector<float> st = state0, decoded(in.size());
    for (int t = 0; t < n; ++t) {
      conv1d_update(in.data() + t * ch, ch, w.data(), bias.data(), k, st.data(), false, decoded.data() + t * ch);
    }
    EXPECT_TRUE(same_bits(decoded, oldest_first)) << isa_name(isa);
    EXPECT_FALSE(same_bits(decoded, newest_first)) << isa_name(isa);
  }
  int differ = 0;
  for (std::size_t i = 0; i < in.size(); ++i) differ += oldest_first[i] != newest_first[i];
  EXPECT_GT(differ, static_cast<int>(in.size()) / 10);
}

// Chunked prefill: splitting the sequence anywhere (also before k-1 rows) changes no bits.
TEST(KernelsConv, SplitSequenceBitwise) {
  const int ch = 100, k = 4, n = 17;
  std::vector<float> in = random_floats(static_cast<std::size_t>(n) * ch, 101u, -2.0f, 2.0f);
  std::vector<float> w = random_floats(static_cast<std::size_t>(ch) * k, 102u, -2.0f, 2.0f);
  std::vector<float> bias = random_floats(ch, 103u, -2.0f, 2.0f);
  std::vector<float> state0(static_cast<std::size_t>(k - 1) * ch, 0.0f);
  std::vector<float> whole(in.size()), ws = state0;
  conv1d_causal(in.data(), n, ch, w.data(), bias.data(), k, ws.data(), true, whole.data());
  for (int split = 1; split < n; ++split) {
    std::vector<float> part(in.size()), ps = state0;
    conv1d_causal(in.data(), split, ch, w.data(), bias.data(), k, ps.data(), true, part.data());
    conv1d_causal(in.data() + split * ch, n - split, ch, w.data(), bias.data(), k, ps.data(), true,
                  part.data() + split * ch);
    EXPECT_TRUE(same_bits(part, whole)) << "split " << split;
    EXPECT_TRUE(same_bits(ps, ws)) << "split " << split;
  }
}

TEST(KernelsConv, IsasAndThreadsAgreeBitwise) {
  for (int ch : {1, 7, 8, 15, 16, 17, 1795}) {
    const int n = 300, k = 4;  // n·ch·k is large enough for the threaded path at ch = 1795
    std::vector<float> in = random_floats(static_cast<std::size_t>(n) * ch, 111u + ch, -8.0f, 8.0f);
    std::vector<float> w = random_floats(static_cast<std::size_t>(ch) * k, 112u, -2.0f, 2.0f);
    std::vector<float> bias = random_floats(ch, 113u, -2.0f, 2.0f);
    std::vector<float> state0 = random_floats(static_cast<std::size_t>(k - 1) * ch, 114u, -2.0f, 2.0f);
    std::vector<float> ref(in.size()), rs = state0;
    {
      IsaGuard g(Isa::Portable);
      ThreadGuard t(1);
      conv1d_causal(in.data(), n, ch, w.data(), bias.data(), k, rs.data(), true, ref.data());
    }
    for (Isa isa : kAllIsas) {
      if (!cpu_has(isa)) continue;
      IsaGuard g(isa);
      ThreadGuard t(2);
      std::vector<float> out(in.size()), s = state0;
      conv1d_causal(in.data(), n, ch, w.data(), bias.data(), k, s.data(), true, out.data());
      EXPECT_TRUE(same_bits(out, ref)) << isa_name(isa) << " ch=" << ch;
      EXPECT_TRUE(same_bits(s, rs)) << isa_name(isa) << " ch=" << ch;
    }
  }
}

TEST(KernelsConv, RejectsBadKernelSize) {
  float x = 0.0f, o = 0.0f;
  EXPECT_THROW(conv1d_causal(&x, 1, 1, &x, nullptr, 0, nullptr, false, &o), Error);
}

}  // namespace
}  // namespace parity::kernels
