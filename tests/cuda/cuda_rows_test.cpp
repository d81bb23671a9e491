// Row kernels on the GPU against their CPU twins: conv1d bit for bit (same tap order, same SiLU),
// prefill then decode continuing from the conv state; RMSNorm and the gated norm within a few ulps
// (the GPU reduces in a tree of 256 threads, the CPU in 16 lanes).
#include <cmath>

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

}  // namespace
}  // namespace parity
