// The wgmma/TMA many-rows GEMM (gemm_wgmma.cu) gives the mma.sync tiles' bits (gemm_mma.cu) for
// every tile, row count, ragged N, a 32-deep tail stage (K % 64 == 32) and bias on or off; a zero
// activation row meets all-negative weights (products -0: a step over zero padding could turn the
// sum's sign). The companion shows the comparison sees a change in the order of K's steps.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gemm_mma.h"
#include "kernels_cuda/gemm_wgmma.h"
#include "tests/cuda/device_compare.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

constexpr int kMaxM = 4096, kMaxN = 10576;
constexpr int kZeroRow = 5, kNegativeCol = 3;

// A [kMaxM][K] and W [kMaxN][K] (bf16) for one K, on the device; row kZeroRow of A is zero and row
// kNegativeCol of W negative throughout.
struct Operands {
  int K;
  cuda::DeviceBuffer<float> a, bias;
  cuda::DeviceBuffer<uint16_t> w;
  explicit Operands(int k) : K(k) {
    std::vector<float> av = test::uniform(std::size_t(kMaxM) * K, 100 + K);
    std::vector<float> wv = test::uniform(std::size_t(kMaxN) * K, 200 + K, -0.05f, 0.05f);
    std::fill_n(av.begin() + std::size_t(kZeroRow) * K, K, 0.0f);
    for (int k = 0; k < K; ++k) wv[std::size_t(kNegativeCol) * K + k] = -std::fabs(wv[std::size_t(kNegativeCol) * K + k]) - 0.01f;
    a.upload(av);
    w.upload(test::to_bf16(wv));
    bias.upload(test::uniform(kMaxN, 300 + K));
  }
};

// The pass on the mma.sync tile 0 (tile < 0) or on wgmma tile `tile`, into a C whose every byte was
// 0xFF first (NaN patterns: an element the kernel fails to store shows as a difference; the padding
// of an ldc > N stays 0xFF in both).
cuda::DeviceBuffer<float> run(const Operands& op, int tile, int M, int N, bool bias, int ldc) {
  cuda::DeviceBuffer<float> c(std::size_t(M) * ldc);
  cuda::cuda_check(cudaMemset(c.data(), 0xFF, std::size_t(M) * ldc * 4), "cudaMemset");
  const float* b = bias ? op.bias.data() : nullptr;
  if (tile < 0)
    cuda::gemm_bf16_mma_tile(0, op.a.data(), M, op.K, op.K, op.w.data(), N, N, b, c.data(), ldc, nullptr);
  else
    cuda::gemm_bf16_wgmma_tile(tile, op.a.data(), M, op.K, op.K, op.w.data(), N, b, c.data(), ldc, nullptr);
  return c;
}

// Each tile once on a mid-sized pass, named in the log before it runs: if a tile's pipeline hangs,
// the log says which (the device run is read from its log alone).
TEST(CudaGemmWgmma, SmokeEachTileOnce) {
  PARITY_REQUIRE_GPU();
  const Operands op(96);
  const auto ref = run(op, -1, 1000, 200, true, 200);
  for (int tile = 0; tile < cuda::gemm_wgmma_tile_count(); ++tile) {
    std::fprintf(stderr, "wgmma smoke: tile %s ...", cuda::gemm_wgmma_tile_name(tile));
    std::fflush(stderr);
    const auto got = run(op, tile, 1000, 200, true, 200);
    const std::string diff = test::device_bit_difference(got.data(), ref.data(), 1000 * 200, 200);
    std::fprintf(stderr, " %s\n", diff.empty() ? "same bits" : diff.c_str());
    EXPECT_TRUE(diff.empty()) << "tile " << cuda::gemm_wgmma_tile_name(tile) << ": " << diff;
  }
}

