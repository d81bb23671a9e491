// Seed 000's two router integration patterns (model/hybrid_moe.h): the dense-affinity MoE path
// against the (ids, gates) path at kernel level for any k, and the direct and fused patterns of the
// GraniteMoeHybrid model bit for bit, with and without a router replacement, under single-shot and
// chunked schedules, for top-2 and for top-4 routing.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "accuracy/capture_run.h"
#include "accuracy/replacement_session.h"
#include "common/error.h"
#include "io/token_file.h"
#include "kernels/moe.h"
#include "kernels/moe_dense.h"
#include "router_patterns_support.h"
#include "test_support.h"

using namespace parity;
using model::MoeRoutingPattern;
namespace fs = std::filesystem;

namespace {

struct MoeCase {
  int T = 37, D = 24, E = 8, F = 16;
  std::vector<float> x, logits;
  std::vector<kernels::PackedWeight> w_in, w_out;
  kernels::PackedWeight router;
};

MoeCase make_case(unsigned seed) {
  MoeCase c;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto fill = [&](std::size_t n, float s) {
    std::vector<float> v(n);
    for (float& a : v) a = s * nd(rng);
    return v;
  };
  c.x = fill(std::size_t(c.T) * c.D, 1.0f);
  c.logits = fill(std::size_t(c.T) * c.E, 1.0f);
  for (int e = 0; e < c.E; ++e) {
    auto wi = fill(std::size_t(2) * c.F * c.D, 0.3f), wo = fill(std::size_t(c.D) * c.F, 0.3f);
    c.w_in.push_back(kernels::pack_weight(wi.data(), DType::F32, 2 * c.F, c.D));
    c.w_out.push_back(kernels::pack_weight(wo.data(), DType::F32, c.D, c.F));
  }
  auto wr = fill(std::size_t(c.E) * c.D, 0.5f);
  c.router = kernels::pack_weight(wr.data(), DType::F32, c.E, c.D);
  return c;
}

std::vector<float> lists_path(const MoeCase& c, const float* logits, int k) {
  std::vector<int> idx(std::size_t(c.T) * k);
  std::vector<float> w(idx.size()), out(std::size_t(c.T) * c.D);
  kernels::router_topk_softmax(logits, c.T, c.E, k, idx.data(), w.data());
  const auto r = kernels::moe_route(idx.data(), c.T, c.E, k);
  kernels::moe_experts(c.x.data(), c.D, c.F, r, w.data(), c.w_in.data(), c.w_out.data(), out.data());
  return out;
}

std::vector<float> dense_path(const MoeCase& c, const kernels::DenseRouting& d) {
  std::vector<float> out(std::size_t(c.T) * c.D);
  kernels::moe_experts_dense(c.x.data(), c.D, c.F, d, c.w_in.data(), c.w_out.data(), out.data());
  return out;
}

}  // namespace

TEST(MoeDense, DenseAffinitiesGiveTheListPathBitsForAnyK) {
  const MoeCase c = make_case(11);
  for (int k : {1, 2, 3, 4, 8}) {
    SCOPED_TRACE("top-" + std::to_string(k));
    const auto want = lists_path(c, c.logits.data(), k);
    const auto d = kernels::dense_routing_from_logits(c.logits.data(), c.T, c.E, k);
    for (int t = 0; t < c.T; ++t) {  // dense rows: k non-zero gates summing to ~1, zeros elsewhere
      int nonzero = 0;
      for (int e = 0; e < c.E; ++e) nonzero += d.affinities[std::size_t(t) * c.E + e] != 0.0f;
      EXPECT_EQ(nonzero, k) << "token " << t;
    }
    const auto got = dense_path(c, d);
    EXPECT_TRUE(test::same_bits(want.data(), got.data(), want.size()));
    // The fused router (GEMM inside) equals the replicated pipeline on the GEMM's logits.
    std::vector<float> lg(std::size_t(c.T) * c.E);
    kernels::gemm(c.x.data(), c.T, c.D, c.router, nullptr, lg.data(), c.E);
    const auto fused = kernels::dense_routing(c.x.data(), c.T, c.D, c.router, k);
    const auto replicated = kernels::dense_routing_from_logits(lg.data(), c.T, c.E, k);
    EXPECT_EQ(fused.order, replicated.order);
    EXPECT_TRUE(test::same_bits(fused.affinities.data(), replicated.affinities.data(), fused.affinities.size()));
  }
}

