// The GPU GEMM: batch invariance for M = 1..4096 (bit for bit, any row position), its companion
// (a split-K order does change bits), and agreement with the CPU's scalar twin.
#include <cmath>
#include <cstring>

#include "kernels/gemm.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gemm_mma.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

constexpr int kK = 800, N = 528, MMAX = 4096;  // neither a multiple of the 64-wide tiles; K % 64 == 32

struct Operands {
  int K;
  std::vector<float> a, w;
  cuda::DeviceBuffer<float> da, dw32;
  cuda::DeviceBuffer<uint16_t> dw16;
  explicit Operands(int k = kK, int rows = MMAX)
      : K(k), a(test::uniform(std::size_t(rows) * K, 1)), w(test::round_bf16(test::uniform(std::size_t(N) * K, 2))) {
    da.upload(a);
    dw32.upload(w);
    dw16.upload(test::to_bf16(w));
  }
  // k = 0: all of K.
  std::vector<float> run(int row0, int M, cuda::WeightType wt, int k = 0, int k0 = 0) {
    if (k == 0) k = K;
    cuda::DeviceBuffer<float> c(std::size_t(M) * N);
    const void* w = wt == cuda::WeightType::BF16 ? static_cast<const void*>(dw16.data()) : dw32.data();
    // A K-slice [k0, k0 + k) is read through lda = K; the weights' slice is a separate matrix.
    if (k != K) {
      std::vector<float> ws(std::size_t(N) * k);
      for (int n = 0; n < N; ++n) std::memcpy(&ws[std::size_t(n) * k], &this->w[std::size_t(n) * K + k0], k * 4);
      cuda::DeviceBuffer<uint16_t> w16;
      w16.upload(test::to_bf16(ws));
      cuda::gemm(da.data() + std::size_t(row0) * K + k0, M, k, K, w16.data(), cuda::WeightType::BF16, N, nullptr,
                 c.data(), N, nullptr);
      return c.download(std::size_t(M) * N);
    }
    // M <= kSwapAbMaxRows takes the swap-AB wgmma kernel (gemm_swap_ab.cu), larger M the mma tiles
    // (gemm_mma.cu).
    cuda::gemm(da.data() + std::size_t(row0) * K, M, K, K, w, wt, N, nullptr, c.data(), N, nullptr, N);
    return c.download(std::size_t(M) * N);
  }
};

// Sanitizer mode: 600 rows of K = 160 (two 64-deep stages and a 32-deep tail), M at every kernel's and
// row tile's edge (swap-AB's 8..256-row tiles, its mma.sync kernel up to 32, the wgmma tiles from 128).
TEST(CudaGemm, RowsAreBitIdenticalForEveryMFrom1To4096AndAnyRowPosition) {
  PARITY_REQUIRE_GPU();
  const int rows = test::pick(MMAX, 600);
  Operands op(test::pick(kK, 160), rows);
  std::vector<int> every;
  for (int m = 1; m <= 130; ++m) every.push_back(m);
  for (int m : {255, 256, 257, 1000, 2047, 2048, 3333, 4095}) every.push_back(m);
  const std::vector<int> ms =
      test::pick(every, std::vector<int>{1, 8, 9, 16, 17, 31, 32, 33, 64, 65, 128, 129, 256, 257, 599});
  for (cuda::WeightType wt : {cuda::WeightType::BF16, cuda::WeightType::F32}) {
    const std::vector<float> full = op.run(0, rows, wt);
    // Sanitizer mode: the fp32-weight kernel (one kernel for every M) at its 64-row tile's edges.
    const std::vector<int> f32_ms = {1, 17, 64, 65, 599};
    for (int m : wt == cuda::WeightType::F32 && test::sanitizing() ? f32_ms : ms) {
      const std::vector<float> c = op.run(0, m, wt);
      ASSERT_TRUE(test::same_bits(c.data(), full.data(), c.size())) << "M=" << m << " K=" << op.K;
    }
    // The same rows at other places in the batch (shifted by 5 and by 77 rows).
    for (int shift : {5, 77}) {
      const std::vector<float> c = op.run(shift, 300, wt);
      ASSERT_TRUE(test::same_bits(c.data(), full.data() + std::size_t(shift) * N, c.size())) << "shift " << shift;
    }
  }
}

// The mma.sync tiles (gemm_mma.cu) take every aligned pass above kSwapAbMaxRows; an A that is not 16-byte
// aligned falls back to the WMMA tiles. Both, and the swap-AB kernel, give a row the same bits.
TEST(CudaGemm, FallbackTilesGiveTheSameBitsAsTheMmaTiles) {
  PARITY_REQUIRE_GPU();
  Operands op;
  const int K = op.K;
  for (int M : {1, 16, 17, 100, 700}) {
    const std::vector<float> aligned = op.run(0, M, cuda::WeightType::BF16);
    cuda::DeviceBuffer<float> shifted(std::size_t(M) * K + 1);
    cuda::cuda_check(cudaMemcpy(shifted.data() + 1, op.da.data(), std::size_t(M) * K * 4, cudaMemcpyDeviceToDevice), "copy");
    cuda::DeviceBuffer<float> c(std::size_t(M) * N);
    cuda::gemm(shifted.data() + 1, M, K, K, op.dw16.data(), cuda::WeightType::BF16, N, nullptr, c.data(), N, nullptr,
               N);
    const std::vector<float> fallback = c.download(std::size_t(M) * N);
    ASSERT_TRUE(test::same_bits(fallback.data(), aligned.data(), fallback.size())) << "M=" << M;
  }
}

