// in_proj's conv epilogue (conv_epilogue.h): a decode pass's conv, SiLU, conv-state advance and dt
// (and, with ConvEpilogue::gate, the gated norm's silu(z) factors) done by the GEMM blocks that write
// in_proj's columns, against gemm() and then conv1d with its DtJob and GateJob (the mixer's launches
// without it): in_proj's output, the conv output, the new state, dt and the factors bit for bit, at
// mamba2-2.7b's shape and the tiny models' (bias, groups), for every row count the epilogue takes
// (1..8), with the GEMMs' early start on and off, on the box-by-box and the grouped consumer. Above 8
// rows it must decline (the caller then runs conv1d). The companion: a nudged carried state reaches
// the comparison.
#include <string>
#include <vector>

#include "kernels_cuda/conv_epilogue.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/pass_plan.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

struct InProj {
  int K, I, conv, H;  // in_proj's columns: [z (I) | xBC (conv) | dt (H)]
  bool bias;
  int N() const { return I + conv + H; }
};

struct Outputs {
  std::string zx, out, state, dt, gate;
  bool taken = false;
};

// gate: the epilogue's job evaluates the factors too; skew: the reference's factors from the next z column.
Outputs compare(const InProj& sh, int M, bool nudge, bool gate = false, bool skew = false) {
  const int N = sh.N(), K = 4, slots = 2 * M + 1;
  const std::vector<float> a = test::uniform(static_cast<std::size_t>(M) * sh.K, 71, -2.0f, 2.0f);
  const std::vector<float> w = test::round_bf16(test::uniform(static_cast<std::size_t>(cuda::padded_rows(N)) * sh.K, 72,
                                                              -0.1f, 0.1f));
  const std::vector<float> gb = test::uniform(N, 73, -0.5f, 0.5f), cw = test::uniform(std::size_t(sh.conv) * K, 74),
                           cb = test::uniform(sh.conv, 75), dtb = test::uniform(sh.H, 76, -3.0f, 1.0f);
  std::vector<float> state = test::uniform(static_cast<std::size_t>(slots) * (K - 1) * sh.conv, 77);
  std::vector<cuda::SeqSpan> spans;
  for (int s = 0; s < M; ++s) spans.push_back({(2 * s + 1) % slots, 40 + s, 1});
  cuda::DeviceBuffer<float> da, dgb, dcw, dcb, ddtb, st0, st1;
  cuda::DeviceBuffer<float> c0(std::size_t(M) * N), c1(c0.size()), o0(std::size_t(M) * sh.conv), o1(o0.size()),
      dt0(std::size_t(M) * sh.H), dt1(dt0.size()), g0(std::size_t(M) * sh.I), g1(g0.size());
  cuda::DeviceBuffer<uint16_t> dw;
  da.upload(a);
  dw.upload(test::to_bf16(w));
  dgb.upload(gb);
  dcw.upload(cw);
  dcb.upload(cb);
  ddtb.upload(dtb);
  st0.upload(state);
  if (nudge) state[(static_cast<std::size_t>(spans[0].slot) * (K - 1) + K - 2) * sh.conv + sh.conv - 1] += 0.5f;
  st1.upload(state);
  cuda::DeviceBuffer<int32_t> ints;
  cuda::DeviceBuffer<int64_t> starts;
  const cuda::PassSeqs p = cuda::PassPlan(spans, cuda::ScanGrid{}).upload(ints, starts);
  const float lo = 0.001f, hi = 0.3f;
  const float* bias = sh.bias ? dgb.data() : nullptr;
  // The mixer's launches without the epilogue.
  cuda::gemm(da.data(), M, sh.K, sh.K, dw.data(), cuda::WeightType::BF16, N, bias, c0.data(), N, nullptr, N);
  const cuda::DtJob dt_ref{c0.data() + sh.I + sh.conv, N, sh.H, ddtb.data(), lo, hi, dt0.data()};
  const cuda::GateJob gate_ref{c0.data() + (skew ? 1 : 0), N, sh.I, g0.data()};
  cuda::conv1d(c0.data() + sh.I, N, sh.conv, dcw.data(), dcb.data(), K, st0.data(), p, true, o0.data(), nullptr, &dt_ref,
               &gate_ref);
  // With it (and conv1d after, as the mixer, where it declines).
  const cuda::DtJob dt_job{nullptr, 0, sh.H, ddtb.data(), lo, hi, dt1.data()};
  cuda::ConvEpilogue job{sh.I, sh.conv, K, dcw.data(), dcb.data(), st1.data(), p.slot, p.row_seq, true, o1.data(),
                         sh.I + sh.conv, dt_job};
  if (gate) {
    job.gate = g1.data();
    job.gate_width = sh.I;
  }
  Outputs r;
  r.taken = cuda::with_conv_epilogue(job, [&] {
    cuda::gemm(da.data(), M, sh.K, sh.K, dw.data(), cuda::WeightType::BF16, N, bias, c1.data(), N, nullptr, N);
  });
  if (!r.taken) {
    const cuda::DtJob dt_late{c1.data() + sh.I + sh.conv, N, sh.H, ddtb.data(), lo, hi, dt1.data()};
    const cuda::GateJob gate_late{c1.data(), N, sh.I, g1.data()};
    cuda::conv1d(c1.data() + sh.I, N, sh.conv, dcw.data(), dcb.data(), K, st1.data(), p, true, o1.data(), nullptr,
                 &dt_late, &gate_late);
  }
  cuda::cuda_check(cudaDeviceSynchronize(), "conv epilogue");
  auto diff = [](const cuda::DeviceBuffer<float>& x, const cuda::DeviceBuffer<float>& y, std::size_t n, int cols) {
    const std::vector<float> hx = x.download(n), hy = y.download(n);
    return test::bit_difference(hx.data(), hy.data(), n, static_cast<std::size_t>(cols));
  };
  r.zx = diff(c1, c0, c0.size(), N);
  r.out = diff(o1, o0, o0.size(), sh.conv);
  r.state = diff(st1, st0, state.size(), sh.conv);
  r.dt = diff(dt1, dt0, dt0.size(), sh.H);
  if (gate || !r.taken) r.gate = diff(g1, g0, g0.size(), sh.I);  // (taken without the gate: the norm's job)
  return r;
}

