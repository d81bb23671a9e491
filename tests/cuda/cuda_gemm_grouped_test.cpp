// gemm_grouped (the MoE's experts in one launch): each group's rows equal gemm() over those rows
// alone with that group's weights, bit for bit, for bf16 and fp32 weights and group sizes from 0
// to 300 (gemm() picks its few-rows, mma or WMMA kernel by size; the grouped kernel is the pipelined
// mma tile when the caller gives the total row count, else the WMMA tile, or the few-rows kernel
// when no group exceeds 64 rows, every variant of it on uneven shapes); the companion shows the
// comparison sees a different arithmetic (bf16 vs fp32 inputs).
#include <numeric>
#include <string>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gemm_skinny.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

constexpr int K = 320, N = 208;  // whole 16-row strips, not whole 64-wide tiles
const std::vector<int> kSizes = {3, 0, 16, 17, 1, 300, 64, 65};
// Decode-sized groups (the largest ≤ 64): gemm_grouped takes its few-rows path, 16-row tiles per group.
const std::vector<int> kDecodeSizes = {3, 0, 16, 17, 1, 64, 33, 0, 2};

struct Groups {
  std::vector<int32_t> offsets{0};
  cuda::DeviceBuffer<float> a, w32, c;
  cuda::DeviceBuffer<uint16_t> w16;
  cuda::DeviceBuffer<int32_t> doff;
  int rows = 0, groups = 0, max_rows = 0, K, N;
  explicit Groups(const std::vector<int>& sizes = kSizes, int k = parity::K, int n = parity::N) : K(k), N(n) {
    for (int n : sizes) {
      offsets.push_back(offsets.back() + n);
      max_rows = std::max(max_rows, n);
    }
    rows = offsets.back();
    groups = static_cast<int>(sizes.size());
    a.upload(test::uniform(std::size_t(rows) * K, 21));
    const std::vector<float> w = test::round_bf16(test::uniform(std::size_t(groups) * N * K, 22));
    w32.upload(w);
    w16.upload(test::to_bf16(w));
    doff.upload(offsets);
  }
  const void* weights(cuda::WeightType wt, int g = 0) const {
    const std::size_t off = std::size_t(g) * N * K;
    return wt == cuda::WeightType::BF16 ? static_cast<const void*>(w16.data() + off) : w32.data() + off;
  }
  // total_rows = 0: the caller does not know the total (the WMMA tiles); rows: the mma tiles.
  std::vector<float> grouped(cuda::WeightType wt, bool give_total = true) {
    c.resize(std::size_t(rows) * N);
    cuda::gemm_grouped(a.data(), K, doff.data(), groups, max_rows, K, weights(wt), wt, int64_t(N) * K, N, c.data(), N,
                       nullptr, give_total ? rows : 0);
    return c.download(std::size_t(rows) * N);
  }
  // The few-rows path with one of its variants (bf16 weights, max_rows <= 64).
  std::vector<float> grouped_skinny(int variant) {
    c.resize(std::size_t(rows) * N);
    c.zero();
    cuda::gemm_grouped_bf16_skinny(a.data(), K, doff.data(), groups, max_rows, K, w16.data(), int64_t(N) * K, N,
                                   c.data(), N, nullptr, variant);
    return c.download(std::size_t(rows) * N);
  }
  std::vector<float> one_by_one(cuda::WeightType wt) {
    cuda::DeviceBuffer<float> out(std::size_t(rows) * N);
    for (int g = 0; g < groups; ++g) {
      const int r0 = offsets[std::size_t(g)], n = offsets[std::size_t(g) + 1] - r0;
      // Groups of up to 16 rows take gemm's few-rows kernel, larger ones the mma tiles.
      cuda::gemm(a.data() + std::size_t(r0) * K, n, K, K, weights(wt, g), wt, N, nullptr,
                 out.data() + std::size_t(r0) * N, N, nullptr, N);
    }
    return out.download(std::size_t(rows) * N);
  }
};

TEST(CudaGemmGrouped, EveryGroupEqualsGemmOnItsRowsAlone) {
  PARITY_REQUIRE_GPU();
  Groups gr;
  for (cuda::WeightType wt : {cuda::WeightType::BF16, cuda::WeightType::F32}) {
    const std::vector<float> g = gr.grouped(wt), o = gr.one_by_one(wt);
    EXPECT_TRUE(test::same_bits(g.data(), o.data(), g.size())) << (wt == cuda::WeightType::BF16 ? "bf16" : "fp32");
    double mag = 0;
    for (float x : g) mag += std::fabs(x);
    EXPECT_GT(mag, 1.0);
  }
}

