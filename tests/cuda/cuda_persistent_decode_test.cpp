// The persistent decode step (kernels_cuda/persistent_decode.h): a batch-1 decode replayed from a graph
// whose layers are one persistent kernel gives every row the bits of the chain of launches run eagerly,
// on builtin:tiny, builtin:tiny-g2 (two groups, biases) and builtin:mamba2-130m, plain and exact, with an
// fp32 and a bf16 state; the step is really taken (the replay counter); exact mode's rows equal a
// single-shot prefill's. Companions: plain mode's rows differ from its prefill, a changed token shows in
// the step's rows (the comparison can fail), and passes the step does not run (more than one sequence,
// fp32 weights) take the launches.
#include <cstdlib>
#include <exception>
#include <string>
#include <tuple>
#include <vector>

#include "backend_cuda/backend.h"
#include "backend_cuda/decode_graphs.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/persistent_decode.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "tests/cuda/gpu_test_support.h"
#include "tests/cuda/model_schedule.h"
#include "tests/cuda/named_barriers.h"

namespace parity {
namespace {

std::unique_ptr<model::Model> gpu_model(const std::string& spec) {
  return backend_cuda::load_model(model::open_checkpoint(spec), {});
}

// Switches the step on for a test's scope (by default with its L2 requests: the mode that does the most).
struct PersistentOn {
  explicit PersistentOn(int mode = cuda::kPersistentNextL2) { cuda::set_persistent_decode(mode); }
  ~PersistentOn() { cuda::set_persistent_decode(cuda::kPersistentDecodeDefault); }
};

const int kSteps = test::pick(12, 2);

test::ScheduleRun run(const model::Model& m, bool exact, int batch, DType state, int poke_seq = -1) {
  test::Schedule sc;
  sc.batch = batch;
  sc.steps = kSteps;
  sc.prompt_len = [](int s) { return 7 + 5 * s; };
  sc.token = [](int seq, int i, int V) { return static_cast<int32_t>((seq * 41 + i * 13 + 5) % V); };
  sc.poke_seq = poke_seq;
  sc.poke_step = 1;
  sc.state_dtype = state;
  return test::run_schedule(m, exact, sc);
}

int rows_differing(const test::ScheduleRun& a, const test::ScheduleRun& b, int batch, int V) {
  int bad = 0;
  for (int k = 0; k < kSteps; ++k)
    for (int s = 0; s < batch; ++s)
      bad += !test::same_bits(a.row(k, s, V), b.row(k, s, V), static_cast<std::size_t>(V));
  return bad;
}

TEST(CudaPersistentDecode, Batch1StepsEqualTheLaunchesBitForBit) {
  PARITY_REQUIRE_GPU();
  for (const char* spec : test::sweep<const char*>({"builtin:tiny", "builtin:tiny-g2", "builtin:mamba2-130m"},
                                                   {"builtin:tiny-g2"})) {
    auto m = gpu_model(spec);
    const int V = m->vocab_size();
    int i = 0;
    for (bool exact : {false, true})
      for (bool bf16 : test::bf16_sweep(i++)) {
        const DType state = bf16 ? DType::BF16 : DType::F32;
        backend_cuda::set_enforce_eager(*m, true);
        const test::ScheduleRun eager = run(*m, exact, 1, state);
        backend_cuda::set_enforce_eager(*m, false);
        // The flags' L2 hints and trace take other instructions and addresses, never other values.
        constexpr int kAllFlags = cuda::kPersistentNextL2 | cuda::kPersistentSmallL2 | cuda::kPersistentEvictFirst |
                                  cuda::kPersistentTrace;
        for (int mode : test::sweep<int>({cuda::kPersistentRing, cuda::kPersistentNextL2, kAllFlags},
                                         {cuda::kPersistentNextL2})) {
          const std::string what = std::string(spec) + (exact ? " exact" : " plain") + (bf16 ? " bf16" : " fp32") +
                                   " state, mode " + std::to_string(mode);
          const PersistentOn on(mode);
          const backend_cuda::CudaGraphStats s0 = backend_cuda::cuda_graph_stats(*m);
          const test::ScheduleRun step = run(*m, exact, 1, state);
          const backend_cuda::CudaGraphStats s1 = backend_cuda::cuda_graph_stats(*m);
          EXPECT_EQ(s1.persistent_replays - s0.persistent_replays, kSteps) << what << ": every step should take it";
          EXPECT_EQ(rows_differing(eager, step, 1, V), 0) << what << ": rows whose bits differ from the launches'";
          EXPECT_TRUE(test::same_bits(eager.prefill.data(), step.prefill.data(), eager.prefill.size())) << what;
        }
      }
  }
}

// Exact mode's promise through the step: its decode rows are the single-shot prefill's rows at their
// positions (the steps cross cell boundaries: 12 steps from a 7-token prompt on the GPU's 16-row cell,
// every head's fold at its own row). Plain mode is the companion: its decode rows differ from its prefill.
// It runs with its default bf16 state: with an fp32 one, plain decode and a prefill inside its first
// 256-row cell are the same row-by-row recurrence, and the bits agree (seen on an H200, session 28).
TEST(CudaPersistentDecode, ExactStepsEqualASingleShotPrefillAndPlainOnesDoNot) {
  PARITY_REQUIRE_GPU();
  auto m = gpu_model("builtin:tiny");
  const int V = m->vocab_size();
  const PersistentOn on;
  for (bool exact : {true, false}) {
    const model::ScanMode mode = exact ? model::ScanMode::Exact : model::ScanMode::Plain;
    const int64_t taken = backend_cuda::cuda_graph_stats(*m).persistent_replays;
    const test::ScheduleRun g = run(*m, exact, 1, exact ? DType::F32 : DType::BF16);
    EXPECT_EQ(backend_cuda::cuda_graph_stats(*m).persistent_replays - taken, kSteps) << (exact ? "exact" : "plain");
    const std::vector<float> ref = model::score_all_rows(*m, g.fed[0], model::default_numerics(*m, mode));
    int bad = 0;
    for (int k = 0; k < kSteps; ++k) {
      const std::size_t pos = static_cast<std::size_t>(g.prompt_len[0] + k);
      bad += !test::same_bits(g.row(k, 0, V), ref.data() + pos * V, static_cast<std::size_t>(V));
    }
    if (exact) EXPECT_EQ(bad, 0) << "exact rows differing from the prefill, of " << kSteps;
    else EXPECT_GT(bad, 0) << "companion: plain mode's decode rows should differ from its prefill";
  }
}

// Companion: the comparison above sees a change. A token moved by one at step 1 leaves step 0's row
// alone and changes every row after it.
TEST(CudaPersistentDecode, AChangedTokenShowsInTheStepsRows) {
  PARITY_REQUIRE_GPU();
  auto m = gpu_model("builtin:tiny");
  const int V = m->vocab_size();
  const PersistentOn on;
  const int64_t taken = backend_cuda::cuda_graph_stats(*m).persistent_replays;
  const test::ScheduleRun a = run(*m, false, 1, DType::F32);
  const test::ScheduleRun b = run(*m, false, 1, DType::F32, /*poke_seq=*/0);
  EXPECT_EQ(backend_cuda::cuda_graph_stats(*m).persistent_replays - taken, 2 * kSteps);
  for (int k = 0; k < kSteps; ++k) {
    const bool same = test::same_bits(a.row(k, 0, V), b.row(k, 0, V), static_cast<std::size_t>(V));
    if (k >= 1) EXPECT_FALSE(same) << "step " << k << ": the changed token left no trace";
    else EXPECT_TRUE(same) << "step 0 came before the change";
  }
}

// Batches above one and fp32 weights (--dtype float32) take the launches (the step multiplies bf16 weights
// for one sequence), with their own bits unchanged by the switch.
TEST(CudaPersistentDecode, OtherPassesTakeTheLaunches) {
  PARITY_REQUIRE_GPU();
  backend_cuda::CudaModelOptions fp32;
  fp32.fp32 = true;
  for (const auto& [exact, batch, f32] : std::vector<std::tuple<bool, int, bool>>{{true, 3, false}, {false, 3, false},
                                                                                 {true, 1, true}, {false, 1, true}}) {
    auto m = backend_cuda::load_model(model::open_checkpoint("builtin:tiny"),
                                      f32 ? fp32 : backend_cuda::CudaModelOptions{});
    const int V = m->vocab_size();
    const std::string what = std::string(exact ? "exact" : "plain") + " batch " + std::to_string(batch) +
                             (f32 ? " fp32 weights" : "");
    const test::ScheduleRun off = run(*m, exact, batch, DType::F32);
    const PersistentOn on;
    const backend_cuda::CudaGraphStats s0 = backend_cuda::cuda_graph_stats(*m);
    const test::ScheduleRun with = run(*m, exact, batch, DType::F32);
    const backend_cuda::CudaGraphStats s1 = backend_cuda::cuda_graph_stats(*m);
    EXPECT_EQ(s1.persistent_replays, s0.persistent_replays) << what;
    EXPECT_EQ(s1.replays - s0.replays, kSteps) << what << ": still replayed from graphs";
    EXPECT_EQ(rows_differing(off, with, batch, V), 0) << what;
  }
}

// The environment's switch: a bad value is refused by name before any device is touched; a good one sets
// the mode.
TEST(CudaPersistentDecode, TheEnvironmentSwitchIsCheckedAndTaken) {
  ::setenv("PARITY_CUDA_PERSISTENT_DECODE", "sideways", 1);
  try {
    gpu_model("builtin:tiny");
    ADD_FAILURE() << "a bad PARITY_CUDA_PERSISTENT_DECODE was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("PARITY_CUDA_PERSISTENT_DECODE must be off, ring or next-l2, not 'sideways'"),
              std::string::npos)
        << e.what();
  }
  ::setenv("PARITY_CUDA_PERSISTENT_DECODE", "ring", 1);
  try {
    gpu_model("builtin:tiny");  // without a device it throws after taking the mode
  } catch (const std::exception&) {
  }
  EXPECT_EQ(cuda::persistent_decode(), cuda::kPersistentRing);
  ::unsetenv("PARITY_CUDA_PERSISTENT_DECODE");
  cuda::set_persistent_decode(cuda::kPersistentDecodeDefault);
}

// Shapes the step cannot run are named before anything touches the device.
TEST(CudaPersistentDecode, UnfitShapesSayWhy) {
  cuda::PersistentDecodeShape s;
  s.layers = 2;
  s.hidden = 64;
  s.heads = 4;
  s.head_dim = 32;
  s.state = 16;
  s.conv_kernel = 4;
  EXPECT_NE(cuda::persistent_decode_unfit(cuda::PersistentDecodeShape{}), "");
  cuda::PersistentDecodeShape k = s;
  k.conv_kernel = 5;
  EXPECT_EQ(cuda::persistent_decode_unfit(k), "conv kernel outside 2..4");
  cuda::PersistentDecodeShape h = s;
  h.hidden = 80;
  EXPECT_EQ(cuda::persistent_decode_unfit(h), "in_proj's or out_proj's K is not a multiple of 32");
  cuda::PersistentDecodeShape w = s;
  w.hidden = 8192;
  EXPECT_EQ(cuda::persistent_decode_unfit(w), "hidden size above the held norm's width");
}

// The step's block-level barriers alone (tests/cuda/named_barriers.h), one pattern a test so that racecheck
// can take them one by one: threads that skip a partial named barrier still meet the rest at each block-wide
// barrier, so every block_sum after them is right, read by the producer's lane. Racecheck reports hazards on
// block_sum's scratch in the partial patterns (1, 2, 3: the step's, 6) and none in the whole-block ones
// (0, 4), though every sum is right (docs/cuda.md, "Racecheck and partial named barriers").
class CudaPersistentDecodeBarriers : public ::testing::TestWithParam<int> {};

TEST_P(CudaPersistentDecodeBarriers, BlockSumsAreRight) {
  PARITY_REQUIRE_GPU();
  const int pattern = GetParam(), rounds = test::pick(64, 8), blocks = 8;
  const bool handoff = (pattern & (test::kHalfBlockHandoff | test::kWholeBlockHandoff)) != 0;
  cuda::DeviceBuffer<float> out(static_cast<std::size_t>(rounds) * blocks);
  test::named_barrier_sums(out.data(), rounds, blocks, pattern, nullptr);
  cuda::cuda_check(cudaDeviceSynchronize(), "named_barrier_sums");
  const std::vector<float> got = out.download(out.size());
  for (int r = 0; r < rounds; ++r) {
    const float want = handoff ? 40768.0f + 384.0f * static_cast<float>(r) : 32640.0f + 256.0f * static_cast<float>(r);
    for (int b = 0; b < blocks; ++b)
      ASSERT_EQ(got[static_cast<std::size_t>(r) * blocks + b], want) << "pattern " << pattern << " round " << r
                                                                     << " block " << b;
  }
}

INSTANTIATE_TEST_SUITE_P(Patterns, CudaPersistentDecodeBarriers,
                         ::testing::Values(0, test::kHalfBlockHandoff, test::kSevenWarpBarrier,
                                           test::kHalfBlockHandoff | test::kSevenWarpBarrier, test::kWholeBlockHandoff,
                                           test::kWholeBlockHandoff | test::kSevenWarpBarrier));

}  // namespace
}  // namespace parity
