// The fused launches of a decode step (issue 11) against the launches they replace, bit for bit on
// random inputs: add_rmsnorm against add_inplace / add_scaled_inplace + rmsnorm + the GEMM's bf16
// pre-pass; gated_rmsnorm's and swiglu's bf16 copies against the pre-pass; conv1d with dt and the state's advance
// in one launch against conv1d's two launches + ssd_dt; the gate's silu from the conv's launch against the
// gated norm's own; gemm_rounded against gemm. Each has a
// companion showing the comparison sees a changed input.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gemm_mma.h"
#include "kernels_cuda/moe.h"
#include "kernels_cuda/pass_plan.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

// The GEMM's own pre-pass (with_bf16_rows) over a [M][K] on the device: the rounding the fused
// kernels' bf16 copies must reproduce.
std::vector<uint16_t> prepass(const float* a, int M, int K) {
  std::vector<uint16_t> h(static_cast<std::size_t>(M) * K);
  cuda::with_bf16_rows(a, M, K, K, nullptr, [&](const void* a16) {
    cuda::cuda_check(cudaMemcpy(h.data(), a16, h.size() * 2, cudaMemcpyDeviceToHost), "pre-pass copy");
  });
  return h;
}

// Empty when equal; else the count and the first differing index with both bit patterns.
std::string bits16_difference(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, std::size_t cols) {
  if (a.size() != b.size()) return "sizes differ";
  std::size_t first = a.size(), count = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) {
      if (first == a.size()) first = i;
      ++count;
    }
  if (count == 0) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf, "%zu of %zu bf16 differ; first at row %zu, column %zu: 0x%04x vs 0x%04x", count,
                a.size(), first / cols, first % cols, unsigned(a[first]), unsigned(b[first]));
  return buf;
}

std::vector<float> down(const cuda::DeviceBuffer<float>& d, std::size_t n) { return d.download(n); }

struct NormCase {
  int rows, dim;
  bool scaled;
  bool two_branches = false;  // a hybrid layer's MoE + shared MLP outputs: add_inplace(y, y2) first
};

// add_rmsnorm's three outputs against the unfused launches'; `nudge` changes one element of the
// residual branch in the fused run only (the companion).
struct NormOutputs {
  std::string resid, out, out16;
};
NormOutputs compare_add_rmsnorm(const NormCase& c, bool with_add, bool nudge) {
  const std::size_t n = static_cast<std::size_t>(c.rows) * c.dim;
  const std::vector<float> x = test::uniform(n, 11, -3.0f, 3.0f), y = test::uniform(n, 12, -2.0f, 2.0f),
                           y2 = test::uniform(n, 14, -2.0f, 2.0f),
                           w = test::uniform(static_cast<std::size_t>(c.dim), 13, 0.5f, 1.5f);
  const float m = 0.22f, eps = 1e-5f;
  cuda::DeviceBuffer<float> x0, x1, dy, dy2, dw, o0(n), o1(n);
  cuda::DeviceBuffer<uint16_t> o16(n);
  x0.upload(x);
  x1.upload(x);
  dw.upload(w);
  dy.upload(y);
  dy2.upload(y2);
  // Unfused: the adds, the norm, the pre-pass.
  if (with_add && c.two_branches) cuda::add_inplace(dy.data(), dy2.data(), n, nullptr);
  if (with_add && c.scaled) cuda::add_scaled_inplace(x0.data(), dy.data(), m, n, nullptr);
  else if (with_add) cuda::add_inplace(x0.data(), dy.data(), n, nullptr);
  cuda::rmsnorm(x0.data(), c.rows, c.dim, dw.data(), eps, o0.data(), nullptr);
  const std::vector<uint16_t> ref16 = prepass(o0.data(), c.rows, c.dim);
  // Fused.
  std::vector<float> y1 = y;
  if (nudge) y1[n / 2] += 0.5f;  // not one ulp: the add could round it away
  dy.upload(y1);
  cuda::add_rmsnorm(x1.data(), {with_add ? dy.data() : nullptr, m, c.scaled, c.two_branches ? dy2.data() : nullptr},
                    c.rows, c.dim, dw.data(), eps, o1.data(), o16.data(), nullptr);
  cuda::cuda_check(cudaDeviceSynchronize(), "add_rmsnorm");
  NormOutputs r;
  r.resid = test::bit_difference(down(x1, n).data(), down(x0, n).data(), n, c.dim);
  r.out = test::bit_difference(down(o1, n).data(), down(o0, n).data(), n, c.dim);
  r.out16 = bits16_difference(o16.download(n), ref16, c.dim);
  return r;
}

