// The swap-AB mma.sync kernel's grouped consumer (gemm_swap_ab_group.cuh: the ring's barriers met once a
// group of boxes, a group's fragments read a group ahead) against the mma tiles (gemm_bf16_mma_tile 0), bit
// for bit: its variants (mma-c32-4blk-g2, mma-c32-2blk-g4, mma-c32-1blk-g4, and with one barrier pair a
// group mma-c32-4blk-g2s, mma-c32-2blk-g4s) at the decode shapes of
// mamba2-2.7b (in_proj 10576×2560, out_proj 2560×5120) and at the rows a decode step has (1..16: n8 and
// n16 tiles, one row past the n8 tile), and at small K whose boxes end inside a group or with a 32-deep box
// (K = 32 is a lone half box, 96..288 leave one to three boxes in the last group) with N no multiple of a
// block's 32 columns. gemm()'s default (the grouped consumer up to 16 rows) and kGemmMmaBoxByBox (session
// 12's consumer) give the same bits. The companion shows that the comparison sees a K chain summed in
// another order through the same consumer.
#include <string>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gemm_swap_ab.h"
#include "kernels_cuda/ops.h"
#include "tests/cuda/decode_gemm_problem.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

using Shape = test::GemmShape;
constexpr int kRows = 16;

// The grouped variants, by name (their indices follow the older variants').
std::vector<int> grouped_variants() {
  std::vector<int> v;
  for (int i = 0; i < cuda::gemm_swap_ab_variants(); ++i)
    if (std::string(cuda::gemm_swap_ab_variant_name(i)).find("-g") != std::string::npos) v.push_back(i);
  return v;
}

struct Problem : test::GemmProblem {
  explicit Problem(Shape s, uint64_t seed) : GemmProblem(s, kRows, seed) {}
  std::vector<float> swap(int M, bool with_bias, int variant, int early = -1) {
    c.zero();
    cuda::gemm_bf16_swap_ab(a.data(), M, sh.K, sh.K, w.data(), sh.N, b(with_bias), c.data(), sh.ldc, nullptr, variant,
                            early);
    return c.download(out(M));
  }
};

std::string where(const Shape& sh, int M, bool with_bias, const std::string& what) {
  return test::name(sh) + " M=" + std::to_string(M) + (with_bias ? " bias" : " no bias") + ", " + what + ": ";
}

// Sanitizer mode (racecheck costs ~13 ms a block; these kernels run N / 32 blocks): the bias on the
// last row count only.
void expect_mma_tile_bits(const Shape& sh, const std::vector<int>& rows, uint64_t seed) {
  const std::vector<int> grouped = grouped_variants();
  ASSERT_EQ(grouped.size(), 8u) << "mma-c32-4blk-g2, mma-c32-2blk-g4, mma-c32-1blk-g4, -4blk-g2s, -2blk-g4s, "
                                   "-1blk-g4s, mma-c16-2blk-g4s (out_proj's rings), mma-c32-2blk-g4s-rw2 (row warps)";
  Problem pr(sh, seed);
  for (int M : rows)
    for (bool with_bias : {false, true}) {
      if (test::sanitizing() && with_bias != (M == rows.back())) continue;
      const std::vector<float> ref = pr.mma(M, with_bias);
      double mag = 0;
      for (int n = 0; n < sh.N; ++n) mag += std::fabs(ref[std::size_t(n)]);
      ASSERT_GT(mag, 1e-4 * sh.N) << where(sh, M, with_bias, "the reference holds real values");
      if (M > test::kZeroRow && !with_bias && sh.N > test::kNegativeColumn) {
        const float z = ref[std::size_t(test::kZeroRow) * sh.ldc + test::kNegativeColumn];
        ASSERT_EQ(z, 0.0f) << where(sh, M, with_bias, "the -0 case");
        ASSERT_FALSE(std::signbit(z)) << where(sh, M, with_bias, "the chain from +0 ends at +0");
      }
      for (int v : grouped) {
        const std::vector<float> got = pr.swap(M, with_bias, v);
        const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
        ASSERT_TRUE(d.empty()) << where(sh, M, with_bias, cuda::gemm_swap_ab_variant_name(v)) << d;
      }
    }
}

