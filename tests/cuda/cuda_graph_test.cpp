// Decode steps replayed as CUDA graphs (backend_cuda/decode_graphs.h): the same schedule run
// kernel by kernel (enforce_eager) and through graphs gives every row the same bits, for batches
// that fill their bucket (1, 64) and one that is padded (3 → 4), in exact and plain mode, on
// builtin:tiny (CudaMamba2Model) and builtin:tiny-hybrid (CudaHybridModel); exact mode's graph
// decode rows equal a single-shot prefill's. Companions show the comparison can fail: plain
// mode's decode rows differ from its prefill, and a changed token changes its own sequence (and
// only it: the padding and the neighbours leave a row alone).
#include <algorithm>
#include <string>
#include <vector>

#include "backend_cuda/backend.h"
#include "backend_cuda/decode_graphs.h"
#include "cache/model_cache.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "tests/cuda/gpu_test_support.h"
#include "tests/cuda/model_schedule.h"

namespace parity {
namespace {

std::unique_ptr<model::Model> gpu_model(const std::string& spec) {
  return backend_cuda::load_model(model::open_checkpoint(spec), {});
}

// > the GPU's exact cell (16): every decode crosses a cell boundary. Sanitizer mode (a pass costs ~0.5 s
// under racecheck): 2 steps, the first two sequences' prompts one token short of a multiple of 16 so
// that their decode crosses one, the others' 2, 3, ... short.
const int kSteps = test::pick(20, 2);

// One prefill of every prompt, then kSteps decode steps of the whole batch (model_schedule.h); odd
// steps ask for the rows in reverse order: the logits copy must follow logit_rows. poke_seq: that
// sequence's token at step 1 moved by one.
test::ScheduleRun run_schedule(const model::Model& m, bool exact, int batch, int poke_seq = -1) {
  test::Schedule sc;
  sc.batch = batch;
  sc.steps = kSteps;
  sc.prompt_len = test::pick<int (*)(int)>([](int s) { return 5 + (s * 7) % 29; },
                                           [](int s) { return 15 + 16 * (s % 2) - s / 2; });
  sc.token = [](int seq, int i, int V) { return static_cast<int32_t>((seq * 37 + i * 11 + 3) % V); };
  sc.step_base = 100;
  sc.poke_seq = poke_seq;
  sc.poke_step = 1;
  sc.reverse_odd_steps = true;
  return test::run_schedule(m, exact, sc);
}

// Sanitizer mode (a pass costs ~1-2 s under racecheck): tiny exact with 8 rows (a full bucket, as 64), the
// hybrid exact with one (plain mode's graphs, padded to a bucket, replay in CudaFusedModel's tests).
TEST(CudaGraphs, ReplayedDecodeStepsEqualEagerOnesBitForBit) {
  PARITY_REQUIRE_GPU();
  for (const char* spec : {"builtin:tiny", "builtin:tiny-hybrid"}) {
    auto m = gpu_model(spec);
    const bool tiny = std::string(spec) == "builtin:tiny";
    for (bool exact : {true, false}) {
      const std::vector<int> batches =
          test::pick(std::vector<int>{1, 3, 64}, exact ? std::vector<int>{tiny ? 8 : 1} : std::vector<int>{});
      for (int batch : batches) {
        const std::string what = std::string(spec) + (exact ? " exact" : " plain") + " batch " + std::to_string(batch);
        backend_cuda::set_enforce_eager(*m, true);
        const backend_cuda::CudaGraphStats e0 = backend_cuda::cuda_graph_stats(*m);
        const test::ScheduleRun eager = run_schedule(*m, exact, batch);
        const backend_cuda::CudaGraphStats e1 = backend_cuda::cuda_graph_stats(*m);
        EXPECT_EQ(e1.replays, e0.replays) << what << ": enforce_eager replayed a graph";

        backend_cuda::set_enforce_eager(*m, false);
        const test::ScheduleRun graph = run_schedule(*m, exact, batch);
        const backend_cuda::CudaGraphStats g1 = backend_cuda::cuda_graph_stats(*m);
        EXPECT_EQ(g1.replays - e1.replays, kSteps) << what << ": every decode step should replay a graph";
        EXPECT_GE(g1.captures - e1.captures, 1) << what;
        EXPECT_EQ(g1.eager_passes - e1.eager_passes, 1) << what << ": only the prefill runs eagerly";

        EXPECT_TRUE(test::same_bits(eager.prefill.data(), graph.prefill.data(), eager.prefill.size())) << what;
        const int V = m->vocab_size();
        int bad = 0;
        for (int k = 0; k < kSteps; ++k)
          for (int s = 0; s < batch; ++s)
            bad += !test::same_bits(eager.row(k, s, V), graph.row(k, s, V),
                                    static_cast<std::size_t>(V));
        EXPECT_EQ(bad, 0) << what << ": decode rows whose graph bits differ from eager";
      }
    }
  }
}

// Exact mode's promise through the graph path: a decode row is the single-shot prefill's row at
// its position. Plain mode is the companion: its decode (SSU) rows differ from its prefill.
// Sanitizer mode: the hybrid alone (its Mamba layers are tiny's mixer).
TEST(CudaGraphs, ExactGraphDecodeEqualsSingleShotPrefillAndPlainDoesNot) {
  PARITY_REQUIRE_GPU();
  for (const char* spec : test::sweep<const char*>({"builtin:tiny", "builtin:tiny-hybrid"}, {"builtin:tiny-hybrid"})) {
    auto m = gpu_model(spec);
    const int V = m->vocab_size(), batch = 3;
    for (bool exact : {true, false}) {
      const model::ScanMode mode = exact ? model::ScanMode::Exact : model::ScanMode::Plain;
      const int64_t before = backend_cuda::cuda_graph_stats(*m).replays;
      const test::ScheduleRun g = run_schedule(*m, exact, batch);
      EXPECT_EQ(backend_cuda::cuda_graph_stats(*m).replays - before, kSteps) << spec;
      int bad = 0, rows = 0;
      for (int s = 0; s < batch; ++s) {
        const std::vector<float> ref = model::score_all_rows(*m, g.fed[s], model::default_numerics(*m, mode));
        for (int k = 0; k < kSteps; ++k, ++rows) {
          const std::size_t pos = static_cast<std::size_t>(g.prompt_len[s] + k);
          bad += !test::same_bits(g.row(k, s, V), ref.data() + pos * V, static_cast<std::size_t>(V));
        }
      }
      if (exact) EXPECT_EQ(bad, 0) << spec << ": exact graph decode rows differing from the prefill, of " << rows;
      else EXPECT_GT(bad, 0) << spec << ": companion: plain mode's decode rows should differ from its prefill";
    }
  }
}

// The check can fail, and padding and neighbours change nothing: one changed token at step 1
// changes its sequence's rows from then on and leaves every other sequence's bits alone.
TEST(CudaGraphs, AChangedTokenChangesOnlyItsOwnSequence) {
  PARITY_REQUIRE_GPU();
  for (const char* spec : test::sweep<const char*>({"builtin:tiny", "builtin:tiny-hybrid"}, {"builtin:tiny-hybrid"})) {
    auto m = gpu_model(spec);
    const int V = m->vocab_size(), batch = 3;  // padded to 4
    const test::ScheduleRun a = run_schedule(*m, true, batch);
    const test::ScheduleRun b = run_schedule(*m, true, batch, /*poke_seq=*/1);
    for (int k = 0; k < kSteps; ++k)
      for (int s = 0; s < batch; ++s) {
        const bool same = test::same_bits(a.row(k, s, V), b.row(k, s, V),
                                          static_cast<std::size_t>(V));
        if (s == 1 && k >= 1) EXPECT_FALSE(same) << spec << " step " << k << ": the changed token left no trace";
        else EXPECT_TRUE(same) << spec << " step " << k << " seq " << s << ": another sequence's token changed it";
      }
  }
}

// A probe copies to the host mid-pass, which a graph cannot: a pass with a wanted point runs
// eagerly (and still gives the graph's bits).
class WantsLmHead : public model::ProbeHooks {
 public:
  bool wants(const std::string& name) const override { return name == "lm_head"; }
  void visit(const std::string&, float*, int rows, int, const model::ProbeRows&) override { seen += rows; }
  int seen = 0;
};

TEST(CudaGraphs, AnActiveProbeRunsThePassEagerly) {
  PARITY_REQUIRE_GPU();
  auto m = gpu_model("builtin:tiny");
  const int V = m->vocab_size();
  const cache::Numerics num = model::default_numerics(*m, model::ScanMode::Exact);
  cache::ModelCache mc = cache::make_single_cache(m->cache_spec(), 8, num);
  const int slot = mc.allocate();
  ASSERT_TRUE(mc.reserve(slot, 8));
  std::vector<float> l(static_cast<std::size_t>(V));
  model::ForwardBatch p;
  p.tokens = {1, 2, 3};
  p.seqs.push_back({slot, 0, 3});
  p.logit_rows = {2};
  m->forward(p, mc, model::ScanMode::Exact, l.data());
  model::ForwardBatch d;
  d.tokens = {4};
  d.seqs.push_back({slot, 3, 1});
  d.logit_rows = {0};
  WantsLmHead hooks;
  const backend_cuda::CudaGraphStats s0 = backend_cuda::cuda_graph_stats(*m);
  m->forward(d, mc, model::ScanMode::Exact, l.data(), &hooks);
  const backend_cuda::CudaGraphStats s1 = backend_cuda::cuda_graph_stats(*m);
  EXPECT_EQ(hooks.seen, 1);
  EXPECT_EQ(s1.replays, s0.replays);
  EXPECT_EQ(s1.eager_passes, s0.eager_passes + 1);
  d.seqs[0].start = 4;
  m->forward(d, mc, model::ScanMode::Exact, l.data());  // no hooks: the graph again
  EXPECT_EQ(backend_cuda::cuda_graph_stats(*m).replays, s1.replays + 1);
}

TEST(CudaGraphs, BucketsArePowersOfTwoUpTo256) {
  EXPECT_EQ(backend_cuda::graph_bucket(1), 1);
  EXPECT_EQ(backend_cuda::graph_bucket(3), 4);
  EXPECT_EQ(backend_cuda::graph_bucket(64), 64);
  EXPECT_EQ(backend_cuda::graph_bucket(65), 128);
  EXPECT_EQ(backend_cuda::graph_bucket(256), 256);
  EXPECT_EQ(backend_cuda::graph_bucket(257), 0);
  EXPECT_EQ(backend_cuda::graph_bucket(0), 0);
}

}  // namespace
}  // namespace parity
