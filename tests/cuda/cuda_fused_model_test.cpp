// The models' fused launches (issue 11: the residual add in the next norm, the norms writing the
// GEMMs' bf16 inputs, dt in the conv's launch) and programmatic launches against the unfused,
// ordinary launches (set_fuse_kernels, set_programmatic_launch), end to end on builtin:tiny and
// builtin:tiny-hybrid: every logit bit for bit, through prefill and graph-replayed decode, in
// exact and plain mode; and with probes that replace tensors
// mid-layer (the fused path must fall back where a probe wants a point), the same logits and the
// same visited tensors. Companions: a changed token changes the logits, a replacement changes them.
#include <cmath>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "backend_cuda/backend.h"
#include "backend_cuda/decode_graphs.h"
#include "cache/model_cache.h"
#include "kernels_cuda/conv_epilogue.h"
#include "kernels_cuda/early_start.h"
#include "kernels_cuda/gated_a.h"
#include "kernels_cuda/gemm_swap_ab.h"
#include "kernels_cuda/ops.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "model/probe.h"
#include "tests/cuda/gpu_test_support.h"
#include "tests/cuda/model_schedule.h"

namespace parity {
namespace {

// Visits every point whose name mentions layer 1 (its mixer's inner points, its mixer output and the
// block's output) and scales what it sees by 0.75; records a checksum of every visit.
class ScaleLayerOne : public model::ProbeHooks {
 public:
  bool wants(const std::string& name) const override {
    return name.find("layers.1.") != std::string::npos || name.ends_with("layers.1");
  }
  void visit(const std::string& name, float* data, int rows, int cols, const model::ProbeRows&) override {
    double sum = 0;
    for (std::size_t i = 0; i < static_cast<std::size_t>(rows) * cols; ++i) {
      sum += std::fabs(static_cast<double>(data[i]));
      data[i] *= 0.75f;
    }
    log.push_back(name + ":" + std::to_string(rows) + "x" + std::to_string(cols));
    sums.push_back(sum);
  }
  std::vector<std::string> log;
  std::vector<double> sums;
};

// Prompts of different lengths, then kSteps decode steps of the batch (model_schedule.h); every logit
// row in order. poke: that sequence's token at step 2 moved by one. Sanitizer mode (a pass of the hybrid
// costs ~2 s under racecheck): one step (captured and replayed) from prompts of 16, 31, 15, 30, ... tokens
// (the decode row opens or closes an exact cell), the token poked at step 0, fewer runs
// (test::ModeCase) and the hybrid alone, whose layers run the Mamba mixer, attention and the MoE.
const int kSteps = test::pick(18, 1);
const std::vector<const char*> kModels = test::sweep<const char*>({"builtin:tiny", "builtin:tiny-hybrid"},
                                                                  {"builtin:tiny-hybrid"});
std::vector<float> run_schedule(const model::Model& m, bool exact, int batch, model::ProbeHooks* hooks, int poke = -1) {
  test::Schedule sc;
  sc.batch = batch;
  sc.steps = kSteps;
  sc.prompt_len = test::pick<int (*)(int)>([](int s) { return 3 + (s * 11) % 31; },
                                           [](int s) { return 16 + 16 * (s % 2) - (s + 1) / 2 % 4; });
  sc.token = [](int seq, int i, int V) { return static_cast<int32_t>((seq * 41 + i * 13 + 5) % V); };
  sc.step_base = 200;
  sc.poke_seq = poke;
  sc.poke_step = test::pick(2, 0);
  return test::run_schedule(m, exact, sc, hooks).all();
}

TEST(CudaFusedModel, FusedLaunchesGiveTheUnfusedLogitsBitForBit) {
  PARITY_REQUIRE_GPU();
  const std::pair<bool, bool> launches[] = {{true, true}, {true, false}, {false, true}};  // (fuse, programmatic)
  int si = 0;
  for (const char* spec : kModels) {
    auto m = backend_cuda::load_model(model::open_checkpoint(spec), {});
    const int V = m->vocab_size();
    // Sanitizer mode: the three launch settings over two (mode, batch) pairs, swapped on the second model.
    const std::vector<test::ModeCase> cases =
        test::pick(test::every_mode_case({1, 3}, 3), std::vector<test::ModeCase>{{si == 0, 3, {0, 1}}, {si != 0, 1, {2}}});
    ++si;
    for (const test::ModeCase& c : cases) {
      const bool exact = c.exact;
      const int batch = c.batch;
      const std::string what = std::string(spec) + (exact ? " exact" : " plain") + " batch " + std::to_string(batch);
      // The reference: every step in its own launch, launched the ordinary way (as before issue 11's
      // fusions); then fused and programmatic launches each alone and together.
      backend_cuda::set_fuse_kernels(*m, false);
      cuda::set_programmatic_launch(false);
      const std::vector<float> unfused = run_schedule(*m, exact, batch, nullptr);
      for (int v : c.variants) {
        const auto [fuse, pdl] = launches[v];
        backend_cuda::set_fuse_kernels(*m, fuse);
        cuda::set_programmatic_launch(pdl);
        const std::vector<float> got = run_schedule(*m, exact, batch, nullptr);
        EXPECT_EQ(test::bit_difference(got.data(), unfused.data(), got.size(), static_cast<std::size_t>(V)), "")
            << what << (fuse ? " fused" : " unfused") << (pdl ? " programmatic" : "")
            << " (row r: prefill rows first, then step k's batch)";
      }
      backend_cuda::set_fuse_kernels(*m, true);
      cuda::set_programmatic_launch(true);
    }
    // Companion: the comparison sees one changed decode token.
    const std::vector<float> a = run_schedule(*m, true, 3, nullptr), b = run_schedule(*m, true, 3, nullptr, 1);
    EXPECT_NE(test::bit_difference(a.data(), b.data(), a.size(), static_cast<std::size_t>(V)), "") << spec;
  }
}

// The decode GEMMs' early start (ops.h's GemmEarly: programmatic GEMM launches with their first weight
// boxes requested before the wait, the L2 prefetch, the early release, the norms' release before their
// wait, in_proj's tail prefetching out_proj's weights, the conv's state read before its wait, the lagged
// mma.sync consumer; early_start.h's parked consumers, the norms' early release at every row count, the
// conv's and SSU's release before their wait, the rest of the weights to L2, the SSM step's and the gated
// norm's release before their wait, out_proj's two wider rings) against the GEMMs' ordinary launches (flags 0), fused and programmatic launches on: every logit
// bit for bit, prefill and graph-replayed decode, exact and plain. The companion of the test above shows
// the comparison sees one changed token. Sanitizer mode: the two sets that hold every flag before session
// 36's, two with the SSM step's and the gated norm's release, the parked consumers and norms without the
// weights' early start, and the conv's state read alone, over two (mode, batch) pairs.
TEST(CudaFusedModel, EarlyGemmStartsGiveTheLogitsOfOrdinaryGemmLaunches) {
  PARITY_REQUIRE_GPU();
  const unsigned W = cuda::kGemmEarlyWeights, R = cuda::kGemmEarlyRelease, L2 = cuda::kGemmEarlyL2,
                 N = cuda::kGemmEarlyNorms, X = cuda::kGemmEarlyNextL2, S = cuda::kGemmEarlyConvState,
                 G = cuda::kGemmMmaLag, P = cuda::kGemmEarlyPark, C = cuda::kGemmEarlyMixerChain,
                 L = cuda::kGemmEarlyL2Rest, F = cuda::kGemmEarlySsmFirst, Q = cuda::kGemmEarlyGatedNormFirst;
  const unsigned sets[] = {W, W | R, W | R | L2, W | R | N, W | R | L2 | N, N, W | R | X, S, W | R | S, W | R | G,
                           W | R | L2 | N | X | S | G, W | R | S | P, W | R | S | P | N, W | R | S | P | C,
                           W | R | S | P | N | C, W | R | S | P | N | C | L, P | N | C, W | R | S | F | Q,
                           W | R | S | P | F | Q, F | Q, W | R | S | F | Q | cuda::kGemmMmaOutProjRing,
                           W | R | S | cuda::kGemmMmaOutProjNarrow};
  const int count = static_cast<int>(std::size(sets));
  // Indices into sets: W | R | L2 | N | X | S | G, P | N | C and W | R | S | P | F | Q (exact, one row); S,
  // W | R | S | P | N | C | L and W | R | S | F | Q (plain, three rows).
  const std::vector<test::ModeCase> few = {{true, 1, {10, 16, 18}}, {false, 3, {7, 15, 17}}};
  cuda::set_programmatic_launch(true);
  for (const char* spec : kModels) {
    auto m = backend_cuda::load_model(model::open_checkpoint(spec), {});
    backend_cuda::set_fuse_kernels(*m, true);
    const int V = m->vocab_size();
    for (const test::ModeCase& c : test::pick(test::every_mode_case({1, 3}, count), few)) {
      const bool exact = c.exact;
      const int batch = c.batch;
      cuda::set_gemm_early(0);
      const std::vector<float> ordinary = run_schedule(*m, exact, batch, nullptr);
      for (int i : c.variants) {
        const unsigned flags = sets[i];
        cuda::set_gemm_early(flags);
        const std::vector<float> got = run_schedule(*m, exact, batch, nullptr);
        EXPECT_EQ(test::bit_difference(got.data(), ordinary.data(), got.size(), static_cast<std::size_t>(V)), "")
            << spec << (exact ? " exact" : " plain") << " batch " << batch << " early flags " << flags
            << " (row r: prefill rows first, then step k's batch)";
      }
    }
  }
  cuda::set_gemm_early(cuda::kGemmEarlyDefault);
}

// The GEMMs doing the work of the launches beside them in a decode pass: in_proj the conv, SiLU,
// conv-state advance and dt in its epilogue (conv_epilogue.h, up to 8 sequences), and with it the gated
// norm's silu(z) factors (ConvEpilogue::gate), on the box-by-box or the grouped consumer; out_proj the
// gated RMSNorm of a one-row pass (gated_a.h), each alone and together, against the conv's and the norm's
// own launches: every logit bit for bit, prefill and graph-replayed decode, exact and plain, with a group
// of two and biases (tiny-g2: out_proj declines its two groups). The companion of the first test shows
// the comparison sees one changed token. Sanitizer mode: tiny-g2 (the declining out_proj) exact with one
// row, the conv with its gate on the grouped consumer and norm in out_proj; the hybrid plain with eight
// rows, the conv in in_proj.
TEST(CudaFusedModel, GemmsDoingTheConvAndTheNormGiveTheLogitsOfTheirLaunches) {
  PARITY_REQUIRE_GPU();
  struct Fusion {
    bool conv, norm, gate, grouped;
  };
  const Fusion fusions[] = {{true, false, false, false}, {false, true, false, false}, {true, true, false, false},
                            {true, false, true, false},  {true, false, false, true},  {true, true, true, true}};
  for (const char* spec : test::sweep<const char*>({"builtin:tiny", "builtin:tiny-g2", "builtin:tiny-hybrid"},
                                                   {"builtin:tiny-g2", "builtin:tiny-hybrid"})) {
    auto m = backend_cuda::load_model(model::open_checkpoint(spec), {});
    const int V = m->vocab_size();
    const bool g2 = std::string(spec) == "builtin:tiny-g2";
    for (const test::ModeCase& c :
         test::pick(test::every_mode_case({1, 3, 8}, static_cast<int>(std::size(fusions))),
                    g2 ? std::vector<test::ModeCase>{{true, 1, {0, 1, 2, 5}}} : std::vector<test::ModeCase>{{false, 8, {0}}})) {
      const bool exact = c.exact;
      const int batch = c.batch;
      cuda::set_conv_epilogue(false);
      cuda::set_gated_out_proj(false);
      cuda::set_gate_in_epilogue(false);
      cuda::set_conv_epilogue_grouped(false);
      const std::vector<float> launches = run_schedule(*m, exact, batch, nullptr);
      for (int v : c.variants) {
        const Fusion f = fusions[v];
        cuda::set_conv_epilogue(f.conv);
        cuda::set_gated_out_proj(f.norm);
        cuda::set_gate_in_epilogue(f.gate);
        cuda::set_conv_epilogue_grouped(f.grouped);
        const std::vector<float> got = run_schedule(*m, exact, batch, nullptr);
        EXPECT_EQ(test::bit_difference(got.data(), launches.data(), got.size(), static_cast<std::size_t>(V)), "")
            << spec << (exact ? " exact" : " plain") << " batch " << batch << (f.conv ? " conv in in_proj" : "")
            << (f.gate ? " with the gate" : "") << (f.grouped ? " grouped" : "") << (f.norm ? " norm in out_proj" : "")
            << " (row r: prefill rows first, then step k's batch)";
      }
    }
  }
  cuda::set_conv_epilogue(cuda::kConvEpilogueDefault);
  cuda::set_gated_out_proj(cuda::kGatedOutProjDefault);
  cuda::set_gate_in_epilogue(cuda::kGateInEpilogueDefault);
  cuda::set_conv_epilogue_grouped(false);
}

// Exact mode's one-row decode launched programmatically too (set_programmatic_exact_decode_mode 1: it
// asks L2 for its state and rings, then waits for the conv; 2: it only waits; 3, the default: 1 for
// small batches): the same logits as launched the ordinary way, eager and through graphs (a graph
// records the setting). Companion: the comparison sees one changed token.
// Sanitizer mode: builtin:tiny alone (the decode step is the Mamba mixer's), graphs with three rows and
// eager with one.
TEST(CudaFusedModel, ExactDecodeProgrammaticGivesTheSameLogits) {
  PARITY_REQUIRE_GPU();
  int si = 0;
  for (const char* spec : test::sweep<const char*>({"builtin:tiny", "builtin:tiny-hybrid"}, {"builtin:tiny"})) {
    auto m = backend_cuda::load_model(model::open_checkpoint(spec), {});
    const int V = m->vocab_size();
    const bool first = si++ == 0;
    // (eager, batch)
    const std::vector<std::pair<bool, int>> runs =
        test::pick(std::vector<std::pair<bool, int>>{{false, 1}, {false, 3}, {true, 1}, {true, 3}},
                   std::vector<std::pair<bool, int>>{{false, first ? 3 : 1}, {true, first ? 1 : 3}});
    for (const auto& [eager, batch] : runs) {
      backend_cuda::set_enforce_eager(*m, eager);
      cuda::set_programmatic_exact_decode(false);
      const std::vector<float> ordinary = run_schedule(*m, true, batch, nullptr);
      cuda::set_programmatic_exact_decode(true);
      const std::vector<float> got = run_schedule(*m, true, batch, nullptr);
      const std::vector<float> poked = run_schedule(*m, true, batch, nullptr, batch - 1);
      cuda::set_programmatic_exact_decode(true, false);  // without the L2 requests before the wait
      const std::vector<float> plain_wait = run_schedule(*m, true, batch, nullptr);
      cuda::set_programmatic_exact_decode_mode(cuda::kProgrammaticDecodeAuto);  // 1 up to 16 sequences
      const std::vector<float> automatic = run_schedule(*m, true, batch, nullptr);
      cuda::set_programmatic_exact_decode_mode(cuda::kProgrammaticDecodeAuto);
      const std::string what = std::string(spec) + (eager ? " eager" : " graphs") + " batch " + std::to_string(batch);
      EXPECT_EQ(test::bit_difference(got.data(), ordinary.data(), got.size(), static_cast<std::size_t>(V)), "")
          << what << " (row r: prefill rows first, then step k's batch)";
      EXPECT_EQ(test::bit_difference(plain_wait.data(), ordinary.data(), got.size(), static_cast<std::size_t>(V)), "")
          << what << " without the L2 requests";
      EXPECT_EQ(test::bit_difference(automatic.data(), ordinary.data(), got.size(), static_cast<std::size_t>(V)), "")
          << what << " by batch (the default)";
      EXPECT_NE(test::bit_difference(poked.data(), ordinary.data(), got.size(), static_cast<std::size_t>(V)), "")
          << what << ": companion (a changed decode token)";
    }
    backend_cuda::set_enforce_eager(*m, false);
  }
}

TEST(CudaFusedModel, ProbesReplacingMidLayerTensorsSeeTheUnfusedTensors) {
  PARITY_REQUIRE_GPU();
  for (const char* spec : kModels) {
    auto m = backend_cuda::load_model(model::open_checkpoint(spec), {});
    const int V = m->vocab_size();
    ScaleLayerOne h0, h1;
    backend_cuda::set_fuse_kernels(*m, false);
    const std::vector<float> unfused = run_schedule(*m, true, 3, &h0);
    backend_cuda::set_fuse_kernels(*m, true);
    const std::vector<float> fused = run_schedule(*m, true, 3, &h1);
    EXPECT_GE(h0.log.size(), 4u * unsigned(kSteps + 1)) << spec << ": layer 1's points should be visited every pass";
    EXPECT_EQ(h1.log, h0.log) << spec;
    EXPECT_EQ(h1.sums, h0.sums) << spec << ": a visit saw another tensor";
    EXPECT_EQ(test::bit_difference(fused.data(), unfused.data(), fused.size(), static_cast<std::size_t>(V)), "")
        << spec;
    // Companion: the replacements did change the logits.
    const std::vector<float> plain = run_schedule(*m, true, 3, nullptr);
    EXPECT_NE(test::bit_difference(fused.data(), plain.data(), fused.size(), static_cast<std::size_t>(V)), "") << spec;
  }
}

}  // namespace
}  // namespace parity
