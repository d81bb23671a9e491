// Plain mode's SSU launch doing the gated norm after it (gated_norm_tail.h) against the SSU then
// gated_rmsnorm's own launch: y, the norm's fp32 output and its bf16 copy bit for bit, for one and five
// sequences, one norm group and two, the gate as z or as silu(z), norm before or after the gate, and a
// second pass on the same counts (the last block set them back to zero). The launch must take the job
// (with_gated_norm_tail returns true), or the comparison would hold trivially. Companion: the same
// comparison sees the other norm_before_gate.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gated_norm_tail.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/pass_plan.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

struct TailCase {
  int seqs, groups;
  bool activated, norm_before_gate;
};

struct TailResult {
  bool taken[2] = {false, false};
  std::string y, out, out16, counts;
};

// Two passes (the second from the first's state) each way. reference_nbg: the reference norm's
// norm_before_gate (the companion flips it).
TailResult compare_tail(const TailCase& c, bool reference_nbg) {
  const cuda::SsdShape sh{80, 64, 128, 1};
  const int I = sh.H * sh.P, ld = I + 2 * sh.groups * sh.N + 4, ldz = I + 16, rows = c.seqs, slots = c.seqs + 3;
  const int group = I / c.groups;
  std::vector<cuda::SeqSpan> spans;
  for (int s = 0; s < c.seqs; ++s) spans.push_back({(2 * s + 1) % slots, 40 + s, 1});
  const cuda::ScanGrid grid{};  // plain: one-row calls take the SSU
  cuda::DeviceBuffer<int32_t> ints;
  cuda::DeviceBuffer<int64_t> starts;
  const cuda::PassSeqs p = cuda::PassPlan(spans, grid).upload(ints, starts);
  const std::size_t state_n = static_cast<std::size_t>(slots) * I * sh.N;
  cuda::DeviceBuffer<float> xbc, dt, A, D, st0, st1, z, w, y0(static_cast<std::size_t>(rows) * I), y1(y0.size()),
      o0(y0.size()), o1(y0.size()), scratch(std::max<std::size_t>(1, cuda::ssd_scratch_floats(sh, p, grid)));
  cuda::DeviceBuffer<uint16_t> h0(y0.size()), h1(y0.size());
  cuda::DeviceBuffer<int> counts;
  xbc.upload(test::uniform(static_cast<std::size_t>(rows) * ld, 71));
  dt.upload(test::uniform(static_cast<std::size_t>(rows) * sh.H, 72, 0.01f, 0.2f));
  A.upload(test::uniform(sh.H, 73, -2.0f, -0.1f));
  D.upload(test::uniform(sh.H, 74));
  const std::vector<float> state = test::uniform(state_n, 75);
  st0.upload(state);
  st1.upload(state);
  // z: in_proj's z columns (ldz wide rows) or silu(z) as the conv's GateJob writes it (positive-ish).
  z.upload(test::uniform(static_cast<std::size_t>(rows) * ldz, 76, c.activated ? 0.0f : -3.0f, 3.0f));
  w.upload(test::uniform(I, 77, 0.5f, 1.5f));
  counts.upload(std::vector<int>(static_cast<std::size_t>(c.seqs), 0));
  const float eps = 1e-5f;
  TailResult r;
  for (int pass = 0; pass < 2; ++pass) {
    cuda::SsdState s0, s1;
    s0.state_f32 = st0.data();
    s1.state_f32 = st1.data();
    cuda::ssd_scan(sh, grid, p, xbc.data(), ld, dt.data(), A.data(), D.data(), s0, scratch.data(), scratch.size(), y0.data(), nullptr);
    cuda::gated_rmsnorm(y0.data(), z.data(), ldz, rows, I, group, w.data(), eps, reference_nbg, o0.data(), nullptr,
                        h0.data(), c.activated);
    cuda::GatedNormTail job;
    job.a = cuda::GatedA{y1.data(), z.data(), w.data(), group, eps, c.norm_before_gate, c.activated};
    job.ldz = ldz;
    job.dim = I;
    job.out = o1.data();
    job.out16 = h1.data();
    job.counts = counts.data();
    r.taken[pass] = cuda::with_gated_norm_tail(job, [&] {
      cuda::ssd_scan(sh, grid, p, xbc.data(), ld, dt.data(), A.data(), D.data(), s1, scratch.data(), scratch.size(), y1.data(),
                     nullptr);
    });
  }
  cuda::cuda_check(cudaDeviceSynchronize(), "ssu + gated norm tail");
  const std::size_t n = y0.size();
  r.y = test::bit_difference(y1.download(n).data(), y0.download(n).data(), n, I);
  r.out = test::bit_difference(o1.download(n).data(), o0.download(n).data(), n, I);
  const std::vector<uint16_t> a = h1.download(n), b = h0.download(n);
  std::size_t diff = 0;
  for (std::size_t i = 0; i < n; ++i) diff += a[i] != b[i];
  r.out16 = diff ? std::to_string(diff) + " bf16 values differ" : "";
  for (int v : counts.download(static_cast<std::size_t>(c.seqs)))
    if (v != 0) r.counts = "a count was left at " + std::to_string(v);
  return r;
}

std::string what(const TailCase& c) {
  return std::to_string(c.seqs) + " sequences, " + std::to_string(c.groups) + " groups" +
         (c.activated ? ", silu(z) given" : "") + (c.norm_before_gate ? ", norm before gate" : "");
}

TEST(CudaGatedNormTail, SsuLaunchGivesTheBitsOfTheNormsOwnLaunch) {
  PARITY_REQUIRE_GPU();
  cuda::set_gated_norm_tail(true);
  const std::vector<TailCase> cases = test::pick(
      std::vector<TailCase>{{1, 1, true, false}, {1, 1, false, false}, {5, 1, true, false}, {5, 2, false, true},
                            {1, 2, true, true}},
      std::vector<TailCase>{{1, 1, true, false}, {5, 2, false, true}});
  for (const TailCase& c : cases) {
    const TailResult r = compare_tail(c, c.norm_before_gate);
    EXPECT_TRUE(r.taken[0] && r.taken[1]) << what(c) << ": the SSU launch did not take the norm";
    EXPECT_EQ(r.y, "") << what(c) << ": y";
    EXPECT_EQ(r.out, "") << what(c) << ": the norm's output";
    EXPECT_EQ(r.out16, "") << what(c) << ": its bf16 copy";
    EXPECT_EQ(r.counts, "") << what(c);
  }
  cuda::set_gated_norm_tail(cuda::kGatedNormTailDefault);
}

// Switched off, the launch leaves the job (the caller then launches the norm).
TEST(CudaGatedNormTail, SwitchedOffTheSsuLaunchLeavesTheNorm) {
  PARITY_REQUIRE_GPU();
  cuda::set_gated_norm_tail(false);
  const TailResult r = compare_tail({1, 1, true, false}, false);
  EXPECT_FALSE(r.taken[0] || r.taken[1]);
  cuda::set_gated_norm_tail(cuda::kGatedNormTailDefault);
}

TEST(CudaGatedNormTail, ComparisonSeesTheOtherNormOrder) {
  PARITY_REQUIRE_GPU();
  cuda::set_gated_norm_tail(true);
  const TailResult r = compare_tail({1, 1, false, false}, true);
  EXPECT_TRUE(r.taken[0]);
  EXPECT_EQ(r.y, "");
  EXPECT_NE(r.out, "") << "norm before the gate and after it round differently";
  cuda::set_gated_norm_tail(cuda::kGatedNormTailDefault);
}

}  // namespace
}  // namespace parity
