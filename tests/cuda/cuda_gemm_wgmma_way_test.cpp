// The many-rows GEMM's ways (gemm_wgmma.h: the tile pair gemm_bf16_wgmma plans a pass with, row cut
// included) give main's bits: every way against way 0 at mamba2-2.7b's shapes for M up to 16384, a
// row's bits the same in a pass of any M and at any place in it, C outside the product untouched
// (padding past N, a C the TMA unit cannot address), and within rounding of the CPU's scalar GEMM.
// The companion shows the device comparison sees one weight changed by one ulp. Failures print the
// first differing element (index, row, column, both values), since a device run leaves only its log.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "common/dtype.h"
#include "kernels/gemm.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gemm_wgmma.h"
#include "tests/cuda/device_compare.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

struct Shape {
  const char* name;
  int N, K;
};
constexpr Shape kInProj{"in_proj", 10576, 2560}, kOutProj{"out_proj", 2560, 5120}, kLmHead{"lm_head", 50288, 2560};

// A [rows][K] in [-1, 1), W [N][K] bf16 in [-0.05, 0.05), a bias [N], on the device.
struct Operands {
  int rows, N, K;
  cuda::DeviceBuffer<float> a, bias;
  cuda::DeviceBuffer<uint16_t> w;
  Operands(int r, int n, int k, uint64_t seed) : rows(r), N(n), K(k) {
    a.upload(test::uniform(std::size_t(rows) * K, seed));
    w.upload(test::to_bf16(test::uniform(std::size_t(N) * K, seed + 1, -0.05f, 0.05f)));
    bias.upload(test::uniform(N, seed + 2));
  }
};

// Way `way`'s pass over rows [row0, row0 + M) of op's A into a C of M × ldc whose every byte was
// 0xFF first (an element left unstored shows as a difference; padding past N must stay 0xFF).
cuda::DeviceBuffer<float> run(const Operands& op, int way, int row0, int M, bool bias, int ldc) {
  cuda::DeviceBuffer<float> c(std::size_t(M) * ldc);
  cuda::cuda_check(cudaMemset(c.data(), 0xFF, c.size() * 4), "cudaMemset");
  cuda::gemm_bf16_wgmma_way(way, op.a.data() + std::size_t(row0) * op.K, M, op.K, op.K, op.w.data(), op.N,
                            bias ? op.bias.data() : nullptr, c.data(), ldc, nullptr);
  return c;
}

// Every way against way 0 (session 9's tiles), whole passes at the model's shapes: the row cut into
// two launches (out_proj at M = 4096), the ragged last column tile (in_proj, lm_head), 16384 rows
// (8 × 2048 tokens of prefill). Sanitizer mode: the models' N on K = 96 (a 32-deep tail), at row counts
// whose plans are the full run's kinds (one tile; a row cut of two, at 2049 rows for in_proj and
// out_proj; out_proj's 1000 rows on way 1's 128×160 tile).
TEST(CudaGemmWgmmaWay, EveryWayGivesMainsBitsAtTheModelShapes) {
  PARITY_REQUIRE_GPU();
  ASSERT_GE(cuda::gemm_wgmma_way_count(), 2);
  struct Case {
    Shape s;
    std::vector<int> ms;
  };
  const std::vector<Case> cases = test::pick(
      std::vector<Case>{{kInProj, {129, 1000, 4096, 16384}}, {kOutProj, {300, 4096, 16384}}, {kLmHead, {4096}}},
      std::vector<Case>{{kInProj, {129, 2049}}, {kOutProj, {300, 1000, 2049}}, {kLmHead, {129}}});
  for (const Case& cs : cases) {
    const int rows = *std::max_element(cs.ms.begin(), cs.ms.end());
    const Operands op(rows, cs.s.N, test::pick(cs.s.K, 96), 40);
    for (int M : cs.ms)
      for (bool bias : {false, true}) {
        const auto ref = run(op, 0, 0, M, bias, op.N);
        for (int way = 1; way < cuda::gemm_wgmma_way_count(); ++way) {
          std::fprintf(stderr, "wgmma way %s: %s M=%d%s ...", cuda::gemm_wgmma_way_name(way), cs.s.name, M,
                       bias ? " bias" : "");
          std::fflush(stderr);  // a hang names its case in the log
          const auto got = run(op, way, 0, M, bias, op.N);
          const std::string diff = test::device_bit_difference(got.data(), ref.data(), std::size_t(M) * op.N, op.N);
          std::fprintf(stderr, " %s\n", diff.empty() ? "same bits" : diff.c_str());
          EXPECT_TRUE(diff.empty()) << cs.s.name << " M=" << M << (bias ? " bias" : "") << " way "
                                    << cuda::gemm_wgmma_way_name(way) << " vs main: " << diff;
        }
      }
  }
}