// Why the dense form keeps the top-k order: summing a token's expert rows in ascending expert id
// (a scan of the dense row, HF's index_add order) gives the top-k order's bits for k ≤ 2 only.
TEST(MoeDense, AscendingExpertCombineMatchesTopKOrderOnlyUpToK2) {
  const MoeCase c = make_case(5);
  // Every expert's output for every token, unweighted (weight 1 onto +0 is exact).
  std::vector<std::vector<float>> y(static_cast<std::size_t>(c.E));
  for (int e = 0; e < c.E; ++e) {
    std::vector<int> idx(static_cast<std::size_t>(c.T), e);
    std::vector<float> one(static_cast<std::size_t>(c.T), 1.0f);
    y[static_cast<std::size_t>(e)].resize(std::size_t(c.T) * c.D);
    kernels::moe_experts(c.x.data(), c.D, c.F, kernels::moe_route(idx.data(), c.T, c.E, 1), one.data(),
                         c.w_in.data(), c.w_out.data(), y[static_cast<std::size_t>(e)].data());
  }
  for (int k : {2, 4}) {
    const auto d = kernels::dense_routing_from_logits(c.logits.data(), c.T, c.E, k);
    const auto topk = dense_path(c, d);
    std::vector<float> asc(topk.size(), 0.0f);
    for (int t = 0; t < c.T; ++t)
      for (int e = 0; e < c.E; ++e) {
        const float a = d.affinities[std::size_t(t) * c.E + e];
        if (a == 0.0f) continue;
        for (int i = 0; i < c.D; ++i) {
          float& o = asc[std::size_t(t) * c.D + i];
          o = o + a * y[static_cast<std::size_t>(e)][std::size_t(t) * c.D + i];
        }
      }
    if (k <= 2)
      EXPECT_TRUE(test::same_bits(asc.data(), topk.data(), asc.size())) << "k " << k;
    else
      EXPECT_FALSE(test::same_bits(asc.data(), topk.data(), asc.size())) << "k " << k;
  }
}

TEST(MoeDense, MalformedRoutingIsAnError) {
  const MoeCase c = make_case(3);
  auto d = kernels::dense_routing_from_logits(c.logits.data(), c.T, c.E, 2);
  std::vector<float> out(std::size_t(c.T) * c.D);
  auto run = [&](const kernels::DenseRouting& r) {
    kernels::moe_experts_dense(c.x.data(), c.D, c.F, r, c.w_in.data(), c.w_out.data(), out.data());
  };
  auto bad = d;
  bad.order[5] = c.E;
  EXPECT_THROW(run(bad), Error);
  bad = d;
  bad.order[3] = bad.order[2];  // token 1 names one expert twice
  EXPECT_THROW(run(bad), Error);
  bad = d;
  bad.affinities.pop_back();
  EXPECT_THROW(run(bad), Error);
  EXPECT_THROW(kernels::dense_routing_from_logits(c.logits.data(), c.T, c.E, c.E + 1), Error);
}

