// GPU MoE (src/kernels_cuda/moe.cu, moe_dense.cu) against the CPU kernels: top-k + softmax, the
// dense affinities and the Fused pattern's one-kernel dense routing bit for bit (ties everywhere);
// the whole block bit for bit with fp32 weights in both routing patterns, with computed or injected
// router logits; bf16 tensor-core weights within
// rounding; a token's bits independent of the batch (alone, reversed crowd, everyone on the same
// experts); and the companion showing that the combine order would show in the bits.
#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/gemm.h"
#include "kernels/moe.h"
#include "kernels/moe_dense.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/moe.h"
#include "kernels_cuda/moe_dense.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

// Expert weights already bf16-exact, so the fp32 and bf16 GPU paths read the same values.
struct Experts {
  int E, D, F, k;
  std::vector<float> w_in, w_out, router;  // [E][2F][D], [E][D][F], [E][D]
};

Experts make_experts(int E, int D, int F, int k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Experts x{E, D, F, k, std::vector<float>(std::size_t(E) * 2 * F * D), std::vector<float>(std::size_t(E) * D * F),
            std::vector<float>(std::size_t(E) * D)};
  for (auto& v : x.w_in) v = nd(rng) / std::sqrt(float(D));
  for (auto& v : x.w_out) v = nd(rng) / std::sqrt(float(F));
  for (auto& v : x.router) v = nd(rng);
  x.w_in = test::round_bf16(x.w_in);
  x.w_out = test::round_bf16(x.w_out);
  x.router = test::round_bf16(x.router);
  return x;
}

std::vector<float> normal(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& a : v) a = nd(rng);
  return v;
}

// The CPU block (kernels/moe.h), with the router gemm or injected logits.
std::vector<float> cpu_block(const Experts& x, const std::vector<float>& h, int T, const std::vector<float>* logits_in) {
  std::vector<float> logits(std::size_t(T) * x.E);
  if (logits_in) {
    logits = *logits_in;
  } else {
    const kernels::PackedWeight r = kernels::pack_weight(x.router.data(), DType::F32, x.E, x.D);
    kernels::gemm(h.data(), T, x.D, r, nullptr, logits.data(), x.E);
  }
  std::vector<int> idx(std::size_t(T) * x.k);
  std::vector<float> gates(idx.size());
  kernels::router_topk_softmax(logits.data(), T, x.E, x.k, idx.data(), gates.data());
  std::vector<kernels::PackedWeight> w_in, w_out;
  for (int e = 0; e < x.E; ++e) {
    w_in.push_back(kernels::pack_weight(x.w_in.data() + std::size_t(e) * 2 * x.F * x.D, DType::F32, 2 * x.F, x.D));
    w_out.push_back(kernels::pack_weight(x.w_out.data() + std::size_t(e) * x.D * x.F, DType::F32, x.D, x.F));
  }
  const kernels::MoeRouting r = kernels::moe_route(idx.data(), T, x.E, x.k);
  std::vector<float> out(std::size_t(T) * x.D);
  kernels::moe_experts(h.data(), x.D, x.F, r, gates.data(), w_in.data(), w_out.data(), out.data());
  return out;
}

struct GpuMoe {
  const Experts& x;
  cuda::WeightType wt;
  cuda::DeviceBuffer<float> w32_in, w32_out, r32;
  cuda::DeviceBuffer<uint16_t> w16_in, w16_out, r16;
  cuda::MoeWorkspace ws;
  cuda::DeviceBuffer<float> dx, logits, gates, dense, out;
  cuda::DeviceBuffer<int32_t> idx;

