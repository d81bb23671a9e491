// The swap-AB wgmma GEMM (gemm_swap_ab.cu: Cᵀ = W · Aᵀ, the weights as wgmma's A operand) against
// the mma tiles (gemm_bf16_mma_tile 0) and the few-rows kernel, bit for bit: every variant, M from 1
// to 256 (every wgmma N it picks, one row past each, and 300: two passes), N a multiple of the
// 64-column blocks, ragged (200, with an odd ldc) and out_proj's 2560, K one box (64), a 32-deep last
// box (96) and 2560; with and without a bias. Row 1 of A is zero and row 7 of W all negative: every
// product of that output is -0, and the chain from +0 must end at +0 as mma.sync's does (a zero-fill
// step or wgmma's no-addend first step would get the sign wrong). The companion shows that the same
// comparison sees a K chain taken in another order.
#include <algorithm>
#include <cstring>
#include <string>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gemm_mma.h"
#include "kernels_cuda/gemm_skinny.h"
#include "kernels_cuda/gemm_swap_ab.h"
#include "kernels_cuda/ops.h"
#include "tests/cuda/decode_gemm_problem.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

constexpr int kMaxRows = 300;
using Shape = test::GemmShape;
using test::kNegativeColumn;
using test::kZeroRow;

// The shared problem (decode_gemm_problem.h) with this file's kernels beside the reference.
struct Problem : test::GemmProblem {
  explicit Problem(Shape s, uint64_t seed = 50) : GemmProblem(s, kMaxRows, seed) {}
  std::vector<float> swap(int M, bool with_bias, int variant, int row_tile = 0) {
    c.zero();
    cuda::gemm_bf16_swap_ab(a.data(), M, sh.K, sh.K, w.data(), sh.N, b(with_bias), c.data(), sh.ldc, nullptr, variant,
                            -1, row_tile);
    return c.download(out(M));
  }
  std::vector<float> skinny(int M, bool with_bias) {
    c.zero();
    cuda::gemm_bf16_skinny(a.data(), M, sh.K, sh.K, w.data(), sh.N, b(with_bias), c.data(), sh.ldc, nullptr, 0);
    return c.download(out(M));
  }
};

std::string where(const Shape& sh, int M, bool with_bias, const std::string& what) {
  return "K=" + std::to_string(sh.K) + " N=" + std::to_string(sh.N) + " ldc=" + std::to_string(sh.ldc) +
         " M=" + std::to_string(M) + (with_bias ? " bias" : " no bias") + ", " + what + ": ";
}

// Every K of {64, 96, 2560} with every N of {64, 200, 2560}; in sanitizer mode each K and each N at
// least once, the long chain (the ring wrapping) on the narrow N.
TEST(CudaGemmSwapAb, EveryVariantGivesTheMmaTileBits) {
  PARITY_REQUIRE_GPU();
  // Sanitizer mode: the row tiles' edges (8, 16, 32, 64, 128, 256 rows; the mma kernel to 32), bias on
  // every other row count.
  const std::vector<int> rows =
      test::sweep({1, 2, 7, 8, 9, 15, 16, 17, 31, 64, 100, 255, 256, 300}, {1, 9, 16, 17, 31, 64, 256, 300});
  std::vector<std::pair<int, int>> kn;  // (K, N)
  for (int K : {64, 96, 2560})
    for (int N : {64, 200, 2560}) kn.emplace_back(K, N);
  kn = test::pick(kn, std::vector<std::pair<int, int>>{{64, 64}, {96, 200}, {2560, 64}, {96, 2560}});
  for (const auto& [K, N] : kn) {
    const Shape sh{K, N, N == 200 ? 203 : N};
    Problem pr(sh);
    for (int M : rows)
      for (bool with_bias : {false, true}) {
        if (test::sanitizing() && with_bias != (M % 2 == 0)) continue;
        // N = 2560's 20 to 40 blocks (~13 ms each under racecheck) on four row counts, one a kernel.
        if (test::sanitizing() && N == 2560 && M != 1 && M != 17 && M != 100 && M != 300) continue;
        const std::vector<float> ref = pr.mma(M, with_bias);
        double mag = 0;
        for (int n = 0; n < N; ++n) mag += std::fabs(ref[std::size_t(n)]);
        ASSERT_GT(mag, 0.001 * N) << where(sh, M, with_bias, "the reference holds real values");
        if (M > kZeroRow && !with_bias) {
          ASSERT_EQ(ref[std::size_t(kZeroRow) * sh.ldc + kNegativeColumn], 0.0f) << where(sh, M, with_bias, "-0 case");
        }
        for (int v = -1; v < cuda::gemm_swap_ab_variants(); ++v) {
          const std::vector<float> got = pr.swap(M, with_bias, v);
          const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
          ASSERT_TRUE(d.empty()) << where(sh, M, with_bias,
                                          "variant " + std::to_string(v) + " (" + cuda::gemm_swap_ab_variant_name(v) +
                                              ") vs mma tile 0")
                                 << d;
        }
        if (M <= cuda::kSkinnyMaxRows) {
          const std::vector<float> got = pr.skinny(M, with_bias);
          const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
          ASSERT_TRUE(d.empty()) << where(sh, M, with_bias, "few-rows kernel vs mma tile 0") << d;
        }
        const std::vector<float> got = pr.through_gemm(M, with_bias);
        const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
        ASSERT_TRUE(d.empty()) << where(sh, M, with_bias, "gemm() vs mma tile 0") << d;
      }
  }
}