// Every tile of the mma.sync kernel (bf16 activations from its pre-pass, 64-deep cp.async stages)
// against the WMMA tiles (activations rounded while staging, 32-deep tiles), bit for bit, with a
// bias, on mamba2-2.7b's shapes at M = 4096 (in_proj, out_proj) and M = 600 (lm_head), and on a
// shape with a 32-deep tail stage (K = 2592), an odd N and an odd ldc (scalar stores). The WMMA
// tiles are reached the way gemm() reaches them in use: through an A that is not 16-byte aligned.
TEST(CudaGemm, EveryMmaTileGivesTheWmmaBitsOnTheModelsShapes) {
  PARITY_REQUIRE_GPU();
  struct Shape {
    int M, K, N, ldc;
  };
  // Sanitizer mode: the same features on small operands (N % 64 == 16, N a multiple of 64, M a multiple
  // of the tiles' rows and not, a 32-deep tail, an odd N and ldc).
  for (const Shape& sh : test::sweep<Shape>({{4096, 2560, 10576, 10576}, {4096, 5120, 2560, 2560}, {600, 2560, 50288, 50288},
                                             {333, 2592, 1001, 1003}},
                                            {{384, 256, 592, 592}, {300, 320, 640, 640}, {333, 160, 1001, 1003}})) {
    const std::vector<float> a = test::uniform(std::size_t(sh.M) * sh.K + 1, 11);
    const std::vector<float> w = test::uniform(std::size_t(sh.N) * sh.K, 12, -0.05f, 0.05f);
    const std::vector<float> bias = test::uniform(std::size_t(sh.N), 13);
    cuda::DeviceBuffer<float> da, dbias;
    cuda::DeviceBuffer<uint16_t> dw;
    da.upload(a);
    dbias.upload(bias);
    dw.upload(test::to_bf16(w));
    const std::size_t out = std::size_t(sh.M) * sh.ldc;
    // The aligned operand is the unaligned one's copy one float earlier: the same values.
    cuda::DeviceBuffer<float> aligned(std::size_t(sh.M) * sh.K), c(out);
    cuda::cuda_check(cudaMemcpy(aligned.data(), da.data() + 1, std::size_t(sh.M) * sh.K * 4, cudaMemcpyDeviceToDevice),
                     "copy");
    ASSERT_FALSE(cuda::gemm_mma_fits(da.data() + 1, sh.K, sh.K, dw.data()));
    ASSERT_TRUE(cuda::gemm_mma_fits(aligned.data(), sh.K, sh.K, dw.data()));
    c.zero();
    cuda::gemm(da.data() + 1, sh.M, sh.K, sh.K, dw.data(), cuda::WeightType::BF16, sh.N, dbias.data(), c.data(), sh.ldc,
               nullptr, sh.N);
    const std::vector<float> wmma = c.download(out);
    for (int tile = -1; tile < cuda::gemm_mma_tile_count(); ++tile) {
      c.zero();
      if (tile < 0)  // the tile gemm() chooses
        cuda::gemm(aligned.data(), sh.M, sh.K, sh.K, dw.data(), cuda::WeightType::BF16, sh.N, dbias.data(), c.data(),
                   sh.ldc, nullptr, sh.N);
      else
        cuda::gemm_bf16_mma_tile(tile, aligned.data(), sh.M, sh.K, sh.K, dw.data(), sh.N, sh.N, dbias.data(), c.data(),
                                 sh.ldc, nullptr);
      const std::vector<float> mma = c.download(out);
      ASSERT_TRUE(test::same_bits(mma.data(), wmma.data(), out))
          << "M=" << sh.M << " K=" << sh.K << " N=" << sh.N << " tile " << tile;
    }
  }
}

// The check above can fail: accumulating K in two halves (a split-K order) gives other bits.
TEST(CudaGemm, CompanionSplitKChangesBits) {
  PARITY_REQUIRE_GPU();
  Operands op;
  const int K = op.K;
  const std::vector<float> full = op.run(0, 64, cuda::WeightType::BF16);
  const std::vector<float> lo = op.run(0, 64, cuda::WeightType::BF16, K / 2, 0);
  const std::vector<float> hi = op.run(0, 64, cuda::WeightType::BF16, K - K / 2, K / 2);
  int differ = 0;
  for (std::size_t i = 0; i < full.size(); ++i) differ += (lo[i] + hi[i]) != full[i];
  EXPECT_GT(differ, 0);
}

TEST(CudaGemm, AgreesWithTheCpuScalarTwin) {
  PARITY_REQUIRE_GPU();
  Operands op;
  const int K = op.K;
  const int M = 37;
  const std::vector<float> a16 = test::round_bf16(std::vector<float>(op.a.begin(), op.a.begin() + std::size_t(M) * K));
  for (cuda::WeightType wt : {cuda::WeightType::BF16, cuda::WeightType::F32}) {
    const std::vector<float> gpu = op.run(0, M, wt);
    const std::vector<float>& a = wt == cuda::WeightType::BF16 ? a16 : op.a;
    std::vector<float> cpu(std::size_t(M) * N);
    kernels::gemm_reference(a.data(), M, K, op.w.data(), DType::F32, N, K, nullptr, cpu.data(), N);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double mag = 0;
        for (int k = 0; k < K; ++k) mag += std::fabs(double(a[std::size_t(m) * K + k]) * op.w[std::size_t(n) * K + k]);
        // Both sums are fp32 over the same bf16-exact products in different orders: K roundings apart.
        ASSERT_LE(std::fabs(gpu[std::size_t(m) * N + n] - cpu[std::size_t(m) * N + n]), 1e-6 * K * mag / 64 + 1e-30)
            << "m " << m << " n " << n;
      }
  }
}

}  // namespace
}  // namespace parity