namespace {

// The forced routing of the fixture, for requests whose prompt is the stream's first prompt_len
// tokens (prefix matching then maps them, and a 100-token score, to the reference).
std::unique_ptr<accuracy::ReplacementSession> forced_session(const model::Model& m, std::size_t prompt_len) {
  accuracy::ReplacementConfig cfg;
  cfg.tensors_path = test::kGraniteFixture + "/forced_router_logits.safetensors";
  const auto toks = test::granite_fixture_tokens();
  cfg.prompt_token_ids = std::vector<std::vector<int32_t>>{
      std::vector<int32_t>(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(prompt_len))};
  return std::make_unique<accuracy::ReplacementSession>(cfg, m);
}

engine::EngineConfig chunked(model::ScanMode mode, int budget) {
  engine::EngineConfig c;
  c.mode = mode;
  c.sched.max_num_batched_tokens = budget;
  return c;
}

// All rows of the fixture stream through `m`: single-shot score, and the engine at budget 13.
struct PatternRun {
  std::vector<float> score, engine_exact, engine_plain;
};

PatternRun run_pattern(const model::Model& m, const std::vector<int32_t>& toks, bool replace) {
  PatternRun r;
  auto session = replace ? forced_session(m, 30) : nullptr;
  if (session) session->replacer().register_request(0, toks);
  r.score = model::score_all_rows(m, toks, model::ScanMode::Exact, session ? &session->hooks() : nullptr);
  for (auto mode : {model::ScanMode::Exact, model::ScanMode::Plain}) {
    auto s = replace ? forced_session(m, 30) : nullptr;
    auto rows = test::engine_rows(m, toks, 30, chunked(mode, 13), [&](engine::Engine& e) {
      if (s) s->attach(e);
    });
    (mode == model::ScanMode::Exact ? r.engine_exact : r.engine_plain) = std::move(rows);
  }
  return r;
}

void expect_same_runs(const PatternRun& a, const PatternRun& b) {
  ASSERT_EQ(a.score.size(), b.score.size());
  EXPECT_TRUE(test::same_bits(a.score.data(), b.score.data(), a.score.size()));
  ASSERT_EQ(a.engine_exact.size(), a.score.size());
  EXPECT_TRUE(test::same_bits(a.engine_exact.data(), b.engine_exact.data(), a.score.size()));
  ASSERT_EQ(a.engine_plain.size(), a.score.size());
  EXPECT_TRUE(test::same_bits(a.engine_plain.data(), b.engine_plain.data(), a.score.size()));
  // Exact mode: the chunked engine run is the single-shot score, bit for bit, in either pattern.
  EXPECT_TRUE(test::same_bits(a.engine_exact.data(), a.score.data(), a.score.size()));
}

}  // namespace

TEST(RouterPatterns, DirectAndFusedGiveTheSameBitsWithAndWithoutReplacement) {
  const auto toks = test::granite_fixture_tokens();
  const auto& direct = test::routed_model(test::kGraniteFixture, MoeRoutingPattern::Direct);
  const auto& fused = test::routed_model(test::kGraniteFixture, MoeRoutingPattern::Fused);
  std::vector<float> scores[2];
  for (bool replace : {false, true}) {
    SCOPED_TRACE(replace ? "forced router logits injected" : "no replacement");
    const PatternRun a = run_pattern(direct, toks, replace), b = run_pattern(fused, toks, replace);
    expect_same_runs(a, b);
    scores[replace] = a.score;
  }
  // The injection changes the result: the two cases above are different computations.
  EXPECT_FALSE(test::same_bits(scores[0].data(), scores[1].data(), scores[0].size()));
}

TEST(RouterPatterns, DirectAndFusedAgreeOnTinyHybrid) {
  std::mt19937 rng(9);
  std::vector<int32_t> toks(70);
  for (auto& t : toks) t = static_cast<int32_t>(rng() % 512);
  const auto& d = test::routed_model("builtin:tiny-hybrid", MoeRoutingPattern::Direct);
  const auto& f = test::routed_model("builtin:tiny-hybrid", MoeRoutingPattern::Fused);
  const auto a = model::score_all_rows(d, toks), b = model::score_all_rows(f, toks);
  EXPECT_TRUE(test::same_bits(a.data(), b.data(), a.size()));
}

// NemotronH's MoE (Nemotron 3: sigmoid router with correction bias, norm_topk_prob, routed_scaling_factor,
// ReLU² experts, shared expert): direct and fused give the same bits, with and without router logits injected
// at model.layers.N.mixer.gate; the injection changes the result.
TEST(RouterPatterns, DirectAndFusedAgreeOnNemotronHWithAndWithoutReplacement) {
  std::mt19937 rng(11);
  std::vector<int32_t> toks(70);
  for (auto& t : toks) t = static_cast<int32_t>(rng() % 512);
  const auto& d = test::routed_model("builtin:tiny-nemotron-h", MoeRoutingPattern::Direct);
  const auto& f = test::routed_model("builtin:tiny-nemotron-h", MoeRoutingPattern::Fused);
  const auto a = model::score_all_rows(d, toks), b = model::score_all_rows(f, toks);
  EXPECT_TRUE(test::same_bits(a.data(), b.data(), a.size()));
  // Inject reversed router logits at both MoE layers through the probe point, in both patterns.
  std::vector<std::vector<float>> injected;
  for (const auto* m : {&d, &f}) {
    struct Flip : model::ProbeHooks {
      bool wants(const std::string& n) const override {
        return n == "model.layers.1.mixer.gate" || n == "model.layers.5.mixer.gate";
      }
      void visit(const std::string&, float* x, int rows, int cols, const model::ProbeRows&) override {
        ++visits;
        for (int r = 0; r < rows; ++r) std::reverse(x + std::size_t(r) * cols, x + std::size_t(r + 1) * cols);
      }
      int visits = 0;
    } flip;
    injected.push_back(model::score_all_rows(*m, toks, model::ScanMode::Exact, &flip));
    EXPECT_EQ(flip.visits, 2);
  }
  EXPECT_TRUE(test::same_bits(injected[0].data(), injected[1].data(), a.size()));
  EXPECT_FALSE(test::same_bits(a.data(), injected[0].data(), a.size())) << "reversed router logits must reroute";
}

