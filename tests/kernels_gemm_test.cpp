// GEMM contract tests (DESIGN.md rule 3): every path gives the scalar reference's bits for any
// shape, M, thread count and instruction set; accuracy against float64 within the FMA-chain bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "kernels/gemm.h"
#include "kernels/gemm_internal.h"
#include "kernels/isa.h"
#include "isa_test_support.h"
#include "test_support.h"

namespace parity::kernels {
namespace {

using namespace test;

const DType kWeightTypes[] = {DType::F32, DType::BF16, DType::F16};

// A random finite half (normal, |x| in [2^-6, 2^2)) as raw bits.
uint16_t random_f16(std::mt19937& rng) {
  uint32_t r = rng();
  uint32_t sign = (r >> 31) << 15;
  uint32_t exp = 9 + (r >> 16) % 8;  // biased exponent 9..16
  uint32_t mant = r & 0x3ffu;
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}

struct Weights {
  DType dtype;
  int n, k;
  std::vector<uint8_t> raw;  // n×k of dtype, HF layout
  float at(int row, int col) const {
    std::size_t i = static_cast<std::size_t>(row) * k + col;
    switch (dtype) {
      case DType::F32: {
        float f;
        std::memcpy(&f, raw.data() + 4 * i, 4);
        return f;
      }
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        return bf16_to_f32(h);
      }
      default: {
        uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        return f16_to_f32(h);
      }
    }
  }
};

Weights random_weights(DType dtype, int n, int k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Weights w{dtype, n, k, std::vector<uint8_t>(static_cast<std::size_t>(n) * k * dtype_size(dtype))};
  for (std::size_t i = 0; i < static_cast<std::size_t>(n) * k; ++i) {
    if (dtype == DType::F32) {
      float f = nd(rng);
      std::memcpy(w.raw.data() + 4 * i, &f, 4);
    } else {
      uint16_t h = dtype == DType::BF16 ? f32_to_bf16(nd(rng)) : random_f16(rng);
      std::memcpy(w.raw.data() + 2 * i, &h, 2);
    }
  }
  return w;
}

using parity::test::random_floats;
using parity::test::same_bits;

std::string where(Isa isa, DType dt, int m, int n, int k, bool bias) {
  return std::string(isa_name(isa)) + " " + dtype_name(dt) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
         " k=" + std::to_string(k) + (bias ? " bias" : " no-bias");
}

// Paths the CPU cannot run are counted once per test and reported, never left out silently.
TEST(KernelsIsa, PathsTheCpuCannotRunAreCountedAndReported) {
  IsaNotRunTally t;
  EXPECT_EQ(t.summary(), "");
  EXPECT_TRUE(t.record("A.x", Isa::Avx512));
  EXPECT_FALSE(t.record("A.x", Isa::Avx512));  // once per test
  EXPECT_TRUE(t.record("A.y", Isa::Avx512));
  EXPECT_TRUE(t.record("A.y", Isa::Avx2));
  EXPECT_EQ(t.tests(Isa::Avx512), 2);
  EXPECT_EQ(t.tests(Isa::Portable), 0);
  EXPECT_EQ(t.summary(), "ISA avx2: not run on this CPU (1 test)\nISA avx512: not run on this CPU (2 tests)\n");
  // On this CPU: cpu_has is false exactly beyond the detected path, and each such path is recorded.
  for (Isa isa : kAllIsas) {
    const int before = isa_not_run().tests(isa);
    const bool has = cpu_has(isa);
    EXPECT_EQ(has, static_cast<int>(isa) <= static_cast<int>(detected_isa())) << isa_name(isa);
    EXPECT_EQ(isa_not_run().tests(isa) - before, has ? 0 : 1) << isa_name(isa);
  }
}

TEST(KernelsIsa, OverrideAndThreads) {
  for (Isa isa : kAllIsas) {
    if (cpu_has(isa)) {
      set_isa_override(isa);
      EXPECT_EQ(active_isa(), isa);
    } else {
      EXPECT_THROW(set_isa_override(isa), Error) << isa_name(isa);
    }
  }
  clear_isa_override();
  EXPECT_EQ(active_isa(), detected_isa());
  EXPECT_GE(num_threads(), 1);
  EXPECT_THROW(set_num_threads(0), Error);
  ThreadGuard g(3);
  EXPECT_EQ(num_threads(), 3);
}

TEST(KernelsGemm, RejectsNonFloatWeights) {
  int32_t w[4] = {};
  EXPECT_THROW(pack_weight(w, DType::I32, 2, 2), Error);
}

// Odd shapes: n around the 32-column panel and 4-panel tile edges, k odd, m across every row
// block remainder of both SIMD kernels.
TEST(KernelsGemm, MatchesReferenceBitwise) {
  const int ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 11, 13, 19, 64};
  const int ns[] = {1, 17, 32, 33, 95, 129, 200};
  const int ks[] = {1, 3, 32, 77};
  int checked = 0;
  for (DType dt : kWeightTypes) {
    for (int n : ns) {
      for (int k : ks) {
        Weights w = random_weights(dt, n, k, 1000u + n * 7u + k);
        PackedWeight pw = pack_weight(w.raw.data(), dt, n, k);
        std::vector<float> bias = random_floats(n, 77u + n, -4.0f, 4.0f);
        for (int m : ms) {
          std::vector<float> a = random_floats(static_cast<std::size_t>(m) * k, 5u + m * 31u + k);
          for (bool with_bias : {false, true}) {
            const float* bp = with_bias ? bias.data() : nullptr;
            std::vector<float> ref(static_cast<std::size_t>(m) * n);
            gemm_reference(a.data(), m, k, w.raw.data(), dt, n, k, bp, ref.data(), n);
            for (Isa isa : kAllIsas) {
              if (!cpu_has(isa)) continue;
              IsaGuard g(isa);
              std::vector<float> c(static_cast<std::size_t>(m) * n, -7.0f);
              gemm(a.data(), m, k, pw, bp, c.data(), n);
              ASSERT_TRUE(same_bits(c, ref)) << where(isa, dt, m, n, k, with_bias);
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// Row strides wider than the row: nothing outside the C rows is written, and the strides do not
// change any bits.
TEST(KernelsGemm, StridesLeavePaddingAlone) {
  const int m = 9, n = 45, k = 20, lda = 27, ldc = 53;
  for (DType dt : kWeightTypes) {
    Weights w = random_weights(dt, n, k, 4242u);
    PackedWeight pw = pack_weight(w.raw.data(), dt, n, k);
    std::vector<float> bias = random_floats(n, 99u);
    std::vector<float> a = random_floats(static_cast<std::size_t>(m) * lda, 98u);
    std::vector<float> ref(static_cast<std::size_t>(m) * ldc, 123.0f);
    gemm_reference(a.data(), m, lda, w.raw.data(), dt, n, k, bias.data(), ref.data(), ldc);
    for (Isa isa : kAllIsas) {
      if (!cpu_has(isa)) continue;
      IsaGuard g(isa);
      std::vector<float> c(static_cast<std::size_t>(m) * ldc, 123.0f);
      gemm(a.data(), m, lda, pw, bias.data(), c.data(), ldc);
      EXPECT_TRUE(same_bits(c, ref)) << isa_name(isa) << " " << dtype_name(dt);
    }
  }
}

// Batch invariance: row i of an M-row GEMM has the bits of the 1-row GEMM of row i.
TEST(KernelsGemm, RowOfBatchEqualsSingleRow) {
  const int n = 130, k = 97;
  for (DType dt : kWeightTypes) {
    Weights w = random_weights(dt, n, k, 31337u);
    PackedWeight pw = pack_weight(w.raw.data(), dt, n, k);
    std::vector<float> bias = random_floats(n, 3u);
    std::vector<float> a = random_floats(static_cast<std::size_t>(300) * k, 4u);
    for (Isa isa : kAllIsas) {
      if (!cpu_has(isa)) continue;
      IsaGuard g(isa);
      std::vector<float> single(static_cast<std::size_t>(300) * n);
      for (int i = 0; i < 300; ++i) {
        gemm(a.data() + static_cast<std::size_t>(i) * k, 1, k, pw, bias.data(),
             single.data() + static_cast<std::size_t>(i) * n, n);
      }
      std::vector<int> sizes;
      for (int m = 1; m <= 64; ++m) sizes.push_back(m);
      sizes.push_back(300);
      for (int m : sizes) {
        // Start the batch at a row offset that differs from 0 so rows land in new block positions.
        const int off = (m * 5) % (300 - m + 1);
        std::vector<float> c(static_cast<std::size_t>(m) * n);
        gemm(a.data() + static_cast<std::size_t>(off) * k, m, k, pw, bias.data(), c.data(), n);
        ASSERT_EQ(0, std::memcmp(c.data(), single.data() + static_cast<std::size_t>(off) * n, c.size() * 4))
            << isa_name(isa) << " " << dtype_name(dt) << " m=" << m;
      }
    }
  }
}

// The many-row tiles (gemm_wide_avx512.cpp) cut K into blocks, keeping partial sums in C between
// them, and cut rows into chunks that fit L2. Shapes here cross both cuts (K over two blocks plus a
// partial one; rows over several chunks with a short last block) and partial panels: every
// element must still have the bits of the reference chain, and of the same row computed alone.
TEST(KernelsGemm, ManyRowTilesKeepTheChainAcrossKBlocksAndRowChunks) {
  struct Shape {
    int m, n, k;
  };
  const Shape shapes[] = {{kernels::detail::kWideRows, 45, 600}, {61, 64, 1100}, {700, 33, 600}, {100, 96, 3000}};
  int checked = 0;
  for (const Shape& s : shapes) {
    for (DType dt : kWeightTypes) {
      Weights w = random_weights(dt, s.n, s.k, 900u + s.k);
      PackedWeight pw = pack_weight(w.raw.data(), dt, s.n, s.k);
      std::vector<float> bias = random_floats(s.n, 901u);
      std::vector<float> a = random_floats(static_cast<std::size_t>(s.m) * s.k, 902u + s.m);
      for (bool with_bias : {false, true}) {
        const float* bp = with_bias ? bias.data() : nullptr;
        std::vector<float> ref(static_cast<std::size_t>(s.m) * s.n);
        gemm_reference(a.data(), s.m, s.k, w.raw.data(), dt, s.n, s.k, bp, ref.data(), s.n);
        for (Isa isa : kAllIsas) {
          if (!cpu_has(isa)) continue;
          IsaGuard g(isa);
          std::vector<float> c(ref.size(), -7.0f), row(s.n);
          gemm(a.data(), s.m, s.k, pw, bp, c.data(), s.n);
          std::size_t i = 0;
          while (i < c.size() && std::memcmp(&c[i], &ref[i], 4) == 0) ++i;
          ASSERT_EQ(i, c.size()) << where(isa, dt, s.m, s.n, s.k, with_bias) << ": first difference at row "
                                 << i / s.n << " column " << i % s.n << ": " << c[i] << " vs reference " << ref[i];
          const int last = s.m - 1;  // the short last block of the last chunk
          gemm(a.data() + static_cast<std::size_t>(last) * s.k, 1, s.k, pw, bp, row.data(), s.n);
          ASSERT_TRUE(same_bits(row.data(), c.data() + static_cast<std::size_t>(last) * s.n, s.n))
              << where(isa, dt, s.m, s.n, s.k, with_bias) << ": last row alone";
          ++checked;
        }
      }
    }
  }
  EXPECT_GE(checked, 4 * 3 * 2);
}

TEST(KernelsGemm, ThreadCountDoesNotChangeBits) {
  struct Shape {
    int m, n, k;
  };
  // Wide N splits columns across threads; narrow N with many rows makes the driver split rows;
  // 120 x 700 x 2000 takes the many-row kernel's units (two row chunks of 60, 22 panels) in
  // whatever order the threads come free.
  const Shape shapes[] = {{37, 1000, 200}, {300, 64, 150}, {1, 3000, 256}, {13, 33, 500}, {120, 700, 2000}};
  for (const Shape& s : shapes) {
    for (DType dt : {DType::F32, DType::BF16}) {
      Weights w = random_weights(dt, s.n, s.k, 555u);
      PackedWeight pw = pack_weight(w.raw.data(), dt, s.n, s.k);
      std::vector<float> bias = random_floats(s.n, 556u);
      std::vector<float> a = random_floats(static_cast<std::size_t>(s.m) * s.k, 557u);
      std::vector<float> c1(static_cast<std::size_t>(s.m) * s.n), c2(c1.size()), c3(c1.size());
      {
        ThreadGuard t(1);
        gemm(a.data(), s.m, s.k, pw, bias.data(), c1.data(), s.n);
      }
      {
        ThreadGuard t(2);
        gemm(a.data(), s.m, s.k, pw, bias.data(), c2.data(), s.n);
      }
      {
        ThreadGuard t(5);
        gemm(a.data(), s.m, s.k, pw, bias.data(), c3.data(), s.n);
      }
      EXPECT_TRUE(same_bits(c1, c2)) << s.m << "x" << s.n << "x" << s.k << " " << dtype_name(dt);
      EXPECT_TRUE(same_bits(c1, c3)) << s.m << "x" << s.n << "x" << s.k << " " << dtype_name(dt);
    }
  }
}

TEST(KernelsGemm, IsasAgreeBitwiseOnModelShapes) {
  bool any = false;
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (!cpu_has(isa)) continue;
    any = true;
    for (DType dt : kWeightTypes) {
      const int m = 21, n = 3352, k = 768;
      Weights w = random_weights(dt, n, k, 8u);
      PackedWeight pw = pack_weight(w.raw.data(), dt, n, k);
      std::vector<float> a = random_floats(static_cast<std::size_t>(m) * k, 9u);
      std::vector<float> ref(static_cast<std::size_t>(m) * n), c(ref.size());
      {
        IsaGuard g(Isa::Portable);
        gemm(a.data(), m, k, pw, nullptr, ref.data(), n);
      }
      {
        IsaGuard g(isa);
        gemm(a.data(), m, k, pw, nullptr, c.data(), n);
      }
      EXPECT_TRUE(same_bits(c, ref)) << isa_name(isa) << " " << dtype_name(dt);
    }
  }
  if (!any) GTEST_SKIP() << "CPU has neither AVX2 nor AVX-512";
}

// The bitwise tests can fail: another summation order over the same products (two half chains
// added at the end, as a K-split across threads would do) gives other bits for many elements.
TEST(KernelsGemm, SplitKOrderIsObservable) {
  const int m = 8, n = 64, k = 768;
  Weights w = random_weights(DType::F32, n, k, 606u);
  PackedWeight pw = pack_weight(w.raw.data(), DType::F32, n, k);
  std::vector<float> a = random_floats(static_cast<std::size_t>(m) * k, 607u);
  std::vector<float> c(static_cast<std::size_t>(m) * n);
  gemm(a.data(), m, k, pw, nullptr, c.data(), n);
  int differ = 0;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      float lo = 0.0f, hi = 0.0f;
      for (int kk = 0; kk < k / 2; ++kk) lo = std::fma(a[i * k + kk], w.at(j, kk), lo);
      for (int kk = k / 2; kk < k; ++kk) hi = std::fma(a[i * k + kk], w.at(j, kk), hi);
      differ += (lo + hi) != c[i * n + j];
    }
  }
  EXPECT_GT(differ, m * n / 4);
}

// Accuracy: a sequential FMA chain of length K has |error| <= gamma_K · Σ|a_k w_k| with
// gamma_K = K·u/(1 - K·u), u = 2^-24; the final bias add adds at most u·|result|. The test allows
// twice that: |c - exact| <= (K+1)·2^-23·(Σ|a_k w_k| + |bias|).
TEST(KernelsGemm, WithinFmaChainBoundOfFloat64) {
  const int m = 5, n = 70, k = 1536;
  for (DType dt : kWeightTypes) {
    Weights w = random_weights(dt, n, k, 2024u);
    PackedWeight pw = pack_weight(w.raw.data(), dt, n, k);
    std::vector<float> bias = random_floats(n, 1u, -2.0f, 2.0f);
    std::vector<float> a = random_floats(static_cast<std::size_t>(m) * k, 2u);
    std::vector<float> c(static_cast<std::size_t>(m) * n);
    gemm(a.data(), m, k, pw, bias.data(), c.data(), n);
    double worst = 0.0;
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double exact = 0.0, mag = std::fabs(static_cast<double>(bias[j]));
        for (int kk = 0; kk < k; ++kk) {
          double p = static_cast<double>(a[static_cast<std::size_t>(i) * k + kk]) * w.at(j, kk);
          exact += p;
          mag += std::fabs(p);
        }
        exact += bias[j];
        const double bound = (k + 1) * std::ldexp(1.0, -23) * mag;
        const double err = std::fabs(c[static_cast<std::size_t>(i) * n + j] - exact);
        ASSERT_LE(err, bound) << dtype_name(dt) << " at " << i << "," << j;
        worst = std::max(worst, err / bound);
      }
    }
    EXPECT_LT(worst, 1.0);
  }
}

// Widening is exact: with one-hot A rows the output is the stored weight itself, for every half
// including subnormals, and every bf16 sign/exponent pattern.
TEST(KernelsGemm, WideningIsExact) {
  const int n = 64, k = 1024;
  for (DType dt : {DType::F16, DType::BF16}) {
    std::vector<uint16_t> raw(static_cast<std::size_t>(n) * k);
    for (std::size_t i = 0; i < raw.size(); ++i) {
      uint16_t h = static_cast<uint16_t>(i);
      // keep finite values only (inf·0 in the other terms would give NaN)
      if (dt == DType::F16 && ((h >> 10) & 0x1f) == 0x1f) h &= 0x83ff;
      if (dt == DType::BF16 && ((h >> 7) & 0xff) == 0xff) h &= 0x807f;
      raw[i] = h;
    }
    PackedWeight pw = pack_weight(raw.data(), dt, n, k);
    for (Isa isa : kAllIsas) {
      if (!cpu_has(isa)) continue;
      IsaGuard g(isa);
      for (int kk : {0, 1, 511, 1023}) {
        std::vector<float> a(k, 0.0f), c(n);
        a[kk] = 1.0f;
        gemm(a.data(), 1, k, pw, nullptr, c.data(), n);
        for (int j = 0; j < n; ++j) {
          uint16_t h = raw[static_cast<std::size_t>(j) * k + kk];
          float want = dt == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
          want = 0.0f + want;  // the chain starts at +0.0f, so -0.0 weights yield +0.0
          ASSERT_EQ(0, std::memcmp(&c[j], &want, 4)) << isa_name(isa) << " " << dtype_name(dt) << " h=" << h;
        }
      }
    }
  }
}

}  // namespace
}  // namespace parity::kernels