// Every K of {32, 96, 2560} with every M and N below. Sanitizer mode (racecheck costs ~13 ms a block of
// these persistent kernels): N = 1104 for in_proj's 10576 (ragged in every tile's columns), the row
// counts at a tile's edge, the long chain (the stage ring wrapping) on the narrow N, and 4096 rows (more
// tiles than SMs: each persistent block takes several) with a bias.
TEST(CudaGemmWgmma, EveryTileGivesTheMmaTilesBits) {
  PARITY_REQUIRE_GPU();
  ASSERT_GE(cuda::gemm_wgmma_tile_count(), 1);
  struct Case {
    int K;
    std::vector<int> ms, ns;
    std::vector<bool> biases = {false, true};
  };
  const std::vector<int> ms = {1, 63, 64, 65, 128, 129, 1000, 4096};
  const std::vector<Case> cases = test::pick(
      std::vector<Case>{{32, ms, {64, 200, 10576}}, {96, ms, {64, 200, 10576}}, {2560, ms, {64, 200, 10576}}},
      std::vector<Case>{{32, {1, 63, 64, 65, 128, 129}, {64, 1104}},
                        {96, {1, 65, 129}, {200, 1104}},
                        {2560, {1, 129}, {64, 200}},
                        {32, {4096}, {1104}, {true}}});
  int failures = 0;  // every failing case is reported (the log is all a device run leaves), up to 24
  for (const Case& cs : cases) {
    const int K = cs.K;
    const Operands op(K);
    for (int M : cs.ms)
      for (int N : cs.ns)
        for (bool bias : cs.biases) {
          // Sanitizer mode: a bias on every other row count (the zero-row check needs none).
          if (test::sanitizing() && cs.biases.size() > 1 && bias != (M % 2 == 0)) continue;
          const auto ref = run(op, -1, M, N, bias, N);
          for (int tile = 0; tile < cuda::gemm_wgmma_tile_count(); ++tile) {
            const auto got = run(op, tile, M, N, bias, N);
            const std::string diff = test::device_bit_difference(got.data(), ref.data(), std::size_t(M) * N, N);
            EXPECT_TRUE(diff.empty()) << "M=" << M << " N=" << N << " K=" << K << (bias ? " bias" : "") << " tile "
                                      << cuda::gemm_wgmma_tile_name(tile) << ": wgmma vs mma: " << diff;
            failures += !diff.empty();
            ASSERT_LT(failures, 24) << "stopping after 24 failing cases";
            if (!bias && M > kZeroRow && N > kNegativeCol) {  // the zero row's sum over -0 products is a zero
              float z = 1;
              cuda::cuda_check(cudaMemcpy(&z, got.data() + std::size_t(kZeroRow) * N + kNegativeCol, 4,
                                          cudaMemcpyDeviceToHost),
                               "copy");
              EXPECT_EQ(z, 0.0f) << "M=" << M << " N=" << N << " K=" << K << " tile "
                                 << cuda::gemm_wgmma_tile_name(tile);
            }
          }
        }
  }
}

// A 32-deep tail, an odd N and an odd ldc (the epilogue's scalar stores), on every tile.
TEST(CudaGemmWgmma, OddLdcAndTailStageGiveTheMmaTilesBits) {
  PARITY_REQUIRE_GPU();
  const Operands op(test::pick(2592, 160));
  for (int M : {333, 1500}) {
    const auto ref = run(op, -1, M, 1001, true, 1003);
    for (int tile = 0; tile < cuda::gemm_wgmma_tile_count(); ++tile) {
      const auto got = run(op, tile, M, 1001, true, 1003);
      const std::string diff = test::device_bit_difference(got.data(), ref.data(), std::size_t(M) * 1003, 1003);
      EXPECT_TRUE(diff.empty()) << "M=" << M << " tile " << cuda::gemm_wgmma_tile_name(tile) << ": " << diff;
    }
  }
}

// A read through a row stride larger than K (a column slice of a wider matrix), as the fp32-A
// tiles' tensor map and the pre-pass both take it.
TEST(CudaGemmWgmma, RowStrideBeyondKGivesTheMmaTilesBits) {
  PARITY_REQUIRE_GPU();
  const Operands op(96);
  const int M = 700, N = 200, lda = 96 + 36;
  cuda::DeviceBuffer<float> wide(std::size_t(M) * lda), c(std::size_t(M) * N);
  wide.zero();
  cuda::cuda_check(cudaMemcpy2D(wide.data(), lda * 4, op.a.data(), 96 * 4, 96 * 4, M, cudaMemcpyDeviceToDevice), "copy");
  cuda::gemm_bf16_mma_tile(0, wide.data(), M, 96, lda, op.w.data(), N, N, op.bias.data(), c.data(), N, nullptr);
  const std::vector<float> ref = c.download(std::size_t(M) * N);
  for (int tile = 0; tile < cuda::gemm_wgmma_tile_count(); ++tile) {
    c.zero();
    cuda::gemm_bf16_wgmma_tile(tile, wide.data(), M, 96, lda, op.w.data(), N, op.bias.data(), c.data(), N, nullptr);
    const std::vector<float> got = c.download(std::size_t(M) * N);
    const std::string diff = test::bit_difference(got.data(), ref.data(), got.size(), N);
    EXPECT_TRUE(diff.empty()) << "tile " << cuda::gemm_wgmma_tile_name(tile) << ": " << diff;
  }
}

