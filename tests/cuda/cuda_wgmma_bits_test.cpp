// Hopper's wgmma accumulates a K-chain of bf16 products into fp32 with the same bits as mma.sync
// m16n8k16, the instruction every parity GEMM kernel issues today (docs/cuda.md, "GEMM"). This is
// what lets a WGMMA/TMA kernel for many rows keep the batch invariance the tests in
// cuda_gemm_test.cpp hold the other kernels to; with the operands' roles swapped too (the weights
// as wgmma's A, the swap-AB GEMM's layout). Inputs span 2^-12..2^12 so rounding inside the
// chain matters; the companion shows the same comparison sees a change of order.
#include <cmath>
#include <cstdio>

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

// The swap-AB GEMM's premise (gemm_swap_ab.cu): wgmma with the weights as its m64 A operand and the
// activations as its B operand, both from 128-byte-swizzled shared memory, computes Dᵀ with the
// bits of the mma.sync chain that takes the activations as its A side. The operands hold a zero
// row of X against an all-negative row of W: every product is -0, and the chain from c = +0 gives
// +0 (the case wgmma's no-addend first step would get wrong).
TEST(CudaWgmmaBits, SwappedOperandsGiveTheTransposedMmaSyncBits) {
  PARITY_REQUIRE_GPU();
  int trial = 0;
  for (int K : {256, 4096})
    for (bool wide : {false, true}) {
      std::vector<uint16_t> x = random_bf16(std::size_t(16) * K, 31 + trial, wide);
      std::vector<uint16_t> w = random_bf16(std::size_t(64) * K, 37 + trial, wide);
      for (int k = 0; k < K; ++k) {
        x[std::size_t(3) * K + k] = 0;                  // row 3 of X: +0
        w[std::size_t(9) * K + k] |= uint16_t(0x8000);  // row 9 of W: every weight negative
      }
      const auto r = test::run_swapped_chains(x, w, K);
      const std::size_t i = first_difference(r.mma, r.wgmma);
      EXPECT_EQ(i, r.mma.size()) << "K " << K << (wide ? " wide" : "") << ": first difference at row " << i / 64
                                 << " column " << i % 64 << ", mma " << r.mma[i] << " vs swapped wgmma "
                                 << r.wgmma[i];
      // The zero row against the negative weights: an exact zero in both (the bit comparison above
      // holds its sign to mma.sync's); the sign mma.sync gives goes to the log.
      const float z = r.mma[3 * 64 + 9];
      EXPECT_EQ(z, 0.0f) << "a zero row of X gives a zero product sum";
      if (trial == 0) std::printf("[ info ] zero row x negative weights: mma.sync gives %s0\n", std::signbit(z) ? "-" : "+");
      double mag = 0;
      for (float v : r.mma) mag += std::fabs(v);
      EXPECT_GT(mag, 1.0);
      ++trial;
    }
}

TEST(CudaWgmmaBits, CompanionSwappedWgmmaInReverseOrderChangesBits) {
  PARITY_REQUIRE_GPU();
  const int K = 4096;
  const auto r = test::run_swapped_chains(random_bf16(std::size_t(16) * K, 7, true),
                                          random_bf16(std::size_t(64) * K, 8, true), K);
  int differ = 0;
  for (std::size_t i = 0; i < r.mma.size(); ++i) differ += !test::same_bits(&r.mma[i], &r.wgmma_reversed[i], 1);
  EXPECT_GT(differ, 128);
}

}  // namespace
}  // namespace parity
