// The few-rows GEMM kernel (gemm_skinny.cu, decode: M <= 16) against the WMMA tiles, bit for bit:
// every variant, every M from 1 to 16 (and up to 64 for the variant that takes 64 rows), on
// mamba2-2.7b's shapes (in_proj, out_proj, lm_head) and on shapes with a short last K slice, an N
// that is no multiple of 8, an odd ldc, a K shorter than one slice and an N smaller than the SM
// count; with a bias; split over other block counts. Row m of every M is compared with row m of
// the WMMA tiles' 64-row pass, so the check holds the kernel to the tiles' bits and a row's bits to
// being the same for every M. The shapes cover one and two tensor boxes per stage (in_proj's 81-row
// blocks, lm_head's 381), a last K slice that ends inside a box, and one pass or many per block
// (the split test). The companion shows that a reordered sum (split-K) is seen.
#include <algorithm>
#include <cstring>
#include <string>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gemm_mma.h"
#include "kernels_cuda/gemm_skinny.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

struct Shape {
  int K, N, ldc;
};

constexpr int kRows = 64;

// Random operands of one shape: 64 rows of A at an aligned address and, for the WMMA tiles, the same
// values one float later (gemm() sends an A that is not 16-byte aligned to the WMMA tiles).
struct Problem {
  Shape sh;
  cuda::DeviceBuffer<float> a_unaligned, a, bias, c;
  cuda::DeviceBuffer<uint16_t> w;
  explicit Problem(Shape s) : sh(s) {
    a_unaligned.upload(test::uniform(std::size_t(kRows) * sh.K + 1, 41));
    a.resize(std::size_t(kRows) * sh.K);
    cuda::cuda_check(cudaMemcpy(a.data(), a_unaligned.data() + 1, std::size_t(kRows) * sh.K * 4, cudaMemcpyDeviceToDevice),
                     "copy");
    w.upload(test::to_bf16(test::uniform(std::size_t(sh.N) * sh.K, 42, -0.05f, 0.05f)));
    bias.upload(test::uniform(std::size_t(sh.N), 43));
    c.resize(std::size_t(kRows) * sh.ldc);
  }
  std::size_t out(int M) const { return std::size_t(M) * sh.ldc; }
  std::vector<float> wmma(int M) {
    EXPECT_FALSE(cuda::gemm_mma_fits(a_unaligned.data() + 1, sh.K, sh.K, w.data()));
    c.zero();
    cuda::gemm(a_unaligned.data() + 1, M, sh.K, sh.K, w.data(), cuda::WeightType::BF16, sh.N, bias.data(), c.data(),
               sh.ldc, nullptr, sh.N);
    return c.download(out(M));
  }
  // variant < 0 and blocks == 0: through gemm(), as the models call it.
  std::vector<float> skinny(int M, int variant, int blocks = 0) {
    c.zero();
    if (variant < 0 && blocks == 0)
      cuda::gemm(a.data(), M, sh.K, sh.K, w.data(), cuda::WeightType::BF16, sh.N, bias.data(), c.data(), sh.ldc, nullptr,
                 sh.N);
    else
      cuda::gemm_bf16_skinny(a.data(), M, sh.K, sh.K, w.data(), sh.N, bias.data(), c.data(), sh.ldc, nullptr, variant,
                             blocks);
    return c.download(out(M));
  }
};

// 1..16, and for a variant that takes up to 64 rows a spread of M past 16 (sanitizer mode: the rows at
// the edges of the m16 tile's halves).
std::vector<int> rows_of(int variant) {
  std::vector<int> ms = test::sweep({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 8, 9, 16});
  if (variant >= 0 && cuda::gemm_skinny_variant_rows(variant) >= 64)
    for (int m : test::sweep({17, 24, 31, 32, 33, 47, 48, 49, 63, 64}, {17, 33, 64})) ms.push_back(m);
  return ms;
}

std::string where(const Shape& sh, int M, int variant, int blocks) {
  return "K=" + std::to_string(sh.K) + " N=" + std::to_string(sh.N) + " ldc=" + std::to_string(sh.ldc) +
         " M=" + std::to_string(M) + " variant " + std::to_string(variant) + " (" +
         cuda::gemm_skinny_variant_name(variant) + ") blocks " + std::to_string(blocks) + ": ";
}

// Sanitizer mode (racecheck costs ~13 ms a block, and this kernel puts a block on every SM): the models'
// rows a block on a few blocks (81 rows: in_proj's one box a stage; 20: out_proj's; 381: lm_head's two
// boxes) on short K (288: a slice and a 32-deep tail; 96: less than a slice), the uneven shapes on K = 800
// (three slices and a tail) over 7 and 6 blocks, the 13-column one through gemm().
TEST(CudaGemmSkinny, EveryVariantGivesTheWmmaBitsForEveryMUpTo16) {
  PARITY_REQUIRE_GPU();
  struct Case {
    Shape sh;
    int blocks;  // 0: gemm()'s (one per SM where N allows)
  };
  const std::vector<Case> cases = test::pick(
      std::vector<Case>{{{2560, 10576, 10576}, 0}, {{5120, 2560, 2560}, 0}, {{2560, 50288, 50288}, 0},
                        {{2592, 1001, 1003}, 0}, {{96, 13, 13}, 0}, {{800, 528, 528}, 0}},
      std::vector<Case>{{{288, 810, 810}, 10}, {{288, 160, 160}, 8}, {{96, 1524, 1524}, 4}, {{800, 1001, 1003}, 7},
                        {{96, 13, 13}, 0}, {{800, 528, 528}, 6}});
  for (const auto& [sh, blocks] : cases) {
    Problem pr(sh);
    const std::vector<float> ref = pr.wmma(kRows);  // row m of it is row m of every M's pass
    double mag = 0;
    for (int n = 0; n < sh.N; ++n) mag += std::fabs(ref[std::size_t(n)]);
    ASSERT_GT(mag, 0.01 * sh.N) << "the reference holds real values";
    for (int v = -1; v < cuda::gemm_skinny_variants(); ++v) {
      const std::vector<int> ms = rows_of(v);
      for (std::size_t i = 0; i < ms.size(); ++i) {
        // Sanitizer mode: every other row count a variant, alternating between variants (each M still
        // meets half of them; M = 1 and 16 every variant).
        const int M = ms[i];
        if (test::sanitizing() && M != 1 && M != 16 && (i + std::size_t(v + 1)) % 2 == 1) continue;
        const std::vector<float> got = pr.skinny(M, v, blocks);
        const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
        ASSERT_TRUE(d.empty()) << where(sh, M, v, blocks) << d;
      }
    }
  }
}