// NemotronH through seed 000's tensor replacement (the router logits fetched by request and position before the
// router GEMM, which then does not run): a captures file of reversed router logits for both MoE layers, injected in
// both routing patterns, single-shot and through the chunked engine. The same bits in both patterns, exact-mode
// engine rows equal to the single-shot score, and equal to the in-place edit of the test above.
TEST(RouterPatterns, NemotronHReplacementSessionInBothPatterns) {
  std::mt19937 rng(12);
  std::vector<int32_t> toks(60);
  for (auto& t : toks) t = static_cast<int32_t>(rng() % 512);
  const std::string spec = "builtin:tiny-nemotron-h";
  const std::vector<std::string> gates = {"model.layers.1.mixer.gate", "model.layers.5.mixer.gate"};
  // The natural router logits, reversed per row, as a captures file for the first 20 tokens as prompt.
  struct Rec : model::ProbeHooks {
    std::vector<std::string> names;
    std::map<std::string, accuracy::Matrix> got;
    bool wants(const std::string& n) const override { return std::count(names.begin(), names.end(), n) > 0; }
    void visit(const std::string& n, float* d, int rows, int cols, const model::ProbeRows&) override {
      accuracy::Matrix m{rows, cols, std::vector<float>(d, d + std::size_t(rows) * cols)};
      for (int r = 0; r < rows; ++r)
        std::reverse(m.data.begin() + std::ptrdiff_t(r) * cols, m.data.begin() + std::ptrdiff_t(r + 1) * cols);
      got[n] = m;
    }
  } rec;
  rec.names = gates;
  model::score_all_rows(test::routed_model(spec, MoeRoutingPattern::Direct), toks, model::ScanMode::Exact, &rec);
  const fs::path dir = test::scratch_dir("nemotron_forced");
  accuracy::Captures c;
  accuracy::PromptCapture pc;
  pc.prompt_token_ids.assign(toks.begin(), toks.begin() + 20);
  pc.continuation_token_ids.assign(toks.begin() + 20, toks.end());
  pc.flat = rec.got;
  c.prompts.push_back(pc);
  const std::string file = (dir / "forced.safetensors").string();
  accuracy::write_captures(file, c);

  std::vector<std::vector<float>> scores;
  for (auto p : test::kPatterns) {
    SCOPED_TRACE(model::moe_routing_name(p));
    const auto& m = test::routed_model(spec, p);
    accuracy::ReplacementConfig cfg;
    cfg.tensors_path = file;
    cfg.prompt_token_ids = std::vector<std::vector<int32_t>>{pc.prompt_token_ids};
    accuracy::ReplacementSession single(cfg, m);
    single.replacer().register_request(0, toks);
    scores.push_back(model::score_all_rows(m, toks, model::ScanMode::Exact, &single.hooks()));
    accuracy::ReplacementSession eng(cfg, m);
    const auto rows = test::engine_rows(m, toks, 20, chunked(model::ScanMode::Exact, 13),
                                        [&](engine::Engine& e) { eng.attach(e); });
    ASSERT_EQ(rows.size(), scores.back().size());
    EXPECT_TRUE(test::same_bits(rows.data(), scores.back().data(), rows.size()));
  }
  EXPECT_TRUE(test::same_bits(scores[0].data(), scores[1].data(), scores[0].size()));
  // The same values written in place at the probe point (after the router GEMM ran) give the same bits.
  struct Write : model::ProbeHooks {
    const std::map<std::string, accuracy::Matrix>* rows = nullptr;
    bool wants(const std::string& n) const override { return rows->count(n) > 0; }
    void visit(const std::string& n, float* x, int r, int cols, const model::ProbeRows&) override {
      ASSERT_EQ(rows->at(n).data.size(), std::size_t(r) * cols);
      std::copy(rows->at(n).data.begin(), rows->at(n).data.end(), x);
    }
  } write;
  write.rows = &rec.got;
  const auto edited =
      model::score_all_rows(test::routed_model(spec, MoeRoutingPattern::Direct), toks, model::ScanMode::Exact, &write);
  EXPECT_TRUE(test::same_bits(edited.data(), scores[0].data(), edited.size()));
  const auto natural = model::score_all_rows(test::routed_model(spec, MoeRoutingPattern::Direct), toks);
  EXPECT_FALSE(test::same_bits(natural.data(), scores[0].data(), natural.size())) << "the injection must reroute";
  fs::remove_all(dir);
}