// Batch invariance on every way: rows [r0, r0 + m) passed alone give the bits they get inside a pass
// of 4096 rows, for m across the tiles' edges (1, 127..129, 255..257) and row cuts, at two offsets.
// Sanitizer mode: N = 1104 (ragged in every tile; 4096 rows cut in two on both ways) on K = 96.
TEST(CudaGemmWgmmaWay, RowsAloneGiveTheirBitsInAFullPass) {
  PARITY_REQUIRE_GPU();
  const Operands op(4096, test::pick(kInProj.N, 1104), test::pick(kInProj.K, 96), 50);
  for (int way = 0; way < cuda::gemm_wgmma_way_count(); ++way) {
    const auto full = run(op, way, 0, 4096, true, op.N);
    int failures = 0;
    for (int r0 : {0, 77})
      for (int m : {1, 2, 127, 128, 129, 255, 256, 257, 1000, 2049, 4096 - 77}) {
        if (r0 + m > 4096) continue;
        const auto part = run(op, way, r0, m, true, op.N);
        const std::string diff = test::device_bit_difference(part.data(), full.data() + std::size_t(r0) * op.N,
                                                             std::size_t(m) * op.N, op.N);
        EXPECT_TRUE(diff.empty()) << "way " << cuda::gemm_wgmma_way_name(way) << ": rows " << r0 << ".." << r0 + m
                                  << " alone vs in 4096: " << diff;
        failures += !diff.empty();
        ASSERT_LT(failures, 8) << "stopping after 8 failing cases";
      }
  }
}

// C's padding past N stays untouched: N = 1000 with ldc = 1004 and 1056 (the staged epilogue's map
// ends at N), N = 1001 with ldc = 1004 (register stores: the TMA unit would write columns 1001..1003,
// the rest of the row's last 16 bytes, as the H200 showed in session 11); ragged N (the last tile's
// columns past N); a C one float off 16-byte alignment and an odd ldc (register stores): all give way
// 0's bits, padding included.
TEST(CudaGemmWgmmaWay, PaddingAndUnalignedCGiveMainsBits) {
  PARITY_REQUIRE_GPU();
  for (int n : {1000, 1001}) {
    const Operands op(1500, n, test::pick(2592, 160), 60);  // K % 64 == 32: a tail stage too
    for (int M : {333, 1500})
      for (int ldc : {1004, 1056, 1003}) {  // padding (staged where N % 4 == 0); odd ldc: register stores
        if (ldc == 1003 && n == 1000) continue;
        const auto ref = run(op, 0, 0, M, true, ldc);
        for (int way = 1; way < cuda::gemm_wgmma_way_count(); ++way) {
          const auto got = run(op, way, 0, M, true, ldc);
          const std::string diff = test::device_bit_difference(got.data(), ref.data(), std::size_t(M) * ldc, ldc);
          std::fprintf(stderr, "padding: N=%d M=%d ldc=%d way %s: %s\n", n, M, ldc, cuda::gemm_wgmma_way_name(way),
                       diff.empty() ? "same bits" : diff.c_str());
          EXPECT_TRUE(diff.empty()) << "N=" << n << " M=" << M << " ldc=" << ldc << " way "
                                    << cuda::gemm_wgmma_way_name(way) << ": " << diff;
          if (ldc != 1004) continue;
          // C one float past a 16-byte boundary: no tensor map for it.
          cuda::DeviceBuffer<float> off(std::size_t(M) * ldc + 1);
          cuda::cuda_check(cudaMemset(off.data(), 0xFF, off.size() * 4), "cudaMemset");
          cuda::gemm_bf16_wgmma_way(way, op.a.data(), M, op.K, op.K, op.w.data(), op.N, op.bias.data(), off.data() + 1,
                                    ldc, nullptr);
          const std::string d2 = test::device_bit_difference(off.data() + 1, ref.data(), std::size_t(M) * ldc, ldc);
          std::fprintf(stderr, "padding: N=%d M=%d unaligned C way %s: %s\n", n, M, cuda::gemm_wgmma_way_name(way),
                       d2.empty() ? "same bits" : d2.c_str());
          EXPECT_TRUE(d2.empty()) << "N=" << n << " M=" << M << " unaligned C, way " << cuda::gemm_wgmma_way_name(way)
                                  << ": " << d2;
        }
      }
  }
}

