// The 8-column decode kernel (gemm_gemv.cu) against the mma tiles (gemm_bf16_mma_tile 0), bit for
// bit: every variant, every M from 1 to 16 (the m16 tile's lower and upper halves), N tiny (one
// block, a partial tile), ragged (200, with an odd ldc: the scalar stores) and the models' shapes,
// K one box (64), a 32-deep last box (96, 32) and long chains; with and without a bias; the
// columns forced over few blocks (several passes a block) and many (two-row blocks). Row 1 of A is
// zero and W row 7 all negative: every product of that output is -0, and the chain from +0 must end
// at +0 as mma.sync's does. The companion shows that the same comparison sees a K chain taken in
// another order.
#include <algorithm>
#include <cstring>
#include <string>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gemm_gemv.h"
#include "kernels_cuda/gemm_mma.h"
#include "kernels_cuda/graph.h"
#include "tests/cuda/decode_gemm_problem.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

constexpr int kRows = 16;
using Shape = test::GemmShape;
using test::kNegativeColumn;
using test::kZeroRow;
using test::name;

// The shared problem (decode_gemm_problem.h) with this file's kernel beside the reference.
struct Problem : test::GemmProblem {
  explicit Problem(Shape s, uint64_t seed = 110) : GemmProblem(s, kRows, seed) {}
  std::vector<float> gemv(int M, bool with_bias, int variant, int blocks = 0) {
    c.zero();
    cuda::gemm_bf16_gemv(a.data(), M, sh.K, sh.K, w.data(), sh.N, b(with_bias), c.data(), sh.ldc, nullptr, variant,
                         blocks);
    return c.download(out(M));
  }
};

std::string where(const Shape& sh, int M, bool with_bias, const std::string& what) {
  return name(sh) + " M=" + std::to_string(M) + (with_bias ? " bias" : " no bias") + ", " + what + ": ";
}

// The reference holds real values and the -0 case is set up (so a pass that wrote nothing, or a
// chain that lost the sign, could not agree with it by accident).
void check_reference(const Shape& sh, int M, bool with_bias, const std::vector<float>& ref) {
  double mag = 0;
  for (int n = 0; n < sh.N; ++n) mag += std::fabs(ref[std::size_t(n)]);
  ASSERT_GT(mag, 0.001 * sh.N) << where(sh, M, with_bias, "the reference holds real values");
  if (M > kZeroRow && !with_bias && sh.N > kNegativeColumn) {
    const float z = ref[std::size_t(kZeroRow) * sh.ldc + kNegativeColumn];
    ASSERT_EQ(z, 0.0f) << where(sh, M, with_bias, "-0 case");
    ASSERT_FALSE(std::signbit(z)) << where(sh, M, with_bias, "the mma chain from +0 ends at +0");
  }
}

// Every K of {32, 64, 96, 2560} with every N of {10, 200, 2560}. Sanitizer mode (racecheck costs ~13 ms a
// block of this kernel, which takes all of shared memory): the one-block N = 10 at every K but 64 and M at
// the m16 tile's edges (2560: W's ring of up to 32 boxes wrapping), N = 200 (13 blocks) at K = 64 and
// 2560 on fewer rows, a bias on even rows only; N = 2560's 132 blocks run in the tests below.
TEST(CudaGemmGemv, EveryVariantGivesTheMmaTileBitsForEveryMUpTo16) {
  PARITY_REQUIRE_GPU();
  struct Case {
    int K, N;
    std::vector<int> ms;
  };
  std::vector<Case> cases;
  for (int K : {32, 64, 96, 2560})
    for (int N : {10, 200, 2560}) cases.push_back({K, N, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}});
  const std::vector<int> edges = {1, 3, 8, 9, 16};
  cases = test::pick(cases, std::vector<Case>{{32, 10, edges}, {96, 10, edges}, {2560, 10, edges}, {64, 200, {1, 9, 16}},
                                              {2560, 200, {1, 16}}});
  for (const Case& cs : cases) {
    const int K = cs.K, N = cs.N;
    const std::vector<int>& ms = cs.ms;
    const Shape sh{K, N, N == 200 ? 203 : N};
    Problem pr(sh);
    for (int M : ms)
      for (bool with_bias : {false, true}) {
        if (test::sanitizing() && with_bias != (M % 2 == 0)) continue;  // odd M without (the -0 case), even with
        const std::vector<float> ref = pr.mma(M, with_bias);
        check_reference(sh, M, with_bias, ref);
        for (int v = -1; v < cuda::gemm_gemv_variants(); ++v) {
          const std::vector<float> got = pr.gemv(M, with_bias, v);
          const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
          ASSERT_TRUE(d.empty()) << where(sh, M, with_bias,
                                          "variant " + std::to_string(v) + " (" + cuda::gemm_gemv_variant_name(v) +
                                              ") vs mma tile 0")
                                 << d;
        }
        const std::vector<float> got = pr.through_gemm(M, with_bias);
        const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
        ASSERT_TRUE(d.empty()) << where(sh, M, with_bias, "gemm() vs mma tile 0") << d;
      }
  }
}

