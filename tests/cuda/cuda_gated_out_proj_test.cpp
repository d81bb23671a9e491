// out_proj doing a one-row pass's gated RMSNorm in its own blocks (gated_a.h) against gated_rmsnorm
// (with the bf16 copy it writes for out_proj) followed by gemm_rounded, as the mixer launches them
// without it: every output bit, at mamba2-2.7b's shape, mamba2-130m's and tiny's, the gate before
// and after the norm, with a bias, with the GEMMs' early start on and off, from z or from the conv's
// silu(z) factors (GateJob, GatedA::z_activated). It must decline a width it
// does not take (more than one group). The companion: a nudged gate element reaches the comparison.
#include <string>
#include <vector>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gated_a.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/pass_plan.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

struct Case {
  int K, N;
  bool norm_before_gate, bias;
};

struct Result {
  std::string out;
  bool taken = false;
};

// silu(z) of one row, evaluated on the device by conv1d's GateJob (the factors a decode pass's conv
// hands the norm).
void gate_factors(const float* z, int K, float* out) {
  const int ch = 8, conv_K = 4;
  cuda::DeviceBuffer<float> in(static_cast<std::size_t>(K) + ch), w(static_cast<std::size_t>(ch) * conv_K),
      state(static_cast<std::size_t>(conv_K - 1) * ch), x(ch);
  in.zero();
  w.zero();
  state.zero();
  cuda::cuda_check(cudaMemcpy(in.data(), z, sizeof(float) * K, cudaMemcpyDeviceToDevice), "gate input");
  cuda::DeviceBuffer<int32_t> ints;
  cuda::DeviceBuffer<int64_t> starts;
  const cuda::PassSeqs p = cuda::PassPlan({{0, 40, 1}}, cuda::ScanGrid{}).upload(ints, starts);
  const cuda::GateJob job{in.data(), K + ch, K, out};
  cuda::conv1d(in.data() + K, K + ch, ch, w.data(), nullptr, conv_K, state.data(), p, true, x.data(), nullptr, nullptr,
               &job);
  cuda::cuda_check(cudaDeviceSynchronize(), "gate factors");
}

// activated: the fused kernel reads silu(z) from conv1d's GateJob (GatedA::z_activated), the reference z.
Result compare(const Case& c, bool nudge, int group = 0, bool activated = false) {
  if (group == 0) group = c.K;
  const std::vector<float> y = test::uniform(c.K, 81, -2.0f, 2.0f), z = test::uniform(c.K, 82, -3.0f, 3.0f),
                           nw = test::uniform(c.K, 83, 0.5f, 1.5f), b = test::uniform(c.N, 84, -0.5f, 0.5f);
  const std::vector<uint16_t> w =
      test::to_bf16(test::uniform(static_cast<std::size_t>(cuda::padded_rows(c.N)) * c.K, 85, -0.1f, 0.1f));
  cuda::DeviceBuffer<float> dy, dz, dnw, db, g(c.K), c0(c.N), c1(c.N);
  cuda::DeviceBuffer<uint16_t> dw, g16(c.K);
  dy.upload(y);
  std::vector<float> z1 = z;
  if (nudge) z1[c.K - 1] += 0.25f;
  dz.upload(z1);
  dnw.upload(nw);
  db.upload(b);
  dw.upload(w);
  const float eps = 1e-5f;
  const float* bias = c.bias ? db.data() : nullptr;
  Result r;
  cuda::DeviceBuffer<float> factors(c.K);
  if (activated) gate_factors(dz.data(), c.K, factors.data());
  const cuda::GatedA a{dy.data(), activated ? factors.data() : dz.data(), dnw.data(), group, eps, c.norm_before_gate,
                       activated};
  r.taken = cuda::gemm_bf16_gated_row(a, c.K, dw.data(), c.N, bias, c1.data(), nullptr);
  if (nudge) dz.upload(z);  // the reference on the un-nudged gate
  cuda::gated_rmsnorm(dy.data(), dz.data(), c.K, 1, c.K, c.K, dnw.data(), eps, c.norm_before_gate, g.data(), nullptr,
                      g16.data());
  cuda::gemm_rounded(g.data(), g16.data(), 1, c.K, c.K, dw.data(), cuda::WeightType::BF16, c.N, bias, c0.data(), c.N,
                     nullptr, c.N);
  cuda::cuda_check(cudaDeviceSynchronize(), "gated out_proj");
  const std::vector<float> h0 = c0.download(c.N), h1 = c1.download(c.N);
  r.out = test::bit_difference(h1.data(), h0.data(), h0.size(), static_cast<std::size_t>(c.N));
  return r;
}

TEST(CudaGatedOutProj, OutProjDoingTheNormGivesTheBitsOfTheNormThenTheGemm) {
  PARITY_REQUIRE_GPU();
  cuda::set_gated_out_proj(true);  // off by default (gated_a.h)
  const Case cases[] = {{5120, 2560, false, false}, {5120, 2560, true, true}, {1536, 768, false, true},
                        {128, 64, false, false},    {128, 64, true, false},   {96, 200, false, true}};
  for (const Case& c : cases)
    for (unsigned early : {cuda::kGemmEarlyDefault, 0u, cuda::kGemmEarlyDefault | cuda::kGemmMmaLag})
      for (bool activated : {false, true}) {
        cuda::set_gemm_early(early);
        const Result r = compare(c, false, 0, activated);
        const std::string what = "K " + std::to_string(c.K) + " N " + std::to_string(c.N) + " norm before gate " +
                                 std::to_string(c.norm_before_gate) + " early " + std::to_string(early) +
                                 " gate factors " + std::to_string(activated) + ": ";
        EXPECT_TRUE(r.taken) << what;
        EXPECT_EQ(r.out, "") << what;
      }
  cuda::set_gemm_early(cuda::kGemmEarlyDefault);
  cuda::set_gated_out_proj(cuda::kGatedOutProjDefault);
}

TEST(CudaGatedOutProj, DeclinesTwoGroupsAndWhenSwitchedOff) {
  PARITY_REQUIRE_GPU();
  cuda::set_gated_out_proj(true);
  EXPECT_FALSE(compare({128, 64, false, false}, false, 64).taken);
  cuda::set_gated_out_proj(false);
  EXPECT_FALSE(compare({128, 64, false, false}, false).taken);
  cuda::set_gated_out_proj(cuda::kGatedOutProjDefault);
}

TEST(CudaGatedOutProj, ComparisonSeesANudgedGate) {
  PARITY_REQUIRE_GPU();
  cuda::set_gated_out_proj(true);
  const Result r = compare({5120, 2560, false, false}, true);
  const Result ra = compare({5120, 2560, false, false}, true, 0, true);
  cuda::set_gated_out_proj(cuda::kGatedOutProjDefault);
  EXPECT_TRUE(r.taken);
  EXPECT_NE(r.out, "") << "the last gate element changes the norm's sum, so every output";
  EXPECT_NE(ra.out, "") << "the same through the conv's gate factors";
}

}  // namespace
}  // namespace parity