TEST(CudaFused, AddRmsnormEqualsAddThenNormThenPrepassBitForBit) {
  PARITY_REQUIRE_GPU();
  for (const NormCase& c : {NormCase{1, 2560, false}, NormCase{7, 2560, false}, NormCase{64, 776, false},
                            NormCase{1, 1536, true}, NormCase{33, 1536, true}, NormCase{1, 1536, true, true},
                            NormCase{9, 4096, true, true}})
    for (bool with_add : {true, false}) {
      const std::string what = "rows " + std::to_string(c.rows) + " dim " + std::to_string(c.dim) +
                               (c.scaled ? " scaled" : "") + (c.two_branches ? " two branches" : "") +
                               (with_add ? " with add" : " no add");
      const NormOutputs r = compare_add_rmsnorm(c, with_add, false);
      EXPECT_EQ(r.resid, "") << what << ": residual";
      EXPECT_EQ(r.out, "") << what << ": normed fp32";
      EXPECT_EQ(r.out16, "") << what << ": normed bf16 copy";
    }
}

TEST(CudaFused, AddRmsnormComparisonSeesAChangedBranch) {
  PARITY_REQUIRE_GPU();
  for (bool scaled : {false, true}) {
    const NormOutputs r = compare_add_rmsnorm({4, 2560, scaled}, true, true);
    EXPECT_NE(r.resid, "") << "a changed element of the residual branch must show in the residual";
    EXPECT_NE(r.out, "") << "... and in the normed row";
  }
}

// gated_rmsnorm with its bf16 copy: fp32 output unchanged, copy = the pre-pass of it.
std::string compare_gated(int rows, int dim, int group, bool before, bool nudge) {
  const std::size_t n = static_cast<std::size_t>(rows) * dim;
  const std::vector<float> y = test::uniform(n, 21, -2.0f, 2.0f), z = test::uniform(2 * n, 22, -4.0f, 4.0f),
                           w = test::uniform(static_cast<std::size_t>(dim), 23, 0.5f, 1.5f);
  std::vector<float> y1 = y;
  if (nudge) y1[n - 1] += 0.5f;
  cuda::DeviceBuffer<float> dy0, dy1, dz, dw, o0(n), o1(n);
  cuda::DeviceBuffer<uint16_t> o16(n);
  dy0.upload(y);
  dy1.upload(y1);
  dz.upload(z);
  dw.upload(w);
  // z with row stride 2·dim, as the mixer's [z | xBC | dt] rows.
  cuda::gated_rmsnorm(dy0.data(), dz.data(), 2 * dim, rows, dim, group, dw.data(), 1e-5f, before, o0.data(), nullptr);
  const std::vector<uint16_t> ref16 = prepass(o0.data(), rows, dim);
  cuda::gated_rmsnorm(dy1.data(), dz.data(), 2 * dim, rows, dim, group, dw.data(), 1e-5f, before, o1.data(), nullptr,
                      o16.data());
  cuda::cuda_check(cudaDeviceSynchronize(), "gated_rmsnorm");
  const std::string f = test::bit_difference(down(o1, n).data(), down(o0, n).data(), n, dim);
  const std::string h = bits16_difference(o16.download(n), ref16, dim);
  return f.empty() && h.empty() ? "" : "fp32: " + f + "; bf16: " + h;
}