// How the columns are split over blocks (one pass or hundreds per block, partial last tiles
// anywhere) changes no bit. Sanitizer mode (~13 ms a block under racecheck): 200 columns and an odd ldc
// on K = 800, in 1, 3 and 7 blocks and one block a column, each variant on one row count.
TEST(CudaGemmSkinny, TheSplitOverBlocksChangesNoBit) {
  PARITY_REQUIRE_GPU();
  for (const Shape& sh : test::sweep<Shape>({{2560, 10576, 10576}, {2592, 1001, 1003}}, {{800, 200, 203}})) {
    Problem pr(sh);
    for (int M : {1, 9, 16, 40}) {
      const std::vector<float> ref = pr.wmma(M);
      for (int v = 0; v < cuda::gemm_skinny_variants(); ++v)
        for (int blocks : test::sweep({1, 3, 7, 131, 1000, 100000}, {1, 3, 7, 100000})) {
          if (M > cuda::gemm_skinny_variant_rows(v)) continue;
          if (test::sanitizing() && M != (cuda::gemm_skinny_variant_rows(v) >= 64 ? 40 : v % 2 ? 16 : v % 4 ? 9 : 1))
            continue;
          const std::vector<float> got = pr.skinny(M, v, blocks);
          const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
          ASSERT_TRUE(d.empty()) << where(sh, M, v, blocks) << d;
        }
    }
  }
}

// The benchmark's probes (one side of the pipeline alone) run to the end on every variant, on a
// shape with two passes per block and one with two tensor boxes per stage, and leave nothing behind
// that changes the next real pass's bits. Sanitizer mode: 104 columns (13 blocks) with an odd ldc.
TEST(CudaGemmSkinny, ProbesRunAndLeaveTheBitsAlone) {
  PARITY_REQUIRE_GPU();
  for (const Shape& sh : test::sweep<Shape>({{2592, 1001, 1003}, {2560, 50288, 50288}}, {{800, 104, 107}})) {
    Problem pr(sh);
    const std::vector<float> ref = pr.wmma(16);
    for (int v = 0; v < cuda::gemm_skinny_variants(); ++v)
      for (int M : {1, 16}) {
        for (int probe : {1, 2})
          cuda::gemm_bf16_skinny_probe(probe, pr.a.data(), M, sh.K, sh.K, pr.w.data(), sh.N, pr.c.data(), sh.ldc, nullptr,
                                       v);
        cuda::cuda_check(cudaDeviceSynchronize(), "probes");
        const std::vector<float> got = pr.skinny(M, v);
        const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
        ASSERT_TRUE(d.empty()) << where(sh, M, v, 0) << "after the probes: " << d;
      }
  }
}

// The checks above can fail: summing K in two halves (a split-K order) through the same kernel
// gives other bits in many outputs.
TEST(CudaGemmSkinny, CompanionSplitKChangesBits) {
  PARITY_REQUIRE_GPU();
  const Shape sh{2560, 2560, 2560};
  Problem pr(sh);
  const int M = 4, half = sh.K / 2;
  const std::vector<float> full = pr.skinny(M, 0);
  std::vector<uint16_t> w = pr.w.download(std::size_t(sh.N) * sh.K), lo(std::size_t(sh.N) * half),
                        hi(std::size_t(sh.N) * half);
  for (int n = 0; n < sh.N; ++n) {
    std::memcpy(&lo[std::size_t(n) * half], &w[std::size_t(n) * sh.K], half * 2);
    std::memcpy(&hi[std::size_t(n) * half], &w[std::size_t(n) * sh.K + half], half * 2);
  }
  cuda::DeviceBuffer<uint16_t> dlo, dhi;
  dlo.upload(lo);
  dhi.upload(hi);
  cuda::DeviceBuffer<float> c1(std::size_t(M) * sh.N), c2(std::size_t(M) * sh.N);
  cuda::gemm_bf16_skinny(pr.a.data(), M, half, sh.K, dlo.data(), sh.N, pr.bias.data(), c1.data(), sh.N, nullptr, 0);
  cuda::gemm_bf16_skinny(pr.a.data() + half, M, half, sh.K, dhi.data(), sh.N, nullptr, c2.data(), sh.N, nullptr, 0);
  const std::vector<float> a = c1.download(std::size_t(M) * sh.N), b = c2.download(std::size_t(M) * sh.N);
  int differ = 0;
  double err = 0;
  for (std::size_t i = 0; i < full.size(); ++i) {
    const float split = a[i] + b[i];
    differ += std::memcmp(&split, &full[i], 4) != 0;
    err = std::max(err, double(std::fabs(split - full[i])));
  }
  EXPECT_GT(differ, static_cast<int>(full.size() / 10)) << differ << " of " << full.size();
  EXPECT_LT(err, 1e-3) << "the two orders sum the same products";
}

}  // namespace
}  // namespace parity
