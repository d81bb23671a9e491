// The decode GEMMs' early start (ops.h's GemmEarly: launched programmatically, each block's first ring
// of weight boxes requested before griddepcontrol.wait, an L2 prefetch of the next ring, an early
// release of the next kernel, the norms' release before their wait) against the mma tiles, bit for
// bit. A is written by a kernel that lets its successor start at once and writes A only ~100 µs later
// (late_writer.h), so a GEMM that read any of A before its wait, or stored C from an old A, would
// give the old A's bits: every case must give the bits of the mma tiles on the new A, eagerly and
// from a CUDA graph (where the launches become programmatic edges), for every swap-AB variant, every
// row tile it picks, two boxes of K (fewer than the ring's stages) and the model's shapes, through
// gemm() as the models call it (gemm_rounded: the norm's bf16 copy, no pre-pass launch) and the
// 8-column decode kernel (lm_head's shape). The companion shows the setting can fail: from a graph, a
// kernel launched the same way that reads A without waiting sees the old A, whose product has other bits
// (eagerly the H200 did not start the dependent early: the eager passes check correctness only).
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/early_start.h"
#include "kernels_cuda/gemm_gemv.h"
#include "kernels_cuda/gemm_mma.h"
#include "kernels_cuda/gemm_swap_ab.h"
#include "kernels_cuda/graph.h"
#include "kernels_cuda/ops.h"
#include "tests/cuda/decode_gemm_problem.h"
#include "tests/cuda/gpu_test_support.h"
#include "tests/cuda/late_writer.h"