// Sanitizer mode: out_proj's 80 blocks on K = 128 at 1 and 16 rows (in_proj's 331 blocks: the test below).
TEST(CudaGemmSwapAbGroup, ModelShapesGiveTheMmaTileBits) {
  PARITY_REQUIRE_GPU();
  const std::vector<int> rows = test::sweep({1, 2, 8, 9, 16}, {1, 16});
  if (!test::sanitizing()) expect_mma_tile_bits(Shape{2560, 10576, 10576}, rows, 31);  // in_proj
  expect_mma_tile_bits(Shape{test::pick(5120, 128), 2560, 2560}, rows, 32);            // out_proj
}

TEST(CudaGemmSwapAbGroup, OddTailsGiveTheMmaTileBits) {
  PARITY_REQUIRE_GPU();
  const std::vector<int> rows = test::sweep({1, 3, 8, 11, 16}, {1, 11, 16});
  for (int K : {32, 96, 160, 224, 288, 320, 544})
    for (int N : {48, 200}) expect_mma_tile_bits(Shape{K, N, N == 200 ? 203 : N}, rows, 40 + K + N);
}

// gemm_bf16_swap_ab's default up to 16 rows is the grouped consumer; kGemmMmaBoxByBox takes session 12's
// mma-c32-4blk: the same bits, and gemm() on the model's GEMMs gives them too. Sanitizer mode: 133 blocks
// of 32 columns (the default's choice past the SMs, as in_proj's 331) on K = 64 and out_proj's 80 on
// K = 128, one row count each, and the small shape at all three.
TEST(CudaGemmSwapAbGroup, DefaultAndBoxByBoxGiveTheSameBits) {
  PARITY_REQUIRE_GPU();
  for (const Shape& sh : test::sweep<Shape>({{2560, 10576, 10576}, {5120, 2560, 2560}, {160, 200, 203}},
                                            {{64, 4256, 4256}, {128, 2560, 2560}, {160, 200, 203}})) {
    Problem pr(sh, 60);
    for (int M : {1, 4, 16}) {
      if (test::sanitizing() && sh.N != 200 && M != (sh.N == 2560 ? 4 : 1)) continue;
      const std::vector<float> ref = pr.mma(M, true);
      const std::vector<float> grouped = pr.swap(M, true, -1, 0);
      const std::vector<float> box = pr.swap(M, true, -1, static_cast<int>(cuda::kGemmMmaBoxByBox));
      const std::vector<float> through = pr.through_gemm(M, true);
      for (const auto& [got, what] : {std::pair{&grouped, "default (grouped)"}, std::pair{&box, "kGemmMmaBoxByBox"},
                                      std::pair{&through, "gemm()"}}) {
        const std::string d = test::bit_difference(got->data(), ref.data(), got->size(), std::size_t(sh.ldc));
        ASSERT_TRUE(d.empty()) << where(sh, M, true, what) << d;
      }
    }
  }
}

// The checks above can fail: the same products with the k16 steps in descending order (both operands'
// 16-deep blocks of K reversed) through each grouped variant give other bits in many outputs.
TEST(CudaGemmSwapAbGroup, CompanionReversedKChainChangesBits) {
  PARITY_REQUIRE_GPU();
  const Shape sh{test::pick(5120, 512), 2560, 2560};  // sanitizer mode: 32 k16 steps
  const int M = 8;
  Problem pr(sh, 91);
  test::ReversedK rev(pr, M);
  cuda::DeviceBuffer<float> c(std::size_t(M) * sh.N);
  for (int v : grouped_variants()) {
    SCOPED_TRACE(cuda::gemm_swap_ab_variant_name(v));
    const std::vector<float> forward = pr.swap(M, false, v);
    c.zero();
    cuda::gemm_bf16_swap_ab(rev.a.data(), M, sh.K, sh.K, rev.w.data(), sh.N, nullptr, c.data(), sh.N, nullptr, v);
    test::expect_another_chain(std::vector<float>(forward.begin(), forward.begin() + std::size_t(M) * sh.N),
                               c.download(std::size_t(M) * sh.N));
  }
}

}  // namespace
}  // namespace parity