// Within rounding of the CPU's scalar GEMM (kernels::gemm_reference on the bf16-rounded A): the same
// bf16-exact products summed in another order, so K roundings apart at most.
TEST(CudaGemmWgmmaWay, AgreesWithTheCpuScalarTwin) {
  PARITY_REQUIRE_GPU();
  const int M = 300, N = 200, K = 512;
  const std::vector<float> a = test::uniform(std::size_t(M) * K, 70);
  const std::vector<float> w = test::round_bf16(test::uniform(std::size_t(N) * K, 71, -0.05f, 0.05f));
  const std::vector<float> a16 = test::round_bf16(a);
  std::vector<float> cpu(std::size_t(M) * N);
  kernels::gemm_reference(a16.data(), M, K, w.data(), DType::F32, N, K, nullptr, cpu.data(), N);
  cuda::DeviceBuffer<float> da, c(std::size_t(M) * N);
  cuda::DeviceBuffer<uint16_t> dw;
  da.upload(a);
  dw.upload(test::to_bf16(w));
  for (int way = 0; way < cuda::gemm_wgmma_way_count(); ++way) {
    cuda::gemm_bf16_wgmma_way(way, da.data(), M, K, K, dw.data(), N, nullptr, c.data(), N, nullptr);
    const std::vector<float> gpu = c.download(std::size_t(M) * N);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double mag = 0;
        for (int k = 0; k < K; ++k) mag += std::fabs(double(a16[std::size_t(m) * K + k]) * w[std::size_t(n) * K + k]);
        ASSERT_LE(std::fabs(gpu[std::size_t(m) * N + n] - cpu[std::size_t(m) * N + n]), 1e-6 * K * mag / 64 + 1e-30)
            << "way " << cuda::gemm_wgmma_way_name(way) << " m " << m << " n " << n << ": " << gpu[std::size_t(m) * N + n]
            << " vs cpu " << cpu[std::size_t(m) * N + n];
      }
  }
}

// The comparisons above can fail: one weight moved by one bf16 ulp (column 3, at k = 1000) changes
// that column's outputs on every way, and the report names column 3 first.
TEST(CudaGemmWgmmaWay, CompanionOneWeightUlpShowsInItsColumn) {
  PARITY_REQUIRE_GPU();
  const int M = 1000;
  Operands op(M, 256, 2560, 80);
  for (int way = 0; way < cuda::gemm_wgmma_way_count(); ++way) {
    const auto before = run(op, way, 0, M, false, op.N);
    uint16_t h = 0;
    const std::size_t at = std::size_t(3) * op.K + 1000;
    cuda::cuda_check(cudaMemcpy(&h, op.w.data() + at, 2, cudaMemcpyDeviceToHost), "copy");
    const uint16_t moved = static_cast<uint16_t>(h + 1);
    cuda::cuda_check(cudaMemcpy(op.w.data() + at, &moved, 2, cudaMemcpyHostToDevice), "copy");
    const auto after = run(op, way, 0, M, false, op.N);
    cuda::cuda_check(cudaMemcpy(op.w.data() + at, &h, 2, cudaMemcpyHostToDevice), "copy");
    const std::string diff = test::device_bit_difference(after.data(), before.data(), std::size_t(M) * op.N, op.N);
    EXPECT_FALSE(diff.empty()) << "way " << cuda::gemm_wgmma_way_name(way);
    EXPECT_NE(diff.find("column 3)"), std::string::npos) << "way " << cuda::gemm_wgmma_way_name(way) << ": " << diff;
  }
}

}  // namespace
}  // namespace parity