// The models' decode shapes (in_proj, lm_head: many blocks, lm_head's N no multiple of 64) at the
// row counts a decode step has, every variant against the mma tiles. Sanitizer mode (~13 ms a block
// under racecheck, 83 to 786 blocks a launch here): in_proj's N (ragged, many blocks) on K = 128 at 1 and
// 64 rows, a bias on the second.
TEST(CudaGemmSwapAb, ModelShapesGiveTheMmaTileBits) {
  PARITY_REQUIRE_GPU();
  for (const Shape& model : test::sweep<Shape>({{2560, 10576, 10576}, {5120, 2560, 2560}, {2560, 50288, 50288}},
                                               {{2560, 10576, 10576}})) {
    const Shape sh{test::pick(model.K, 128), model.N, model.ldc};
    Problem pr(sh, 70);
    for (int M : test::sweep({1, 16, 64}, {1, 64}))
      for (bool with_bias : {false, true}) {
        if (test::sanitizing() && with_bias != (M == 64)) continue;
        const std::vector<float> ref = pr.mma(M, with_bias);
        for (int v = 0; v < cuda::gemm_swap_ab_variants(); ++v) {
          const std::vector<float> got = pr.swap(M, with_bias, v);
          const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
          ASSERT_TRUE(d.empty()) << where(sh, M, with_bias, std::string("variant ") + cuda::gemm_swap_ab_variant_name(v))
                                 << d;
        }
      }
  }
}

// A pass's rows split into smaller row tiles give every row the bits of one tile over M: each variant at
// every tile up to M's own, M on and past the tiles' edges, out_proj's N (where kGemmRowTileSplit splits)
// and a ragged N with an odd ldc; the default's own choices under kGemmRowTileSplit (with
// kGemmWgmmaFrom17Rows's variant), kGemmMmaTo64Rows, kGemmMmaTo64RowsIn16, kGemmWgmmaFrom33Rows and
// kGemmRowWarpsTo128Rows too.
// Sanitizer mode: two row counts, the default variant and c64-2blk.
TEST(CudaGemmSwapAb, EveryRowTileGivesTheMmaTileBits) {
  PARITY_REQUIRE_GPU();
  const std::vector<int> rows = test::sweep({17, 33, 64, 100, 256, 300}, {33, 100});
  const std::vector<int> variants = test::sanitizing() ? std::vector<int>{-1, 1} : [] {
    std::vector<int> all;
    for (int v = -1; v < cuda::gemm_swap_ab_variants(); ++v) all.push_back(v);
    return all;
  }();
  for (const Shape& sh : test::sweep<Shape>({{2560, 2560, 2560}, {96, 200, 203}}, {{96, 200, 203}})) {
    Problem pr(sh, 110);
    for (int M : rows) {
      const bool with_bias = M % 2 == 0;
      const std::vector<float> ref = pr.mma(M, with_bias);
      for (int v : variants)
        for (int tile : {0, 8, 16, 32, 64, 128, 256}) {
          if (tile >= 2 * M) continue;
          const std::vector<float> got = pr.swap(M, with_bias, v, tile);
          const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
          const std::string name = v < 0 ? "default" : cuda::gemm_swap_ab_variant_name(v);
          ASSERT_TRUE(d.empty()) << where(sh, M, with_bias, "variant " + name + " row tile " + std::to_string(tile))
                                 << d;
        }
      for (unsigned flags : {cuda::kGemmRowTileSplit | cuda::kGemmWgmmaFrom17Rows, cuda::kGemmMmaTo64Rows,
                             cuda::kGemmMmaTo64RowsIn16, cuda::kGemmWgmmaFrom33Rows, cuda::kGemmRowWarpsTo128Rows}) {
        pr.c.zero();
        cuda::gemm_bf16_swap_ab(pr.a.data(), M, sh.K, sh.K, pr.w.data(), sh.N, pr.b(with_bias), pr.c.data(), sh.ldc,
                                nullptr, -1, static_cast<int>(flags | cuda::kGemmEarlyDefault));
        const std::vector<float> got = pr.c.download(pr.out(M));
        ASSERT_TRUE(test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc)).empty())
            << where(sh, M, with_bias, "the default's choice under flags " + std::to_string(flags));
      }
    }
  }
}

// The checks above can fail: the same products with the k16 steps in descending order (both
// operands' 16-deep blocks of K reversed) through the same kernel give other bits in many outputs.
TEST(CudaGemmSwapAb, CompanionReversedKChainChangesBits) {
  PARITY_REQUIRE_GPU();
  const Shape sh{2560, 2560, 2560};
  const int M = 16;
  Problem pr(sh, 90);
  const std::vector<float> forward = pr.swap(M, false, -1);
  test::ReversedK rev(pr, M);
  cuda::DeviceBuffer<float> c(std::size_t(M) * sh.N);
  cuda::gemm_bf16_swap_ab(rev.a.data(), M, sh.K, sh.K, rev.w.data(), sh.N, nullptr, c.data(), sh.N, nullptr);
  test::expect_another_chain(forward, c.download(std::size_t(M) * sh.N));
}

}  // namespace
}  // namespace parity