TEST(CudaFused, GatedNormBf16CopyIsThePrepassBitForBit) {
  PARITY_REQUIRE_GPU();
  for (bool before : {false, true}) {
    EXPECT_EQ(compare_gated(1, 5120, 5120, before, false), "") << "norm_before_gate " << before;
    EXPECT_EQ(compare_gated(9, 4096, 1024, before, false), "") << "norm_before_gate " << before;
  }
  EXPECT_NE(compare_gated(3, 5120, 5120, false, true), "") << "companion: a changed element of y must show";
}

// The gate's silu(z) evaluated by the conv's launch (GateJob) and handed to gated_rmsnorm as activated
// factors, against gated_rmsnorm on z itself: fp32 output and bf16 copy bit for bit, held and loop
// forms. `reactivate` (the companion) hands the factors over as raw z, so silu runs twice.
std::string compare_gate_in_conv(int rows, int dim, int group, bool before, bool loop_form, bool reactivate) {
  const int ch = 96, K = 4, ld = dim + ch;  // in rows: [z | xBC], as the mixer's
  const std::size_t n = static_cast<std::size_t>(rows) * dim;
  const std::vector<float> in = test::uniform(static_cast<std::size_t>(rows) * ld, 71, -4.0f, 4.0f);
  const std::vector<float> y = test::uniform(n, 72, -2.0f, 2.0f), w = test::uniform(dim, 73, 0.5f, 1.5f);
  const std::vector<float> cw = test::uniform(static_cast<std::size_t>(ch) * K, 74);
  std::vector<cuda::SeqSpan> spans;
  for (int r = 0; r < rows; ++r) spans.push_back({r, 40, 1});
  cuda::DeviceBuffer<float> din, dy, dw, dcw, st(static_cast<std::size_t>(rows) * (K - 1) * ch),
      xbc(static_cast<std::size_t>(rows) * ch), gate(n), o0(n), o1(n);
  cuda::DeviceBuffer<uint16_t> h0(n), h1(n);
  din.upload(in);
  dy.upload(y);
  dw.upload(w);
  dcw.upload(cw);
  st.zero();
  cuda::DeviceBuffer<int32_t> ints;
  cuda::DeviceBuffer<int64_t> starts;
  const cuda::PassSeqs p = cuda::PassPlan(spans, cuda::ScanGrid{}).upload(ints, starts);
  const cuda::GateJob job{din.data(), ld, dim, gate.data()};
  cuda::conv1d(din.data() + dim, ld, ch, dcw.data(), nullptr, K, st.data(), p, true, xbc.data(), nullptr, nullptr,
               &job);
  cuda::norms_force_loop_form(loop_form);
  cuda::gated_rmsnorm(dy.data(), din.data(), ld, rows, dim, group, dw.data(), 1e-5f, before, o0.data(), nullptr,
                      h0.data());
  cuda::gated_rmsnorm(dy.data(), gate.data(), dim, rows, dim, group, dw.data(), 1e-5f, before, o1.data(), nullptr,
                      h1.data(), !reactivate);
  cuda::norms_force_loop_form(false);
  cuda::cuda_check(cudaDeviceSynchronize(), "gate in conv");
  const std::string f = test::bit_difference(down(o1, n).data(), down(o0, n).data(), n, dim);
  const std::string h = bits16_difference(h1.download(n), h0.download(n), dim);
  return f.empty() && h.empty() ? "" : "fp32: " + f + "; bf16: " + h;
}

TEST(CudaFused, GateEvaluatedByTheConvGivesTheGatedNormsBits) {
  PARITY_REQUIRE_GPU();
  for (bool before : {false, true})
    for (bool loop_form : {false, true}) {
      const std::string what = "norm_before_gate " + std::to_string(before) + ", loop form " + std::to_string(loop_form);
      EXPECT_EQ(compare_gate_in_conv(1, 5120, 5120, before, loop_form, false), "") << what;
      EXPECT_EQ(compare_gate_in_conv(7, 4096, 1024, before, loop_form, false), "") << what;
    }
  EXPECT_NE(compare_gate_in_conv(2, 5120, 5120, false, false, true), "")
      << "companion: factors read as raw z (silu twice) must change the output";
}