// Top-4 of 8: the dense path must keep the top-k order to stay bitwise with the direct one.
TEST(RouterPatterns, TopFourRoutingDirectAndFusedGiveTheSameBits) {
  const fs::path dir = test::scratch_dir("granite_top4");
  for (const char* f : {"model.safetensors", "tokens.json"}) fs::copy_file(test::kGraniteFixture + "/" + f, dir / f);
  nlohmann::json cfg;
  std::ifstream(test::kGraniteFixture + "/config.json") >> cfg;
  cfg["num_experts_per_tok"] = 4;
  test::write_text(dir / "config.json", cfg.dump(2));
  const auto toks = test::granite_fixture_tokens();
  const auto& direct = test::routed_model(dir.string(), MoeRoutingPattern::Direct);
  const auto& fused = test::routed_model(dir.string(), MoeRoutingPattern::Fused);
  for (bool replace : {false, true}) {
    SCOPED_TRACE(replace ? "forced router logits injected" : "no replacement");
    expect_same_runs(run_pattern(direct, toks, replace), run_pattern(fused, toks, replace));
  }
  const auto top2 = model::score_all_rows(test::routed_model(test::kGraniteFixture, MoeRoutingPattern::Direct), toks);
  const auto top4 = model::score_all_rows(direct, toks);
  EXPECT_FALSE(test::same_bits(top2.data(), top4.data(), top2.size())) << "top-4 must route differently";
  fs::remove_all(dir);
}

// Capture at the router point works in both patterns, and with replacement chained before it
// (the fetched values are what the capture records).
TEST(RouterPatterns, RouterCaptureSeesWhatTheBlockUsed) {
  const auto toks = test::granite_fixture_tokens();
  const std::vector<int32_t> prompt(toks.begin(), toks.begin() + 20), forced(toks.begin() + 20, toks.begin() + 40);
  const std::string router0 = "model.layers.0.block_sparse_moe.router", router3 = "model.layers.3.block_sparse_moe.router";
  const auto injected = accuracy::read_captures(test::kGraniteFixture + "/forced_router_logits.safetensors");
  std::vector<accuracy::Captures> natural;
  for (auto p : test::kPatterns) {
    const auto& m = test::routed_model(test::kGraniteFixture, p);
    accuracy::CaptureSpec spec;
    spec.prompts = {prompt};
    spec.forced = {forced};
    spec.modules = {router0, router3};
    spec.engine = chunked(model::ScanMode::Exact, 16);
    natural.push_back(accuracy::capture_through_engine(m, spec));
    auto session = forced_session(m, 20);
    spec.replacement = session.get();
    const auto got = accuracy::capture_through_engine(m, spec);
    for (const auto& name : {router0, router3}) {
      const auto& g = got.prompts[0].flat.at(name);
      ASSERT_EQ(g.rows, 40);
      EXPECT_TRUE(test::same_bits(g.data.data(), injected.prompts[0].flat.at(name).data.data(), g.data.size()))
          << name;
    }
  }
  for (const auto& name : {router0, router3}) {
    const auto &a = natural[0].prompts[0].flat.at(name), &b = natural[1].prompts[0].flat.at(name);
    EXPECT_TRUE(test::same_bits(a.data.data(), b.data.data(), a.data.size())) << name;
  }
}
