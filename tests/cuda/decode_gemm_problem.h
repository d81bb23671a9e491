#pragma once
// What the decode-sized GEMM tests (cuda_gemm_swap_ab_test.cpp, cuda_gemm_gemv_test.cpp) share: up to
// `rows` rows of A against W (N × K, bf16, random) with A's row 1 zero and W's row 7 all negative, so every
// product of that output is -0 and a chain from +0 must end at +0 as mma.sync's does; the reference mma
// tile and gemm() on it; and the companions' reordering of K.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gemm_mma.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity::test {

constexpr int kZeroRow = 1, kNegativeColumn = 7;

struct GemmShape {
  int K, N, ldc;
};

inline std::string name(const GemmShape& sh) {
  return "K=" + std::to_string(sh.K) + " N=" + std::to_string(sh.N) + " ldc=" + std::to_string(sh.ldc);
}

struct GemmProblem {
  GemmShape sh;
  cuda::DeviceBuffer<float> a, bias, c;
  cuda::DeviceBuffer<uint16_t> w;
  GemmProblem(GemmShape s, int rows, uint64_t seed) : sh(s) {
    std::vector<float> av = uniform(std::size_t(rows) * sh.K, seed);
    std::fill(av.begin() + std::size_t(kZeroRow) * sh.K, av.begin() + std::size_t(kZeroRow + 1) * sh.K, 0.0f);
    std::vector<float> wv = uniform(std::size_t(sh.N) * sh.K, seed + 1, -0.05f, 0.05f);
    if (sh.N > kNegativeColumn)
      for (int k = 0; k < sh.K; ++k) {
        float& x = wv[std::size_t(kNegativeColumn) * sh.K + k];
        x = -std::max(std::fabs(x), 1e-3f);
      }
    a.upload(av);
    w.upload(to_bf16(wv));
    bias.upload(uniform(std::size_t(sh.N), seed + 2));
    c.resize(std::size_t(rows) * sh.ldc);
  }
  std::size_t out(int M) const { return std::size_t(M) * sh.ldc; }
  const float* b(bool with_bias) const { return with_bias ? bias.data() : nullptr; }
  std::vector<float> mma(int M, bool with_bias) {
    c.zero();
    cuda::gemm_bf16_mma_tile(0, a.data(), M, sh.K, sh.K, w.data(), sh.N, sh.N, b(with_bias), c.data(), sh.ldc, nullptr);
    return c.download(out(M));
  }
  std::vector<float> through_gemm(int M, bool with_bias) {
    c.zero();
    cuda::gemm(a.data(), M, sh.K, sh.K, w.data(), cuda::WeightType::BF16, sh.N, b(with_bias), c.data(), sh.ldc, nullptr,
               sh.N);
    return c.download(out(M));
  }
};

// The companions' operands: M rows of A and all of W (ld = K, C dense: ldc = N) with both operands' 16-deep
// blocks of K in descending order — the same products, summed in another chain.
struct ReversedK {
  cuda::DeviceBuffer<float> a;
  cuda::DeviceBuffer<uint16_t> w;
  ReversedK(const GemmProblem& p, int M) {
    const GemmShape& sh = p.sh;
    const int blocks = sh.K / 16;
    std::vector<float> av = p.a.download(std::size_t(M) * sh.K), ar(av.size());
    std::vector<uint16_t> wv = p.w.download(std::size_t(sh.N) * sh.K), wr(wv.size());
    for (int j = 0; j < blocks; ++j) {
      const int from = 16 * j, to = 16 * (blocks - 1 - j);
      for (int m = 0; m < M; ++m)
        std::memcpy(&ar[std::size_t(m) * sh.K + to], &av[std::size_t(m) * sh.K + from], 16 * 4);
      for (int n = 0; n < sh.N; ++n)
        std::memcpy(&wr[std::size_t(n) * sh.K + to], &wv[std::size_t(n) * sh.K + from], 16 * 2);
    }
    a.upload(ar);
    w.upload(wr);
  }
};

// The companions' verdict: the other chain gives other bits in many outputs, and no more than rounding apart.
inline void expect_another_chain(const std::vector<float>& forward, const std::vector<float>& reversed) {
  int differ = 0;
  double err = 0;
  for (std::size_t i = 0; i < forward.size(); ++i) {
    differ += std::memcmp(&reversed[i], &forward[i], 4) != 0;
    err = std::max(err, double(std::fabs(reversed[i] - forward[i])));
  }
  EXPECT_GT(differ, static_cast<int>(forward.size() / 10)) << differ << " of " << forward.size();
  EXPECT_LT(err, 1e-3) << "the two orders sum the same products";
}

}  // namespace parity::test