namespace parity {
namespace {

using Shape = test::GemmShape;
constexpr int kRows = 256;
constexpr double kLateUs = 100.0, kBusyUs = 200.0;

const unsigned kW = cuda::kGemmEarlyWeights, kR = cuda::kGemmEarlyRelease, kL2 = cuda::kGemmEarlyL2,
               kNorms = cuda::kGemmEarlyNorms, kNext = cuda::kGemmEarlyNextL2, kLag = cuda::kGemmMmaLag,
               kPark = cuda::kGemmEarlyPark, kRest = cuda::kGemmEarlyL2Rest;
const unsigned kFlagSets[] = {0u,
                              kW,
                              kW | kR,
                              kW | kR | kL2,
                              kR | kL2,
                              kW | kR | kL2 | kNorms,
                              kW | kR | kNext,
                              kW | kR | kL2 | kNorms | kNext | kLag,
                              kW | kR | kPark,
                              kW | kR | kPark | kRest,
                              kW | kR | kL2 | kNorms | kPark | kRest | kLag};

std::string flags_name(unsigned f) {
  if (f == 0) return "off";
  std::string s;
  if (f & kW) s += "weights+";
  if (f & kR) s += "release+";
  if (f & kL2) s += "l2+";
  if (f & kNorms) s += "norms+";
  if (f & kNext) s += "next-l2+";
  if (f & kLag) s += "lag+";
  if (f & kPark) s += "park+";
  if (f & kRest) s += "l2-rest+";
  s.pop_back();
  return s;
}

// The GEMM's operands: W, bias and the new A (src) from decode_gemm_problem.h; a and a16, the A the
// GEMM reads, hold an old A until late_write copies src over them.
struct Late : test::GemmProblem {
  cuda::DeviceBuffer<float> a_read;
  cuda::DeviceBuffer<uint16_t> a16;
  std::vector<float> stale_host;
  std::vector<uint16_t> stale16;
  cudaStream_t s = nullptr;
  explicit Late(Shape sh, uint64_t seed) : GemmProblem(sh, kRows, seed) {
    stale_host = test::uniform(std::size_t(kRows) * sh.K, seed + 7);
    stale16 = test::to_bf16(stale_host);
    a_read.resize(stale_host.size());
    a16.resize(stale_host.size());
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  }
  ~Late() { cudaStreamDestroy(s); }
  // a and a16 back to the old A (synchronously, outside any graph).
  void reset() {
    a_read.upload(stale_host);
    a16.upload(stale16);
  }
  // The mma tiles on the new A (with the bias).
  std::vector<float> reference(int M) { return mma(M, true); }
  // late_write then `gemm` on stream s, eagerly or captured and replayed; C as it then is.
  template <typename Gemm>
  std::vector<float> run(int M, bool graph, const Gemm& gemm) {
    reset();
    c.zero(s);
    // The busy kernel first: the host queues late_write and the GEMM while it runs, so the GEMM is
    // queued when late_write lets it start (eagerly, a dependent queued after its primary's release was
    // seen to start only at the primary's end: session 11's first run).
    auto pass = [&] {
      cuda::busy_wait(kBusyUs, s);
      test::late_write(a.data(), a_read.data(), a16.data(), std::size_t(M) * sh.K, kLateUs, s);
      gemm();
    };
    if (graph) {
      const cuda::GraphExec g = cuda::capture_graph(s, pass);
      g.launch(s);
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    } else {
      pass();
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    }
    return c.download(out(M));
  }
};

std::string where(const Shape& sh, int M, const std::string& path, unsigned flags, bool graph) {
  return test::name(sh) + " M=" + std::to_string(M) + " " + path + " early=" + flags_name(flags) +
         (graph ? " (graph)" : " (eager)") + ": ";
}

TEST(CudaGemmEarly, EverySwapAbVariantGivesTheBitsOfTheAWrittenBeforeIt) {
  PARITY_REQUIRE_GPU();
  cuda::set_programmatic_launch(true);
  for (const Shape& sh : {Shape{2560, 10576, 10576}, Shape{5120, 2560, 2560}, Shape{96, 200, 203}}) {
    Late pr(sh, 300);
    for (int M : {1, 16, 64, 256}) {
      const std::vector<float> ref = pr.reference(M);
      for (int v = 0; v < cuda::gemm_swap_ab_variants(); ++v)
        for (unsigned flags : kFlagSets)
          for (bool graph : {false, true}) {
            // kNext: the blocks' tails ask L2 for W itself (any device bytes would do).
            const std::vector<float> got = pr.run(M, graph, [&] {
              cuda::with_l2_prefetch(pr.w.data(), std::size_t(sh.N) * sh.K * 2, [&] {
                cuda::with_rounded_rows(pr.a_read.data(), M, sh.K, pr.a16.data(), [&] {
                  cuda::gemm_bf16_swap_ab(pr.a_read.data(), M, sh.K, sh.K, pr.w.data(), sh.N, pr.bias.data(),
                                          pr.c.data(), sh.ldc, pr.s, v, static_cast<int>(flags));
                });
              });
            });
            const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
            ASSERT_TRUE(d.empty()) << where(sh, M, std::string("swap-AB ") + cuda::gemm_swap_ab_variant_name(v),
                                            flags, graph)
                                   << d;
          }
    }
  }
}

// gemm() as the models call it, under the switch (set_gemm_early): the swap-AB kernels at in_proj's and
// out_proj's shapes, the 8-column decode kernel at lm_head's (M <= 4); with programmatic launches off the
// flags must not matter either.
TEST(CudaGemmEarly, GemmUnderTheSwitchGivesTheBitsOfTheAWrittenBeforeIt) {
  PARITY_REQUIRE_GPU();
  for (const Shape& sh : {Shape{2560, 10576, 10576}, Shape{5120, 2560, 2560}, Shape{2560, 50288, 50288}}) {
    Late pr(sh, 310);
    for (int M : {1, 3, 64}) {
      const std::vector<float> ref = pr.reference(M);
      for (bool pdl : {true, false})
        for (unsigned flags : kFlagSets)
          for (bool graph : {false, true}) {
            cuda::set_programmatic_launch(pdl);
            cuda::set_gemm_early(flags);
            const std::vector<float> got = pr.run(M, graph, [&] {
              cuda::with_l2_prefetch(pr.w.data(), std::size_t(sh.N) * sh.K * 2, [&] {
                cuda::gemm_rounded(pr.a_read.data(), pr.a16.data(), M, sh.K, sh.K, pr.w.data(),
                                   cuda::WeightType::BF16, sh.N, pr.bias.data(), pr.c.data(), sh.ldc, pr.s, sh.N);
              });
            });
            const std::string d = test::bit_difference(got.data(), ref.data(), got.size(), std::size_t(sh.ldc));
            EXPECT_TRUE(d.empty()) << where(sh, M, pdl ? "gemm()" : "gemm(), programmatic off", flags, graph) << d;
          }
    }
  }
  cuda::set_programmatic_launch(true);
  cuda::set_gemm_early(cuda::kGemmEarlyDefault);
}

// The companion: the set-up does expose a read before the wait. From a CUDA graph (how the models run a
// decode step), a kernel launched programmatically after late_write that copies A without waiting sees the
// old A, and the GEMM on the old A has other bits than the reference the tests above hold every early GEMM
// to. Deterministic: late_write holds its write until the copy's blocks have counted themselves done (or
// kHandshakeUs pass, when the copy could not start beside it), so the copy sees the old A whenever the
// dependent is scheduled while late_write runs, however long that takes, and never otherwise. Eagerly (no
// graph) the H200 (driver 580) was seen to start the dependent only when late_write had ended (session 11,
// twice): the eager result is printed, not asserted, so the eager halves of the tests above show only that
// the early GEMMs are correct in eager passes, not that they overlapped.
TEST(CudaGemmEarly, CompanionAReadBeforeTheWaitSeesTheOldA) {
  PARITY_REQUIRE_GPU();
  constexpr double kHandshakeUs = 20000.0;
  cuda::set_programmatic_launch(true);
  const Shape sh{2560, 10576, 10576};
  const int M = 16;
  Late pr(sh, 320);
  const std::size_t n = std::size_t(M) * sh.K;
  const std::vector<uint16_t>& old16 = pr.stale16;
  const std::vector<uint16_t> new16 = test::to_bf16(pr.a.download(n));
  cuda::DeviceBuffer<uint16_t> seen(n);
  cuda::DeviceBuffer<unsigned> done(1);
  for (bool graph : {true, false}) {
    pr.reset();
    auto pass = [&] {
      test::late_write(pr.a.data(), pr.a_read.data(), pr.a16.data(), n, kHandshakeUs, pr.s, done.data(),
                       test::kCopyBlocks);
      test::copy_without_waiting(pr.a16.data(), seen.data(), n, done.data(), pr.s);
    };
    done.zero(pr.s);
    if (graph) {
      const cuda::GraphExec g = cuda::capture_graph(pr.s, pass);
      g.launch(pr.s);
    } else {
      pass();
    }
    ASSERT_EQ(cudaStreamSynchronize(pr.s), cudaSuccess);
    const std::vector<uint16_t> got = seen.download(n);
    std::size_t old_count = 0, new_count = 0, differ = 0;
    for (std::size_t i = 0; i < n; ++i) {
      differ += old16[i] != new16[i];
      old_count += got[i] == old16[i] && old16[i] != new16[i];
      new_count += got[i] == new16[i] && old16[i] != new16[i];
    }
    const std::string what = std::string(graph ? "graph" : "eager") + ": the copy saw " + std::to_string(old_count) +
                             " old and " + std::to_string(new_count) + " new elements of the " +
                             std::to_string(differ) + " that differ";
    ASSERT_GT(differ, n / 2) << "the old and the new A should differ almost everywhere";
    if (graph) EXPECT_EQ(old_count, differ) << what << " (a read before the wait should see the old A)";
    else std::cout << "[ info     ] " << what << "\n";
  }
  // And the check would see it: the product of the old A is not the reference.
  pr.a_read.upload(pr.stale_host);
  pr.c.zero();
  cuda::gemm_bf16_mma_tile(0, pr.a_read.data(), M, sh.K, sh.K, pr.w.data(), sh.N, sh.N, pr.bias.data(), pr.c.data(),
                           sh.ldc, nullptr);
  const std::vector<float> old_product = pr.c.download(pr.out(M)), ref = pr.reference(M);
  EXPECT_FALSE(test::bit_difference(old_product.data(), ref.data(), ref.size()).empty());
}

}  // namespace
}  // namespace parity
