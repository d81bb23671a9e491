// Row kernels on the GPU against their CPU twins: conv1d bit for bit (same tap order, same SiLU),
// prefill then decode continuing from the conv state; RMSNorm and the gated norm within a few ulps
// (the GPU reduces in a tree of 256 threads, the CPU in 16 lanes).
#include <cmath>

#include "common/error.h"
#include "kernels/conv1d.h"
#include "kernels/norm.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/pass_plan.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

// K = 4 (Mamba2's) takes the kernel's register window; K = 10 its loop over the taps.
TEST(CudaConv1d, PrefillThenDecodeEqualTheCpuBitForBit) {
  PARITY_REQUIRE_GPU();
  for (const int K : {4, 10}) {
    const int ch = 200, n0 = 11, steps = 5;
    const std::vector<float> in = test::uniform(std::size_t(n0 + steps) * ch, 3);
    const std::vector<float> w = test::uniform(std::size_t(ch) * K, 4), bias = test::uniform(ch, 5);
    std::vector<float> cpu_state(std::size_t(K - 1) * ch, 0.0f), cpu_out(in.size());
    kernels::conv1d_causal(in.data(), n0, ch, w.data(), bias.data(), K, cpu_state.data(), true, cpu_out.data());
    for (int t = n0; t < n0 + steps; ++t)
      kernels::conv1d_causal(in.data() + std::size_t(t) * ch, 1, ch, w.data(), bias.data(), K, cpu_state.data(), true,
                             cpu_out.data() + std::size_t(t) * ch);

    cuda::DeviceBuffer<float> din, dw, db, dstate(std::size_t(K - 1) * ch), dout(in.size());
    din.upload(in);
    dw.upload(w);
    db.upload(bias);
    dstate.zero();
    cuda::DeviceBuffer<int32_t> ints;
    cuda::DeviceBuffer<int64_t> starts;
    const cuda::ScanGrid g;
    int64_t pos = 0;
    for (int n : {n0, 1, 1, 1, 1, 1}) {
      cuda::PassPlan plan({{0, pos, n}}, g);
      cuda::conv1d(din.data() + pos * ch, ch, ch, dw.data(), db.data(), K, dstate.data(), plan.upload(ints, starts),
                   true, dout.data() + pos * ch, nullptr);
      pos += n;
    }
    const std::vector<float> gpu = dout.download(in.size());
    EXPECT_TRUE(test::same_bits(gpu.data(), cpu_out.data(), gpu.size())) << "K = " << K;
    EXPECT_TRUE(test::same_bits(dstate.download(cpu_state.size()).data(), cpu_state.data(), cpu_state.size()))
        << "K = " << K;
  }
}

// One pass of several sequences, each continuing from its own carried state: the row tiles (16 rows a
// thread) against the CPU, sequence by sequence, and against the kernel of a thread a row. The lengths
// put sequence starts inside tiles, windows reaching back into the state (1-3 rows), and a tile cut by
// the pass's end. `boundaries`: false packs the same rows as one sequence, which must then differ (the
// companion: the comparison sees a window that crosses a sequence start).
std::vector<float> conv_pass_on_gpu(const std::vector<float>& in, const std::vector<float>& w,
                                    const std::vector<float>& bias, const std::vector<float>& state0,
                                    const std::vector<int>& lens, int ch, int K, bool tiles, bool boundaries,
                                    std::vector<float>* state_out) {
  cuda::DeviceBuffer<float> din, dw, db, dstate, dout(in.size());
  din.upload(in);
  dw.upload(w);
  db.upload(bias);
  dstate.upload(state0);
  std::vector<cuda::SeqSpan> spans;
  int rows = 0;
  for (std::size_t s = 0; s < lens.size(); ++s) {
    spans.push_back({static_cast<int>(s), 100, lens[s]});
    rows += lens[s];
  }
  if (!boundaries) spans = {{0, 100, rows}};
  cuda::DeviceBuffer<int32_t> ints;
  cuda::DeviceBuffer<int64_t> starts;
  cuda::PassPlan plan(spans, cuda::ScanGrid{});
  cuda::set_conv_row_tiles(tiles);
  cuda::conv1d(din.data(), ch, ch, dw.data(), db.data(), K, dstate.data(), plan.upload(ints, starts), true,
               dout.data(), nullptr);
  cuda::set_conv_row_tiles(true);
  if (state_out) *state_out = dstate.download(state0.size());
  return dout.download(in.size());
}