// swiglu's bf16 copy (the hybrid's shared MLP: shared_out reads it) is the pre-pass of its output.
TEST(CudaFused, SwigluBf16CopyIsThePrepassBitForBit) {
  PARITY_REQUIRE_GPU();
  for (int rows : {1, 5, 64}) {
    const int F = 1024;
    const std::size_t n = static_cast<std::size_t>(rows) * F;
    cuda::DeviceBuffer<float> gu, o0(n), o1(n);
    cuda::DeviceBuffer<uint16_t> o16(n);
    gu.upload(test::uniform(2 * n, 61, -4.0f, 4.0f));
    cuda::swiglu(gu.data(), rows, F, o0.data(), nullptr);
    const std::vector<uint16_t> ref16 = prepass(o0.data(), rows, F);
    cuda::swiglu(gu.data(), rows, F, o1.data(), nullptr, o16.data());
    cuda::cuda_check(cudaDeviceSynchronize(), "swiglu");
    EXPECT_EQ(test::bit_difference(down(o1, n).data(), down(o0, n).data(), n, F), "") << rows << " rows";
    EXPECT_EQ(bits16_difference(o16.download(n), ref16, F), "") << rows << " rows";
  }
}

// conv1d with a DtJob (and, for one-row sequences, the state's advance) in one launch against the
// two conv launches and ssd_dt. one_row_each is switched off in the reference's copy of the pass.
struct ConvResult {
  std::string out, state, dt;
};
ConvResult compare_conv(const std::vector<int>& lengths, bool silu, bool nudge) {
  const int ch = 5376, K = 4, H = 80, ld = ch + H + 64;  // in rows: [xBC | dt | spare], as the mixer's
  int rows = 0;
  for (int n : lengths) rows += n;
  const int slots = static_cast<int>(lengths.size()) + 2;
  const std::vector<float> in = test::uniform(static_cast<std::size_t>(rows) * ld, 31, -2.0f, 2.0f);
  const std::vector<float> w = test::uniform(static_cast<std::size_t>(ch) * K, 32), b = test::uniform(ch, 33);
  const std::vector<float> dtb = test::uniform(H, 34, -3.0f, 1.0f);
  std::vector<float> state = test::uniform(static_cast<std::size_t>(slots) * (K - 1) * ch, 35);
  std::vector<cuda::SeqSpan> spans;
  for (std::size_t s = 0; s < lengths.size(); ++s) spans.push_back({static_cast<int>(s) * 2 % slots, 40, lengths[s]});
  cuda::DeviceBuffer<float> din, dw, db, ddtb, st0, st1, o0(static_cast<std::size_t>(rows) * ch),
      o1(static_cast<std::size_t>(rows) * ch), dt0(static_cast<std::size_t>(rows) * H), dt1(dt0.size());
  din.upload(in);
  dw.upload(w);
  db.upload(b);
  ddtb.upload(dtb);
  st0.upload(state);
  if (nudge) state[(K - 2) * ch + 7] += 0.5f;  // slot 0, last tap
  st1.upload(state);
  cuda::DeviceBuffer<int32_t> ints;
  cuda::DeviceBuffer<int64_t> starts;
  const cuda::PassSeqs p = cuda::PassPlan(spans, cuda::ScanGrid{}).upload(ints, starts);
  cuda::PassSeqs unfused = p;
  unfused.one_row_each = false;
  const float lo = 0.001f, hi = 0.3f;
  cuda::conv1d(din.data(), ld, ch, dw.data(), db.data(), K, st0.data(), unfused, silu, o0.data(), nullptr);
  cuda::ssd_dt(din.data() + ch, ld, rows, H, ddtb.data(), lo, hi, dt0.data(), nullptr);
  const cuda::DtJob job{din.data() + ch, ld, H, ddtb.data(), lo, hi, dt1.data()};
  cuda::conv1d(din.data(), ld, ch, dw.data(), db.data(), K, st1.data(), p, silu, o1.data(), nullptr, &job);
  cuda::cuda_check(cudaDeviceSynchronize(), "conv1d");
  ConvResult r;
  r.out = test::bit_difference(down(o1, o1.size()).data(), down(o0, o0.size()).data(), o0.size(), ch);
  r.state = test::bit_difference(down(st1, state.size()).data(), down(st0, state.size()).data(), state.size(), ch);
  r.dt = test::bit_difference(down(dt1, dt0.size()).data(), down(dt0, dt0.size()).data(), dt0.size(), H);
  return r;
}