  GpuMoe(const Experts& e, cuda::WeightType t) : x(e), wt(t) {
    if (wt == cuda::WeightType::F32) {
      w32_in.upload(x.w_in);
      w32_out.upload(x.w_out);
      r32.upload(x.router);
    } else {
      w16_in.upload(test::to_bf16(x.w_in));
      w16_out.upload(test::to_bf16(x.w_out));
      r16.upload(test::to_bf16(x.router));
    }
  }
  const void* ptr(const cuda::DeviceBuffer<float>& a, const cuda::DeviceBuffer<uint16_t>& b) const {
    return wt == cuda::WeightType::F32 ? static_cast<const void*>(a.data()) : b.data();
  }
  // The block on the device; fused picks the dense-affinity pattern.
  std::vector<float> run(const std::vector<float>& h, int T, bool fused, const std::vector<float>* logits_in = nullptr) {
    dx.upload(h);
    logits.resize(std::size_t(T) * x.E);
    if (logits_in)
      logits.upload(*logits_in);
    else
      cuda::gemm(dx.data(), T, x.D, x.D, ptr(r32, r16), wt, x.E, nullptr, logits.data(), x.E, nullptr);
    idx.resize(std::size_t(T) * x.k);
    gates.resize(std::size_t(T) * x.k);
    out.resize(std::size_t(T) * x.D);
    const cuda::MoeWeights w{ptr(w32_in, w16_in), ptr(w32_out, w16_out), wt, x.E, x.D, x.F};
    if (fused) {  // as CudaHybridModel runs the Fused pattern
      dense.resize(std::size_t(T) * x.E);
      cuda::dense_routing(logits.data(), T, x.E, x.k, idx.data(), dense.data(), nullptr);
      cuda::moe_experts_dense(w, dx.data(), T, x.k, dense.data(), idx.data(), ws, out.data(), nullptr);
    } else {
      cuda::router_topk_softmax(logits.data(), T, x.E, x.k, idx.data(), gates.data(), nullptr);
      cuda::moe_experts(w, dx.data(), T, x.k, idx.data(), gates.data(), ws, out.data(), nullptr);
    }
    return out.download(std::size_t(T) * x.D);
  }
};

std::vector<float> rows(const std::vector<float>& v, int first, int n, int cols) {
  return {v.begin() + std::ptrdiff_t(first) * cols, v.begin() + std::ptrdiff_t(first + n) * cols};
}

TEST(CudaMoe, TopkSoftmaxAndDenseAffinitiesEqualTheCpuOnTiedLogits) {
  PARITY_REQUIRE_GPU();
  const int T = 500, E = 40, k = 8;
  std::vector<float> lg = normal(std::size_t(T) * E, 1);
  for (std::size_t i = 0; i < lg.size(); ++i) {
    lg[i] = std::round(lg[i] * 2.0f) / 2.0f;  // few distinct values: ties in every row
    if (lg[i] == 0.0f && i % 2) lg[i] = -0.0f;
  }
  std::vector<int> idx(std::size_t(T) * k);
  std::vector<float> gates(idx.size()), dense(lg.size());
  kernels::router_topk_softmax(lg.data(), T, E, k, idx.data(), gates.data());
  kernels::moe_dense_affinities(idx.data(), gates.data(), T, E, k, dense.data());
  cuda::DeviceBuffer<float> dl, dg(gates.size()), dd(dense.size());
  cuda::DeviceBuffer<int32_t> di(idx.size());
  dl.upload(lg);
  cuda::router_topk_softmax(dl.data(), T, E, k, di.data(), dg.data(), nullptr);
  cuda::moe_dense_affinities(di.data(), dg.data(), T, E, k, dd.data(), nullptr);
  const std::vector<int32_t> gi = di.download(idx.size());
  EXPECT_TRUE(std::equal(gi.begin(), gi.end(), idx.begin()));
  EXPECT_TRUE(test::same_bits(dg.download(gates.size()).data(), gates.data(), gates.size()));
  EXPECT_TRUE(test::same_bits(dd.download(dense.size()).data(), dense.data(), dense.size()));
  EXPECT_GT(gates[0], 0.0f);
}