TEST(CudaGemmGrouped, MmaAndWmmaGroupedTilesAgree) {
  PARITY_REQUIRE_GPU();
  Groups gr;
  const std::vector<float> mma = gr.grouped(cuda::WeightType::BF16, true),
                           wmma = gr.grouped(cuda::WeightType::BF16, false);
  std::size_t first = mma.size();
  for (std::size_t i = 0; i < mma.size() && first == mma.size(); ++i)
    if (!test::same_bits(&mma[i], &wmma[i], 1)) first = i;
  EXPECT_EQ(first, mma.size()) << "first difference at " << first << ": " << mma[first] << " vs " << wmma[first];
}

// Decode-sized groups: with fewer rows than groups (a one-token step over many experts) gemm_grouped
// takes the few-rows kernel, from one row per group on the mma tiles; both must give gemm()'s bits.
TEST(CudaGemmGrouped, DecodeSizedGroupsEqualGemmOnTheirRowsAlone) {
  PARITY_REQUIRE_GPU();
  for (const std::vector<int>& sizes : {kDecodeSizes, std::vector<int>{0, 1, 0, 0, 2, 0, 0, 0, 1, 0, 0, 1}}) {
    Groups gr(sizes);
    ASSERT_LE(gr.max_rows, 64);
    const std::vector<float> g = gr.grouped(cuda::WeightType::BF16), o = gr.one_by_one(cuda::WeightType::BF16);
    EXPECT_TRUE(test::same_bits(g.data(), o.data(), g.size())) << gr.rows << " rows over " << gr.groups << " groups";
    double mag = 0;
    for (float x : g) mag += std::fabs(x);
    EXPECT_GT(mag, 1.0);
  }
}

// Every variant of the few-rows path, on shapes whose N is no multiple of 8 (nor of a block's 64
// columns) and whose K ends in a short slice (2592 = 10·256 + 32) or is one slice or less.
TEST(CudaGemmGrouped, EverySkinnyVariantEqualsGemmOnUnevenShapes) {
  PARITY_REQUIRE_GPU();
  struct Shape {
    int K, N;
  };
  // Sanitizer mode: 544 = 2·256 + 32 and 160 (less than a slice) for the longer chains.
  for (const Shape& sh : test::sweep<Shape>({{2592, 200}, {2560, 1001}, {96, 13}}, {{544, 200}, {160, 1001}, {96, 13}})) {
    Groups gr(kDecodeSizes, sh.K, sh.N);
    const std::vector<float> o = gr.one_by_one(cuda::WeightType::BF16);
    double mag = 0;
    for (float x : o) mag += std::fabs(x);
    EXPECT_GT(mag, 0.01 * double(o.size()));
    for (int v = 0; v < cuda::gemm_skinny_grouped_variants(); ++v) {
      const std::vector<float> g = gr.grouped_skinny(v);
      const std::string d = test::bit_difference(g.data(), o.data(), g.size(), std::size_t(sh.N));
      EXPECT_TRUE(d.empty()) << "K=" << sh.K << " N=" << sh.N << " variant " << v << " ("
                             << cuda::gemm_skinny_variant_name(v) << "): " << d;
    }
    const std::vector<float> g = gr.grouped(cuda::WeightType::BF16);  // the path gemm_grouped takes
    EXPECT_TRUE(test::same_bits(g.data(), o.data(), g.size())) << test::bit_difference(g.data(), o.data(), g.size(), sh.N);
  }
}

// The comparison above sees arithmetic differences: bf16-rounded inputs on tensor cores and the fp32
// chain give other bits in most outputs.
TEST(CudaGemmGrouped, CompanionBf16AndFp32Differ) {
  PARITY_REQUIRE_GPU();
  Groups gr;
  const std::vector<float> b = gr.grouped(cuda::WeightType::BF16), f = gr.grouped(cuda::WeightType::F32);
  int differ = 0;
  for (std::size_t i = 0; i < b.size(); ++i) differ += !test::same_bits(&b[i], &f[i], 1);
  EXPECT_GT(differ, static_cast<int>(b.size() / 2));
}

}  // namespace
}  // namespace parity