// The split over blocks decides only which block, pass and warp runs a column: one block (2560 rows
// in ten passes of 256), three (several passes of an odd number of rows), 97 and 1280 (two-row
// blocks, their second tile's rows outside the block) give the same bits. K = 5120 takes up to 9
// rows (A's bf16 rows must fit the block's shared memory); gemm() sends more to other kernels. In
// sanitizer mode (~13 ms a block under racecheck) N = 800 on K = 640 (ten boxes, past the ring of the
// one-block split's passes): one block (passes of 200 rows), three (267 rows: two passes of an odd
// number), 97 (8-row blocks) and 400 (two-row blocks), each variant on one row count.
TEST(CudaGemmGemv, TheSplitOverBlocksChangesNoBit) {
  PARITY_REQUIRE_GPU();
  ASSERT_TRUE(cuda::gemm_gemv_takes(9, 5120));
  ASSERT_FALSE(cuda::gemm_gemv_takes(10, 5120));
  ASSERT_TRUE(cuda::gemm_gemv_takes(16, 2560));
  const Shape sh = test::pick(Shape{5120, 2560, 2560}, Shape{640, 800, 800});
  Problem pr(sh, 130);
  for (int M : {1, 4, 9}) {
    const std::vector<float> ref = pr.mma(M, true);
    check_reference(sh, M, true, ref);
    for (int v = 0; v < cuda::gemm_gemv_variants(); ++v) {
      if (test::sanitizing() && M != (v == 0 ? 1 : v == 1 ? 9 : 4)) continue;
      for (int blocks : test::sweep({1, 3, 97, 1280}, {1, 3, 97, 400})) {
        const std::vector<float> got = pr.gemv(M, true, v, blocks);
        const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
        ASSERT_TRUE(d.empty()) << where(sh, M, true,
                                        std::string("variant ") + cuda::gemm_gemv_variant_name(v) + " over " +
                                            std::to_string(blocks) + " blocks")
                               << d;
      }
    }
  }
}

// The models' decode shapes (mamba2-2.7b's in_proj, out_proj, lm_head: N no multiple of 64) at the
// row counts of a decode step, every variant against the mma tiles. In sanitizer mode the models' N
// (the blocks' rows and passes) on K = 64, one row count each (132 blocks a launch at ~13 ms a block
// under racecheck): in_proj 16 rows, out_proj 9 (its K's most), lm_head 1 (gemm() takes this kernel).
TEST(CudaGemmGemv, ModelShapesGiveTheMmaTileBits) {
  PARITY_REQUIRE_GPU();
  for (const Shape& model : {Shape{2560, 10576, 10576}, Shape{5120, 2560, 2560}, Shape{2560, 50288, 50288}}) {
    const Shape sh{test::pick(model.K, 64), model.N, model.ldc};
    Problem pr(sh, 150);
    for (int M : test::pick(std::vector<int>{1, 2, 8, 9, 16},
                            std::vector<int>{model.N == 10576 ? 16 : model.N == 2560 ? 9 : 1})) {
      if (!cuda::gemm_gemv_takes(M, model.K)) continue;  // out_proj's K: up to 9 rows
      const std::vector<float> ref = pr.mma(M, false);
      check_reference(sh, M, false, ref);
      for (int v = 0; v < cuda::gemm_gemv_variants(); ++v) {
        const std::vector<float> got = pr.gemv(M, false, v);
        const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
        ASSERT_TRUE(d.empty()) << where(sh, M, false, std::string("variant ") + cuda::gemm_gemv_variant_name(v)) << d;
      }
      // gemm() sends lm_head's few rows here (gemm_gemv_preferred), the others to swap-AB: the same bits.
      const std::vector<float> got = pr.through_gemm(M, false);
      const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
      ASSERT_TRUE(d.empty()) << where(sh, M, false, "gemm()") << d;
    }
  }
}

// The residual add folded into the store (gemm_bf16_gemv_add: C = C + product) gives the bits of the
// product written out and then added by add_inplace: odd and even ldc (scalar and pair stores), with
// and without a bias, every variant (sanitizer mode: out_proj's N on K = 448, its 132 blocks on two of
// the six row and bias pairs).
TEST(CudaGemmGemv, FoldedResidualAddGivesTheBitsOfTheSeparateAdd) {
  PARITY_REQUIRE_GPU();
  for (const Shape& sh : test::sweep<Shape>({{96, 200, 203}, {5120, 2560, 2560}}, {{96, 200, 203}, {448, 2560, 2560}})) {
    Problem pr(sh, 190);
    const std::vector<float> x0 = test::uniform(std::size_t(kRows) * sh.ldc, 191, -4.0f, 4.0f);
    cuda::DeviceBuffer<float> x;
    for (int M : {1, 5, 9})
      for (bool with_bias : {false, true}) {
        if (test::sanitizing() && sh.N == 2560 && (M == 5 || with_bias != (M == 9))) continue;
        pr.mma(M, with_bias);  // the product, left in pr.c
        x.upload(x0);
        cuda::add_inplace(x.data(), pr.c.data(), pr.out(M), nullptr);
        const std::vector<float> ref = x.download(pr.out(M));
        int changed = 0;
        for (std::size_t i = 0; i < ref.size(); ++i) changed += ref[i] != x0[i];
        ASSERT_GT(changed, static_cast<int>(ref.size() / 2)) << where(sh, M, with_bias, "the add changed C");
        for (int v = -1; v < cuda::gemm_gemv_variants(); ++v) {
          x.upload(x0);
          cuda::gemm_bf16_gemv_add(pr.a.data(), M, sh.K, sh.K, pr.w.data(), sh.N, pr.b(with_bias), x.data(), sh.ldc,
                                   nullptr, v);
          const std::vector<float> got = x.download(pr.out(M));
          const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
          ASSERT_TRUE(d.empty()) << where(sh, M, with_bias,
                                          std::string("folded add, variant ") + cuda::gemm_gemv_variant_name(v) +
                                              " vs mma tile 0 + add_inplace")
                                 << d;
        }
      }
  }
}