TEST(CudaFused, ConvWithDtAndStateInOneLaunchEqualsTheSeparateLaunches) {
  PARITY_REQUIRE_GPU();
  const std::vector<std::vector<int>> passes = {{1}, {1, 1, 1, 1, 1}, {3, 1, 17}, {64}};
  for (const auto& lengths : passes)
    for (bool silu : {true, false}) {
      const ConvResult r = compare_conv(lengths, silu, false);
      const std::string what = std::to_string(lengths.size()) + " sequences, first of " + std::to_string(lengths[0]) +
                               " rows, silu " + std::to_string(silu);
      EXPECT_EQ(r.out, "") << what << ": conv output";
      EXPECT_EQ(r.state, "") << what << ": conv state";
      EXPECT_EQ(r.dt, "") << what << ": dt";
    }
}

TEST(CudaFused, ConvComparisonSeesAChangedState) {
  PARITY_REQUIRE_GPU();
  const ConvResult r = compare_conv({1, 1}, false, true);
  EXPECT_NE(r.out, "") << "the nudged state element feeds slot 0's output";
  EXPECT_NE(r.state, "") << "and shifts into its new state";
}

// gemm_rounded with a16 = the pre-pass of A gives gemm's bits for every row count gemm() routes
// differently (few-rows, swap-AB tiles, mma and wgmma tiles). The companion hands a nudged copy to
// the mma tiles through with_rounded_rows (the way gemm_rounded hands it to every kernel that would
// round A itself): the row that reads it changes, so the copy is what such a kernel reads. (Kernels
// that round A on chip, as a few-rows kernel may, read A and ignore the copy: the same bits.)
std::string compare_gemm(int M, int K, int N, bool nudge_a16) {
  const std::vector<float> a = test::uniform(static_cast<std::size_t>(M) * K, 41), bias = test::uniform(N, 42);
  const std::vector<uint16_t> w = test::to_bf16(test::uniform(static_cast<std::size_t>(cuda::padded_rows(N)) * K, 43));
  cuda::DeviceBuffer<float> da, db, c0(static_cast<std::size_t>(M) * N), c1(c0.size());
  cuda::DeviceBuffer<uint16_t> dw, a16;
  da.upload(a);
  db.upload(bias);
  dw.upload(w);
  std::vector<uint16_t> h16 = prepass(da.data(), M, K);
  if (nudge_a16) h16[static_cast<std::size_t>(M - 1) * K + 5] ^= 1;  // last row, one bf16 ulp
  a16.upload(h16);
  const int wr = cuda::padded_rows(N);
  if (nudge_a16) {
    cuda::gemm_bf16_mma(da.data(), M, K, K, dw.data(), wr, N, db.data(), c0.data(), N, nullptr);
    cuda::with_rounded_rows(da.data(), M, K, a16.data(), [&] {
      cuda::gemm_bf16_mma(da.data(), M, K, K, dw.data(), wr, N, db.data(), c1.data(), N, nullptr);
    });
  } else {
    cuda::gemm(da.data(), M, K, K, dw.data(), cuda::WeightType::BF16, N, db.data(), c0.data(), N, nullptr, wr);
    cuda::gemm_rounded(da.data(), a16.data(), M, K, K, dw.data(), cuda::WeightType::BF16, N, db.data(), c1.data(), N,
                       nullptr, wr);
  }
  cuda::cuda_check(cudaDeviceSynchronize(), "gemm");
  return test::bit_difference(down(c1, c0.size()).data(), down(c0, c0.size()).data(), c0.size(), N);
}