// The MoE's experts on every tile: groups of 0, 1, 127..129, 300, 513 rows (tiles that straddle a
// group's end and read the next group's rows) against the mma tiles' grouped pass, bit for bit.
TEST(CudaGemmWgmma, GroupedEveryTileGivesTheMmaTilesBits) {
  PARITY_REQUIRE_GPU();
  const std::vector<int> sizes = {0, 1, 127, 128, 129, 300, 0, 64, 513, 2};
  for (int K : test::sweep({96, 1536}, {96, 512}))
    for (int N : {200, 1024}) {
      std::vector<int32_t> offsets{0};
      for (int n : sizes) offsets.push_back(offsets.back() + n);
      const int rows = offsets.back(), groups = static_cast<int>(sizes.size());
      cuda::DeviceBuffer<float> a, c(std::size_t(rows) * N), ref(std::size_t(rows) * N);
      cuda::DeviceBuffer<uint16_t> w;
      cuda::DeviceBuffer<int32_t> doff;
      a.upload(test::uniform(std::size_t(rows) * K, 31));
      w.upload(test::to_bf16(test::uniform(std::size_t(groups) * N * K, 32, -0.05f, 0.05f)));
      doff.upload(offsets);
      const int64_t stride = int64_t(N) * K;
      cuda::cuda_check(cudaMemset(ref.data(), 0xFF, std::size_t(rows) * N * 4), "cudaMemset");
      cuda::gemm_grouped_bf16_mma(a.data(), K, doff.data(), groups, 513, rows, K, w.data(), stride, N, ref.data(), N,
                                  nullptr);
      for (int tile = 0; tile < cuda::gemm_wgmma_tile_count(); ++tile) {
        cuda::cuda_check(cudaMemset(c.data(), 0xFF, std::size_t(rows) * N * 4), "cudaMemset");
        cuda::gemm_grouped_bf16_wgmma_tile(tile, a.data(), K, doff.data(), groups, rows, K, w.data(), stride, N,
                                           c.data(), N, nullptr);
        const std::string diff = test::device_bit_difference(c.data(), ref.data(), std::size_t(rows) * N, N);
        EXPECT_TRUE(diff.empty()) << "K=" << K << " N=" << N << " tile " << cuda::gemm_wgmma_tile_name(tile) << ": "
                                  << diff;
      }
    }
}

// The check above can fail: the same operands with K's 16-deep steps in reverse order (A's and W's
// columns permuted alike: the same products, summed the other way round) give other bits, while the
// values stay within rounding of each other.
TEST(CudaGemmWgmma, CompanionReversedStepOrderChangesBits) {
  PARITY_REQUIRE_GPU();
  const int M = 256, N = 200, K = 2560;
  const std::vector<float> a = test::uniform(std::size_t(M) * K, 7);
  const std::vector<float> w = test::round_bf16(test::uniform(std::size_t(N) * K, 8, -0.05f, 0.05f));
  auto reversed = [&](const std::vector<float>& x, int rows) {
    std::vector<float> r(x.size());
    for (int i = 0; i < rows; ++i)
      for (int k = 0; k < K; ++k) r[std::size_t(i) * K + k] = x[std::size_t(i) * K + (K / 16 - 1 - k / 16) * 16 + k % 16];
    return r;
  };
  auto pass = [&](const std::vector<float>& av, const std::vector<float>& wv) {
    cuda::DeviceBuffer<float> da, c(std::size_t(M) * N);
    cuda::DeviceBuffer<uint16_t> dw;
    da.upload(av);
    dw.upload(test::to_bf16(wv));
    cuda::gemm_bf16_wgmma_tile(0, da.data(), M, K, K, dw.data(), N, nullptr, c.data(), N, nullptr);
    return c.download(std::size_t(M) * N);
  };
  const std::vector<float> fwd = pass(a, w), rev = pass(reversed(a, M), reversed(w, N));
  int differ = 0;
  double worst = 0;
  for (std::size_t i = 0; i < fwd.size(); ++i) {
    differ += !test::same_bits(&fwd[i], &rev[i], 1);
    worst = std::max(worst, std::fabs(double(fwd[i]) - rev[i]));
  }
  EXPECT_GT(differ, int(fwd.size() / 10));
  EXPECT_LT(worst, 1e-3);
}

}  // namespace
}  // namespace parity