// The programmatic launch (variant pdl: its set-up and an L2 prefetch of W may run before the
// kernel ahead of it has finished) reads the A that kernel wrote, eagerly and replayed from a CUDA
// graph: A is rewritten by add_inplace right before each pass, and the output must carry the bits
// of the mma tiles on the new A, never those of the old one.
TEST(CudaGemmGemv, ProgrammaticLaunchSeesTheKernelBeforeItEagerAndInAGraph) {
  PARITY_REQUIRE_GPU();
  int pdl = -1;
  for (int v = 0; v < cuda::gemm_gemv_variants(); ++v)
    if (std::string(cuda::gemm_gemv_variant_name(v)) == "pdl") pdl = v;
  ASSERT_GE(pdl, 0) << "the programmatic variant is listed";
  const Shape sh{test::pick(2560, 256), 10576, 10576};  // sanitizer mode: a tenth of the chain
  const int M = 4;
  const std::size_t n = std::size_t(M) * sh.K;
  Problem pr(sh, 230);
  const std::vector<float> a0 = pr.a.download(n), delta = test::uniform(n, 231, -0.5f, 0.5f);
  std::vector<float> a1(n), a2(n);  // after one and two adds, as add_inplace computes them
  for (std::size_t i = 0; i < n; ++i) {
    a1[i] = a0[i] + delta[i];
    a2[i] = a1[i] + delta[i];
  }
  cuda::DeviceBuffer<float> d, other;
  d.upload(delta);
  auto reference = [&](const std::vector<float>& a) {
    other.upload(a);
    pr.c.zero();
    cuda::gemm_bf16_mma_tile(0, other.data(), M, sh.K, sh.K, pr.w.data(), sh.N, sh.N, nullptr, pr.c.data(), sh.ldc,
                             nullptr);
    return pr.c.download(pr.out(M));
  };
  const std::vector<float> ref1 = reference(a1), ref2 = reference(a2);
  ASSERT_FALSE(test::bit_difference(ref1.data(), ref2.data(), ref1.size()).empty()) << "the adds change the product";

  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  auto pass = [&] {
    cuda::add_inplace(pr.a.data(), d.data(), n, s);
    cuda::gemm_bf16_gemv(pr.a.data(), M, sh.K, sh.K, pr.w.data(), sh.N, nullptr, pr.c.data(), sh.ldc, s, pdl);
  };
  auto check = [&](const std::vector<float>& ref, const std::string& what) {
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess) << what;
    const std::vector<float> got = pr.c.download(pr.out(M));
    const std::string diff = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
    ASSERT_TRUE(diff.empty()) << what << ": " << diff;
  };
  pr.a.upload(a0);
  pass();
  check(ref1, "eager, after one add");
  pass();
  check(ref2, "eager, after two adds");
  pr.a.upload(a0);
  {
    const cuda::GraphExec graph = cuda::capture_graph(s, pass);
    graph.launch(s);
    check(ref1, "graph, first replay");
    graph.launch(s);
    check(ref2, "graph, second replay");
  }
  cudaStreamDestroy(s);
}

// The checks above can fail: the same products with the k16 steps in descending order (both
// operands' 16-deep blocks of K reversed) through the same kernel give other bits in many outputs.
TEST(CudaGemmGemv, CompanionReversedKChainChangesBits) {
  PARITY_REQUIRE_GPU();
  const Shape sh{2560, 2560, 2560};
  const int M = 16;
  Problem pr(sh, 170);
  const std::vector<float> forward = pr.gemv(M, false, -1);
  test::ReversedK rev(pr, M);
  cuda::DeviceBuffer<float> c(std::size_t(M) * sh.N);
  cuda::gemm_bf16_gemv(rev.a.data(), M, sh.K, sh.K, rev.w.data(), sh.N, nullptr, c.data(), sh.N, nullptr);
  test::expect_another_chain(forward, c.download(std::size_t(M) * sh.N));
}

}  // namespace
}  // namespace parity
