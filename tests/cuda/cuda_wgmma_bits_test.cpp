// Hopper's wgmma accumulates a K-chain of bf16 products into fp32 with the same bits as mma.sync
// m16n8k16, the instruction every parity GEMM kernel issues today (docs/cuda.md, "GEMM"). This is
// what lets a WGMMA/TMA kernel for many rows keep the batch invariance the tests in
// cuda_gemm_test.cpp hold the other kernels to. Inputs span 2^-12..2^12 so rounding inside the
// chain matters; the companion shows the same comparison sees a change of order.
#include <cmath>

#include "tests/cuda/gpu_test_support.h"
#include "tests/cuda/wgmma_chain.h"

namespace parity {
namespace {

std::vector<uint16_t> random_bf16(std::size_t n, uint64_t seed, bool wide) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-12, 12);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(wide ? std::ldexp(u(g), e(g)) : u(g));
  return v;
}

std::size_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!test::same_bits(&a[i], &b[i], 1)) return i;
  return a.size();
}

TEST(CudaWgmmaBits, WgmmaChainEqualsMmaSyncChain) {
  PARITY_REQUIRE_GPU();
  int trial = 0;
  for (int K : {256, 4096})
    for (bool wide : {false, true}) {
      const auto r = test::run_chains(random_bf16(std::size_t(64) * K, 11 + trial, wide),
                                      random_bf16(std::size_t(8) * K, 23 + trial, wide), K);
      const std::size_t i = first_difference(r.mma, r.wgmma);
      EXPECT_EQ(i, r.mma.size()) << "K " << K << (wide ? " wide" : "") << ": first difference at " << i << ", mma "
                                 << r.mma[i] << " vs wgmma " << r.wgmma[i];
      double mag = 0;
      for (float x : r.mma) mag += std::fabs(x);
      EXPECT_GT(mag, 1.0);
      ++trial;
    }
}

TEST(CudaWgmmaBits, CompanionAnotherStepOrderChangesBits) {
  PARITY_REQUIRE_GPU();
  const int K = 4096;
  const auto r = test::run_chains(random_bf16(std::size_t(64) * K, 5, true), random_bf16(std::size_t(8) * K, 6, true), K);
  int differ = 0;
  for (std::size_t i = 0; i < r.mma.size(); ++i) differ += !test::same_bits(&r.mma[i], &r.mma_reversed[i], 1);
  EXPECT_GT(differ, 64);
}

}  // namespace
}  // namespace parity