TEST(CudaFused, GemmRoundedGivesGemmsBitsForEveryRowCount) {
  PARITY_REQUIRE_GPU();
  for (int M : {1, 5, 16, 33, 64, 200, 256, 300})
    EXPECT_EQ(compare_gemm(M, 2560, 1040, false), "") << "M = " << M;
}

TEST(CudaFused, ARoundedCopyIsWhatTheGemmReads) {
  PARITY_REQUIRE_GPU();
  for (int M : {1, 64})
    EXPECT_NE(compare_gemm(M, 2560, 1040, true), "") << "M = " << M << ": a nudged copy left the output alone";
}

// The norms' register (held) form against their loop form, which the unfused build ran for every width.
struct NormRun {
  std::vector<float> resid, out, gated;
};
NormRun run_norms(int rows, int dim, bool scaled, bool before, bool loop, bool nudge) {
  const std::size_t n = static_cast<std::size_t>(rows) * dim;
  std::vector<float> x = test::uniform(n, 51, -3.0f, 3.0f);
  if (nudge) x[n - 1] += 0.5f;
  const std::vector<float> y = test::uniform(n, 52), z = test::uniform(n, 53, -4.0f, 4.0f),
                           w = test::uniform(static_cast<std::size_t>(dim), 54, 0.5f, 1.5f);
  cuda::DeviceBuffer<float> dx, dy, dz, dw, o(n), g(n);
  cuda::DeviceBuffer<uint16_t> o16(n);
  dx.upload(x);
  dy.upload(y);
  dz.upload(z);
  dw.upload(w);
  cuda::norms_force_loop_form(loop);
  cuda::add_rmsnorm(dx.data(), {dy.data(), 0.37f, scaled}, rows, dim, dw.data(), 1e-6f, o.data(), o16.data(), nullptr);
  cuda::gated_rmsnorm(dx.data(), dz.data(), dim, rows, dim, dim, dw.data(), 1e-6f, before, g.data(), nullptr);
  cuda::cuda_check(cudaDeviceSynchronize(), "norms");
  cuda::norms_force_loop_form(false);
  return {down(dx, n), down(o, n), down(g, n)};
}

TEST(CudaFused, NormsHeldInRegistersEqualTheLoopFormBitForBit) {
  PARITY_REQUIRE_GPU();
  for (int dim : {256, 1000, 2560, 5120, 6144})
    for (bool scaled : {false, true}) {
      const bool before = scaled;  // both gate orders, over the widths
      const NormRun a = run_norms(5, dim, scaled, before, false, false);
      const NormRun b = run_norms(5, dim, scaled, before, true, false);
      const std::string what =
          "dim " + std::to_string(dim) + (scaled ? " scaled add, norm before gate" : " add, gate before norm");
      EXPECT_EQ(test::bit_difference(a.resid.data(), b.resid.data(), a.resid.size(), dim), "") << what;
      EXPECT_EQ(test::bit_difference(a.out.data(), b.out.data(), a.out.size(), dim), "") << what;
      EXPECT_EQ(test::bit_difference(a.gated.data(), b.gated.data(), a.gated.size(), dim), "") << what;
    }
  const NormRun a = run_norms(2, 2560, false, false, false, false), b = run_norms(2, 2560, false, false, true, true);
  EXPECT_NE(test::bit_difference(a.out.data(), b.out.data(), a.out.size(), 2560), "") << "companion: a nudged input";
}

}  // namespace
}  // namespace parity