// The Fused pattern's routing kernel (logits → top-k order + dense affinities in one pass) against
// kernels::dense_routing_from_logits, on tied logits and for k from 1 to E; the first mismatch is
// printed. Its companion: the same kernel on logits with one value moved gives other bits.
TEST(CudaMoe, DenseRoutingEqualsTheCpuOnTiedLogits) {
  PARITY_REQUIRE_GPU();
  const int T = 300, E = 24;
  std::vector<float> lg = normal(std::size_t(T) * E, 12);
  for (std::size_t i = 0; i < lg.size(); ++i) {
    lg[i] = std::round(lg[i] * 2.0f) / 2.0f;  // few distinct values: ties in every row
    if (lg[i] == 0.0f && i % 2) lg[i] = -0.0f;
  }
  cuda::DeviceBuffer<float> dl, dd(lg.size());
  dl.upload(lg);
  for (int k : {1, 2, 6, 8, E}) {
    SCOPED_TRACE("top-" + std::to_string(k));
    const kernels::DenseRouting want = kernels::dense_routing_from_logits(lg.data(), T, E, k);
    cuda::DeviceBuffer<int32_t> dord(std::size_t(T) * k);
    cuda::dense_routing(dl.data(), T, E, k, dord.data(), dd.data(), nullptr);
    const std::vector<int32_t> order = dord.download(std::size_t(T) * k);
    const std::vector<float> dense = dd.download(lg.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      ASSERT_EQ(order[i], want.order[i]) << "token " << i / k << " choice " << i % k;
    for (std::size_t i = 0; i < dense.size(); ++i)
      ASSERT_TRUE(test::same_bits(&dense[i], &want.affinities[i], 1))
          << "token " << i / E << " expert " << i % E << ": gpu " << dense[i] << " cpu " << want.affinities[i];
  }
  // Companion: raise the first token's last-ranked selected logit by 0.25; its gates must change.
  const int k = 2;
  const kernels::DenseRouting base = kernels::dense_routing_from_logits(lg.data(), T, E, k);
  std::vector<float> moved = lg;
  moved[std::size_t(base.order[1])] += 0.25f;
  dl.upload(moved);
  cuda::DeviceBuffer<int32_t> dord(std::size_t(T) * k);
  cuda::dense_routing(dl.data(), T, E, k, dord.data(), dd.data(), nullptr);
  const std::vector<float> dense = dd.download(lg.size());
  EXPECT_FALSE(test::same_bits(dense.data(), base.affinities.data(), std::size_t(E)));
  EXPECT_TRUE(test::same_bits(dense.data() + E, base.affinities.data() + E, std::size_t(T - 1) * E))
      << "the other tokens' rows do not depend on token 0";
}

TEST(CudaMoe, BlockEqualsTheCpuBitForBitWithFp32Weights) {
  PARITY_REQUIRE_GPU();
  const Experts x = make_experts(8, 128, 96, 3, 2);
  const int T = 77;
  const std::vector<float> h = normal(std::size_t(T) * x.D, 3), injected = normal(std::size_t(T) * x.E, 4);
  GpuMoe g(x, cuda::WeightType::F32);
  const std::vector<float> cpu = cpu_block(x, h, T, nullptr), cpu_inj = cpu_block(x, h, T, &injected);
  for (bool fused : {false, true}) {
    EXPECT_TRUE(test::same_bits(g.run(h, T, fused).data(), cpu.data(), cpu.size())) << "fused " << fused;
    EXPECT_TRUE(test::same_bits(g.run(h, T, fused, &injected).data(), cpu_inj.data(), cpu.size()))
        << "injected logits, fused " << fused;
  }
  // Injected logits route differently: the check above compares real, distinct outputs.
  EXPECT_FALSE(test::same_bits(cpu.data(), cpu_inj.data(), cpu.size()));
}

// Tensor-core expert gemms round x and the SwiGLU output to bf16 (DESIGN.md rule 5): the routing
// is injected so both sides pick the same experts, and the outputs agree to bf16 input rounding:
// a float64 model of exactly that rounding (this fixture, on the host) is at most 1.8e-2 · rms
// from the CPU, so 6e-2 · rms leaves room for the tensor cores' own fp32 order; a wrong expert,
// gate or layout is off by about the rms itself.
TEST(CudaMoe, Bf16WeightsAgreeWithTheCpuWithinInputRounding) {
  PARITY_REQUIRE_GPU();
  const Experts x = make_experts(8, 128, 96, 3, 5);
  const int T = 40;
  const std::vector<float> h = normal(std::size_t(T) * x.D, 6), injected = normal(std::size_t(T) * x.E, 7);
  const std::vector<float> cpu = cpu_block(x, h, T, &injected);
  double rms = 0;
  for (float v : cpu) rms += double(v) * v;
  rms = std::sqrt(rms / double(cpu.size()));
  ASSERT_GT(rms, 0.1);
  GpuMoe g(x, cuda::WeightType::BF16);
  for (bool fused : {false, true}) {
    const std::vector<float> gpu = g.run(h, T, fused, &injected);
    for (std::size_t i = 0; i < cpu.size(); ++i)
      ASSERT_LE(std::fabs(gpu[i] - cpu[i]), 6e-2 * rms) << i << " fused " << fused;
  }
}

TEST(CudaMoe, TokenBitsDoNotDependOnTheBatch) {
  PARITY_REQUIRE_GPU();
  const Experts x = make_experts(8, 128, 96, 3, 8);
  const int T = 101;
  const std::vector<float> h = normal(std::size_t(T) * x.D, 9);
  std::vector<float> rev(h.size());
  for (int t = 0; t < T; ++t) std::copy_n(h.begin() + std::ptrdiff_t(T - 1 - t) * x.D, x.D, rev.begin() + std::ptrdiff_t(t) * x.D);
  // Everyone on experts {5, 6, 7}: one group of T rows per expert.
  std::vector<float> same(std::size_t(T) * x.E, 0.0f);
  for (int t = 0; t < T; ++t)
    for (int e = 5; e < 8; ++e) same[std::size_t(t) * x.E + e] = 1.0f + 0.25f * float(e + t % 3);
  // Sanitizer mode: tokens alone at the crowd's first, middle and last row (not every tenth).
  const int alone_step = test::pick(10, 50);
  for (cuda::WeightType wt : {cuda::WeightType::BF16, cuda::WeightType::F32}) {
    GpuMoe g(x, wt);
    const std::vector<float> crowd = g.run(h, T, false);
    EXPECT_TRUE(test::same_bits(g.run(h, T, true).data(), crowd.data(), crowd.size())) << "fused pattern";
    for (bool fused : {false, true}) {  // each pattern's token alone / in another crowd gives the crowd's bits
      SCOPED_TRACE(fused ? "fused" : "direct");
      const std::vector<float> crowd_rev = g.run(rev, T, fused);
      for (int t = 0; t < T; ++t)
        ASSERT_TRUE(test::same_bits(crowd_rev.data() + std::size_t(T - 1 - t) * x.D,
                                    crowd.data() + std::size_t(t) * x.D, x.D))
            << "reversed crowd, token " << t;
      for (int t = 0; t < T; t += alone_step) {
        EXPECT_TRUE(
            test::same_bits(g.run(rows(h, t, 1, x.D), 1, fused).data(), crowd.data() + std::size_t(t) * x.D, x.D))
            << "token " << t << " alone";
      }
      for (int n : {16, 17, 40}) {  // around gemm's few-rows threshold
        EXPECT_TRUE(test::same_bits(g.run(rows(h, 30, n, x.D), n, fused).data(), crowd.data() + 30 * x.D,
                                    std::size_t(n) * x.D))
            << n << " tokens";
      }
      const std::vector<float> crowd_same = g.run(h, T, fused, &same);
      for (int t = 0; t < T; t += alone_step) {
        const std::vector<float> lg = rows(same, t, 1, x.E);
        EXPECT_TRUE(test::same_bits(g.run(rows(h, t, 1, x.D), 1, fused, &lg).data(),
                                    crowd_same.data() + std::size_t(t) * x.D, x.D))
            << "token " << t << " alone on the shared experts";
      }
    }
  }
}

// The checks above can fail: summing a token's k expert rows in another order (reversed, as an
// expert-major scatter would for some tokens) changes bits of some outputs, while the top-k order
// recomputed from the GPU's own expert rows gives exactly its output.
TEST(CudaMoe, CompanionCombineOrderShowsInTheBits) {
  PARITY_REQUIRE_GPU();
  const Experts x = make_experts(8, 128, 96, 4, 10);
  const int T = 60;
  const std::vector<float> h = normal(std::size_t(T) * x.D, 11);
  GpuMoe g(x, cuda::WeightType::BF16);
  const std::vector<float> out = g.run(h, T, false);
  const std::size_t n = std::size_t(T) * x.k;
  const std::vector<float> yg = g.ws.yg.download(n * x.D), gates = g.gates.download(n);
  const std::vector<int32_t> row = g.ws.row.download(n);
  int same_order = 0, reversed = 0;
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < x.D; ++d) {
      float a = 0.0f, b = 0.0f;
      for (int j = 0; j < x.k; ++j) a = a + gates[t * x.k + j] * yg[std::size_t(row[t * x.k + j]) * x.D + d];
      for (int j = x.k - 1; j >= 0; --j) b = b + gates[t * x.k + j] * yg[std::size_t(row[t * x.k + j]) * x.D + d];
      same_order += !test::same_bits(&a, &out[std::size_t(t) * x.D + d], 1);
      reversed += !test::same_bits(&b, &out[std::size_t(t) * x.D + d], 1);
    }
  EXPECT_EQ(same_order, 0);
  EXPECT_GT(reversed, 0);
}

}  // namespace
}  // namespace parity