TEST(CudaConv1d, RowTilesOverManySequencesEqualTheCpuBitForBit) {
  PARITY_REQUIRE_GPU();
  const int K = 4, ch = 300;  // two channel blocks, the second partly empty
  const std::vector<int> lens = {1, 2, 3, 17, 40, 5, 16};
  int rows = 0;
  for (int n : lens) rows += n;
  const std::vector<float> in = test::uniform(std::size_t(rows) * ch, 21);
  const std::vector<float> w = test::uniform(std::size_t(ch) * K, 22), bias = test::uniform(ch, 23);
  const std::vector<float> state0 = test::uniform(lens.size() * (K - 1) * ch, 24);
  std::vector<float> cpu_out(in.size()), cpu_state = state0;
  int row = 0;
  for (std::size_t s = 0; s < lens.size(); ++s) {
    kernels::conv1d_causal(in.data() + std::size_t(row) * ch, lens[s], ch, w.data(), bias.data(), K,
                           cpu_state.data() + s * (K - 1) * ch, true, cpu_out.data() + std::size_t(row) * ch);
    row += lens[s];
  }
  std::vector<float> tile_state, row_state;
  const std::vector<float> tiled = conv_pass_on_gpu(in, w, bias, state0, lens, ch, K, true, true, &tile_state);
  const std::vector<float> by_row = conv_pass_on_gpu(in, w, bias, state0, lens, ch, K, false, true, &row_state);
  EXPECT_TRUE(test::same_bits(tiled.data(), cpu_out.data(), cpu_out.size()));
  EXPECT_TRUE(test::same_bits(by_row.data(), cpu_out.data(), cpu_out.size()));
  EXPECT_TRUE(test::same_bits(tile_state.data(), cpu_state.data(), cpu_state.size()));
  EXPECT_TRUE(test::same_bits(row_state.data(), cpu_state.data(), cpu_state.size()));
  const std::vector<float> one_seq = conv_pass_on_gpu(in, w, bias, state0, lens, ch, K, true, false, nullptr);
  EXPECT_FALSE(test::same_bits(one_seq.data(), cpu_out.data(), cpu_out.size()));
}

TEST(CudaNorms, RmsnormAndGatedNormAgreeWithTheCpu) {
  PARITY_REQUIRE_GPU();
  const int rows = 9, dim = 768, group = 192;
  const std::vector<float> x = test::uniform(std::size_t(rows) * dim, 6), z = test::uniform(x.size(), 7),
                           w = test::uniform(dim, 8, 0.5f, 1.5f);
  cuda::DeviceBuffer<float> dx, dz, dw, dout(x.size());
  dx.upload(x);
  dz.upload(z);
  dw.upload(w);
  std::vector<float> cpu(x.size());
  auto close = [&](const std::vector<float>& gpu) {
    for (std::size_t i = 0; i < gpu.size(); ++i)
      ASSERT_LE(std::fabs(gpu[i] - cpu[i]), 4e-6f * std::fabs(cpu[i]) + 1e-7f) << i;
  };
  kernels::rmsnorm(x.data(), rows, dim, w.data(), 1e-5f, cpu.data());
  cuda::rmsnorm(dx.data(), rows, dim, dw.data(), 1e-5f, dout.data(), nullptr);
  close(dout.download(x.size()));
  for (bool before : {false, true}) {
    kernels::gated_rmsnorm(x.data(), z.data(), rows, dim, group, w.data(), 1e-5f, before, cpu.data());
    cuda::gated_rmsnorm(dx.data(), dz.data(), dim, rows, dim, group, dw.data(), 1e-5f, before, dout.data(), nullptr);
    close(dout.download(x.size()));
  }
}

// A prefill pass's norms write only the bf16 copy its GEMM reads (out null): the copy, and add_rmsnorm's
// residual, must have the bits they have beside the fp32 output, in the held form and the loop form, gate
// before or after the norm. The companion: a different eps changes the copy, so the comparison sees a change.
std::vector<uint16_t> norm_copy(bool gated, bool before, bool with_out, bool loop, float eps,
                                std::vector<float>* resid) {
  const int rows = 5, dim = 768, group = 384;
  const std::vector<float> x = test::uniform(std::size_t(rows) * dim, 16), y = test::uniform(x.size(), 17),
                           z = test::uniform(x.size(), 18), w = test::uniform(dim, 19, 0.5f, 1.5f);
  cuda::DeviceBuffer<float> dx, dy, dz, dw, dout(x.size());
  cuda::DeviceBuffer<uint16_t> d16(x.size());
  dx.upload(x);
  dy.upload(y);
  dz.upload(z);
  dw.upload(w);
  cuda::norms_force_loop_form(loop);
  if (gated)
    cuda::gated_rmsnorm(dx.data(), dz.data(), dim, rows, dim, group, dw.data(), eps, before,
                        with_out ? dout.data() : nullptr, nullptr, d16.data());
  else
    cuda::add_rmsnorm(dx.data(), {dy.data()}, rows, dim, dw.data(), eps, with_out ? dout.data() : nullptr, d16.data(),
                      nullptr);
  cuda::norms_force_loop_form(false);
  if (resid) *resid = dx.download(x.size());
  return d16.download(x.size());
}

TEST(CudaNorms, TheBf16CopyAloneHasTheBitsOfTheCopyBesideTheOutput) {
  PARITY_REQUIRE_GPU();
  for (bool loop : {false, true})
    for (int kind = 0; kind < 3; ++kind) {  // add_rmsnorm, gated (gate first), gated (norm first)
      const bool gated = kind > 0, before = kind == 2;
      std::vector<float> r_both, r_alone;
      const auto both = norm_copy(gated, before, true, loop, 1e-5f, &r_both);
      const auto alone = norm_copy(gated, before, false, loop, 1e-5f, &r_alone);
      EXPECT_EQ(both, alone) << "loop " << loop << " kind " << kind;
      EXPECT_TRUE(test::same_bits(r_both, r_alone)) << "loop " << loop << " kind " << kind;
      EXPECT_NE(alone, norm_copy(gated, before, false, loop, 1e-1f, nullptr)) << "loop " << loop << " kind " << kind;
    }
  cuda::DeviceBuffer<float> dx(768), dw(768);
  EXPECT_THROW(cuda::add_rmsnorm(dx.data(), {}, 1, 768, dw.data(), 1e-5f, nullptr, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace parity