// mamba2-2.7b's columns (on K = 128 in sanitizer mode: the epilogue sees only N's layout) and the tiny models'.
std::vector<InProj> shapes() {
  return {{test::pick(2560, 128), 5120, 5376, 80, false}, {64, 128, 160, 4, false}, {64, 128, 192, 8, true}};
}

TEST(CudaConvEpilogue, InProjDoingTheConvGivesTheBitsOfConv1dAfterIt) {
  PARITY_REQUIRE_GPU();
  cuda::set_conv_epilogue(true);  // off by default (conv_epilogue.h)
  // (the grouped consumer, the gate factors in the epilogue)
  const std::vector<std::pair<bool, bool>> ways =
      test::pick(std::vector<std::pair<bool, bool>>{{false, false}, {false, true}, {true, true}},
                 std::vector<std::pair<bool, bool>>{{false, false}, {true, true}});
  for (const InProj& sh : shapes())
    for (const auto& [grouped, gate] : ways)
      for (unsigned early : {cuda::kGemmEarlyDefault, 0u})
        for (int M : test::sweep({1, 2, 3, 5, 8, 9, 16}, {1, 3, 8, 9})) {
          cuda::set_gemm_early(early);
          cuda::set_conv_epilogue_grouped(grouped);
          const Outputs r = compare(sh, M, false, gate);
          const std::string what = "K " + std::to_string(sh.K) + " N " + std::to_string(sh.N()) + " M " +
                                   std::to_string(M) + " early " + std::to_string(early) +
                                   (grouped ? " grouped" : "") + (gate ? " with the gate" : "") + ": ";
          EXPECT_EQ(r.taken, M <= 8) << what << "the epilogue takes up to 8 rows";
          EXPECT_EQ(r.zx, "") << what << "in_proj's output";
          EXPECT_EQ(r.out, "") << what << "the conv's output";
          EXPECT_EQ(r.state, "") << what << "the conv state";
          EXPECT_EQ(r.dt, "") << what << "dt";
          EXPECT_EQ(r.gate, "") << what << "the gate factors";
        }
  cuda::set_conv_epilogue_grouped(false);
  cuda::set_gemm_early(cuda::kGemmEarlyDefault);
  cuda::set_conv_epilogue(cuda::kConvEpilogueDefault);
}

TEST(CudaConvEpilogue, SwitchedOffItDeclines) {
  PARITY_REQUIRE_GPU();
  cuda::set_conv_epilogue(false);
  const Outputs r = compare(shapes()[1], 1, false);
  cuda::set_conv_epilogue(cuda::kConvEpilogueDefault);
  EXPECT_FALSE(r.taken);
  EXPECT_EQ(r.out, "");
}

TEST(CudaConvEpilogue, ComparisonSeesANudgedState) {
  PARITY_REQUIRE_GPU();
  cuda::set_conv_epilogue(true);
  const Outputs r = compare(shapes()[0], 1, true);
  cuda::set_conv_epilogue(cuda::kConvEpilogueDefault);
  EXPECT_TRUE(r.taken);
  EXPECT_EQ(r.zx, "") << "the state is not in_proj's input";
  EXPECT_NE(r.out, "") << "the nudged last tap feeds the last channel's output";
  EXPECT_NE(r.state, "") << "and shifts into its new state";
}

// The gate factors' comparison can fail: the reference's factors of the next z column.
TEST(CudaConvEpilogue, ComparisonSeesTheGateOfAnotherZ) {
  PARITY_REQUIRE_GPU();
  cuda::set_conv_epilogue(true);
  const Outputs r = compare(shapes()[1], 1, false, true, true);
  cuda::set_conv_epilogue(cuda::kConvEpilogueDefault);
  EXPECT_TRUE(r.taken);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.gate, "") << "silu of a moved z";
}

}  // namespace
}  // namespace parity
