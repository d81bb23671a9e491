// Router replacement against Hugging Face (issue #5): router logits that move most tokens' top-2
// experts are injected into HF float64 and into parity (tests/data/granite_hybrid,
// forced_router_logits.safetensors, made by tools/hf_reference.py --forced-routing); parity's
// logits must then equal HF's (forced_reference_logits.safetensors) in both integration patterns,
// exact and plain, single-shot and chunked. Without the injection they are far off. Bad injection
// input is a parity::Error. The command line does the same through --additional-config.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "accuracy/active_context.h"
#include "accuracy/captures_file.h"
#include "accuracy/replacement_hooks.h"
#include "accuracy/replacement_session.h"
#include "common/error.h"
#include "io/token_file.h"
#include "router_patterns_support.h"
#include "error_test_support.h"
#include "test_support.h"

using namespace parity;
using test::error_of;
using model::MoeRoutingPattern;
using test::kGraniteFixture;
namespace fs = std::filesystem;

namespace {

const std::string kForcedRouters = kGraniteFixture + "/forced_router_logits.safetensors";
const std::string kForcedLogits = kGraniteFixture + "/forced_reference_logits.safetensors";
const std::string kNaturalRouters = kGraniteFixture + "/router_logits.safetensors";
const std::string kNaturalLogits = kGraniteFixture + "/reference_logits.safetensors";
constexpr std::size_t kFixturePrompt = 40;  // engine runs: 40 prompt tokens, 60 teacher-forced
constexpr int kFixtureVocab = 256;

std::unique_ptr<accuracy::ReplacementSession> session(const model::Model& m, const std::string& path,
                                                      std::size_t prompt_len) {
  accuracy::ReplacementConfig cfg;
  cfg.tensors_path = path;
  const auto t = test::granite_fixture_tokens();
  cfg.prompt_token_ids = std::vector<std::vector<int32_t>>{
      std::vector<int32_t>(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(prompt_len))};
  return std::make_unique<accuracy::ReplacementSession>(cfg, m);
}

const char* mode_name(model::ScanMode m) { return m == model::ScanMode::Exact ? "exact" : "plain"; }

// All 100 rows: single-shot score (mode as given) or the engine at a 16-token budget (prefill in
// chunks of 16 that do not align with the Mamba chunk of 32, then one token per step). The SSM
// cache is fp32 in both modes unless given: plain mode's default bf16 state alone moves the logits
// by ~6e-5 relative, which is the cache's rounding, not the routing.
std::vector<float> routed_logits(const model::Model& m, model::ScanMode mode, bool engine, const std::string& routers,
                                 DType ssm_cache = DType::F32) {
  const auto t = test::granite_fixture_tokens();
  if (!engine) {
    auto s = routers.empty() ? nullptr : session(m, routers, t.size());
    if (s) s->replacer().register_request(0, t);
    return model::score_all_rows(m, t, mode, s ? &s->hooks() : nullptr);
  }
  auto s = routers.empty() ? nullptr : session(m, routers, kFixturePrompt);
  engine::EngineConfig cfg;
  cfg.mode = mode;
  cfg.ssm_cache_dtype = ssm_cache;
  cfg.sched.max_num_batched_tokens = 16;
  return test::engine_rows(m, t, kFixturePrompt, cfg, [&](engine::Engine& e) {
    if (s) s->attach(e);
  });
}

}  // namespace

TEST(ForcedRouting, InjectedRouterLogitsReproduceHuggingFace) {
  const auto ref = test::read_logits(kForcedLogits);
  ASSERT_EQ(ref.size(), test::granite_fixture_tokens().size() * kFixtureVocab);
  double worst = 0;
  for (auto p : test::kPatterns)
    for (auto mode : {model::ScanMode::Exact, model::ScanMode::Plain})
      for (bool engine : {false, true}) {
        const std::string what = std::string(model::moe_routing_name(p)) + "/" + mode_name(mode) + "/" +
                                 (engine ? "engine-budget16" : "score");
        SCOPED_TRACE(what);
        const auto got = routed_logits(test::routed_model(kGraniteFixture, p), mode, engine, kForcedRouters);
        ASSERT_EQ(got.size(), ref.size());
        const double e = test::rel_fro(got.data(), ref.data(), ref.size());
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.3g", e);
        RecordProperty("rel_fro_" + what, buf);
        EXPECT_LE(e, 1e-5);
        EXPECT_GT(e, 0.0) << "fp32 against HF float64 cannot be exact";
        worst = std::max(worst, e);
      }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", worst);
  RecordProperty("rel_fro_worst", buf);
  // Plain mode with its default bf16 SSM cache: the routing is still HF's, the state is rounded.
  for (auto p : test::kPatterns) {
    const auto got = routed_logits(test::routed_model(kGraniteFixture, p), model::ScanMode::Plain, true, kForcedRouters,
                                   DType::BF16);
    const double e = test::rel_fro(got.data(), ref.data(), ref.size());
    std::snprintf(buf, sizeof buf, "%.3g", e);
    RecordProperty(std::string("rel_fro_") + model::moe_routing_name(p) + "/plain-bf16-cache/engine-budget16", buf);
    EXPECT_LE(e, 1e-3);
  }
}

// The companion: the same runs without the injection route by parity's own router and are far
// from HF's forced-routing logits, so the check above can fail.
TEST(ForcedRouting, WithoutInjectionTheLogitsAreFarOff) {
  const auto ref = test::read_logits(kForcedLogits);
  for (auto p : test::kPatterns)
    for (bool engine : {false, true}) {
      const auto got = routed_logits(test::routed_model(kGraniteFixture, p), model::ScanMode::Exact, engine, "");
      const double e = test::rel_fro(got.data(), ref.data(), ref.size());
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3g", e);
      RecordProperty(std::string("rel_fro_uninjected_") + model::moe_routing_name(p) + (engine ? "_engine" : "_score"),
                     buf);
      EXPECT_GT(e, 0.1);
    }
}

// HF's own (natural) router logits injected give HF's natural logits.
TEST(ForcedRouting, NaturalHfRouterLogitsReproduceReferenceLogits) {
  const auto ref = test::read_logits(kNaturalLogits);
  for (auto p : test::kPatterns)
    for (bool engine : {false, true}) {
      const auto got =
          routed_logits(test::routed_model(kGraniteFixture, p), model::ScanMode::Exact, engine, kNaturalRouters);
      ASSERT_EQ(got.size(), ref.size());
      const double e = test::rel_fro(got.data(), ref.data(), ref.size());
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3g", e);
      RecordProperty(std::string("rel_fro_natural_") + model::moe_routing_name(p) + (engine ? "_engine" : "_score"),
                     buf);
      EXPECT_LE(e, 1e-5);
    }
}

namespace {

// A router captures file with one tensor of the given shape for `module` (plus the fixture's ids).
std::string write_router_file(const fs::path& dir, const std::string& module, std::vector<int64_t> shape) {
  const auto t = test::granite_fixture_tokens();
  std::vector<int64_t> ids(t.begin(), t.end());
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<std::size_t>(n), 0.25f);
  const std::string path = (dir / (std::to_string(shape.size()) + "_" + std::to_string(n) + ".safetensors")).string();
  io::write_safetensors(path,
                        {{"p0/" + module, DType::F32, shape, v.data()},
                         {"p0/prompt_token_ids", DType::I64, {static_cast<int64_t>(ids.size())}, ids.data()}},
                        {{"layout", "flat"}, {"modules", module}, {"num_prompts", "1"}});
  return path;
}

}  // namespace

TEST(ForcedRouting, BadInjectionInputIsAClearError) {
  const fs::path dir = test::scratch_dir("bad_router");
  const std::string r0 = "model.layers.0.block_sparse_moe.router";
  for (auto p : test::kPatterns) {
    const auto& m = test::routed_model(kGraniteFixture, p);
    auto open = [&](const std::string& path) {
      accuracy::ReplacementConfig cfg;
      cfg.tensors_path = path;
      accuracy::ReplacementSession s(cfg, m);
      s.replacer().register_request(0, test::granite_fixture_tokens());
      model::score_all_rows(m, test::granite_fixture_tokens(), model::ScanMode::Exact, &s.hooks());
    };
    // Wrong expert count.
    std::string msg = error_of([&] { open(write_router_file(dir, r0, {100, 7})); });
    EXPECT_NE(msg.find("7 features"), std::string::npos) << msg;
    EXPECT_NE(msg.find("8 in the model"), std::string::npos) << msg;
    // A layer the model does not have; a name that is no probe point.
    msg = error_of([&] { open(write_router_file(dir, "model.layers.4.block_sparse_moe.router", {100, 8})); });
    EXPECT_NE(msg.find("not a probe point"), std::string::npos) << msg;
    msg = error_of([&] { open(write_router_file(dir, "model.layers.0.block_sparse_moe.gate", {100, 8})); });
    EXPECT_NE(msg.find("not a probe point"), std::string::npos) << msg;
    // Wrong shape: fewer positions than the prompt, a 1-D tensor, a 3-D flat tensor.
    msg = error_of([&] { open(write_router_file(dir, r0, {60, 8})); });
    EXPECT_NE(msg.find("60 positions"), std::string::npos) << msg;
    msg = error_of([&] { open(write_router_file(dir, r0, {800})); });
    EXPECT_NE(msg.find("must be [positions, E], found [800]"), std::string::npos) << msg;
    msg = error_of([&] { open(write_router_file(dir, r0, {1, 100, 8})); });
    EXPECT_NE(msg.find("must be [positions, E], found [1, 100, 8]"), std::string::npos) << msg;
    // The seed's bucketed context handed to the direct interception with the wrong width or too
    // few slots.
    accuracy::ContextHooks ctx;
    auto with_context = [&](int64_t rows, int64_t cols) {
      auto c = std::make_shared<accuracy::ReplacementContext>();
      (*c)[r0] = accuracy::Matrix{rows, cols, std::vector<float>(static_cast<std::size_t>(rows * cols), 0.5f)};
      accuracy::ActiveContextScope scope(c);
      model::score_all_rows(m, test::granite_fixture_tokens(), model::ScanMode::Exact, &ctx);
    };
    msg = error_of([&] { with_context(100, 9); });
    EXPECT_NE(msg.find("9 features"), std::string::npos) << msg;
    msg = error_of([&] { with_context(50, 8); });
    EXPECT_NE(msg.find("50 slots"), std::string::npos) << msg;
    EXPECT_NO_THROW(with_context(100, 8));
  }
  fs::remove_all(dir);
}

// The seed's context path (get_replacement_tensor inside the model) and the native per-row path
// inject the same rows: the same bits.
TEST(ForcedRouting, SeedContextAndNativeHooksGiveTheSameBits) {
  const auto injected = accuracy::read_captures(kForcedRouters);
  auto ctx = std::make_shared<accuracy::ReplacementContext>(injected.prompts[0].flat);
  for (auto p : test::kPatterns) {
    const auto& m = test::routed_model(kGraniteFixture, p);
    const auto native = routed_logits(m, model::ScanMode::Exact, false, kForcedRouters);
    accuracy::ContextHooks hooks;
    accuracy::ActiveContextScope scope(ctx);
    const auto seed = model::score_all_rows(m, test::granite_fixture_tokens(), model::ScanMode::Exact, &hooks);
    EXPECT_TRUE(test::same_bits(native.data(), seed.data(), native.size())) << model::moe_routing_name(p);
  }
}

namespace {

std::string replacement_json(const std::string& ids_path) {
  std::string j = "{\"tensor_replacement\": {\"tensors_path\": \"" + kForcedRouters + "\"";
  if (!ids_path.empty()) j += ", \"prompt_token_ids_path\": \"" + ids_path + "\"";
  return "'" + j + "}}'";
}

}  // namespace

TEST(ForcedRoutingCli, ScoreGenerateAndValidateWithRouterReplacement) {
  const fs::path dir = test::scratch_dir("forced_cli");
  const auto t = test::granite_fixture_tokens();
  const auto ref = test::read_logits(kForcedLogits);
  const std::string ids_path = (dir / "ids.json").string();
  test::write_text(ids_path, "[[" + test::id_list(std::span(t).first(kFixturePrompt)) + "]]");
  for (const char* pattern : {"direct", "fused"}) {
    SCOPED_TRACE(pattern);
    // score: the file's own prompt ids (the whole stream) match the scored tokens.
    const std::string out = (dir / "score.safetensors").string();
    auto r = test::run_cli("score " + kGraniteFixture + " --tokens " + kGraniteFixture + "/tokens.json --out " + out +
                           " --moe-routing " + pattern + " --additional-config " + replacement_json("") + " --threads 2");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("400 rows replaced"), std::string::npos) << r.err;
    auto got = test::read_logits(out);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_LE(test::rel_fro(got.data(), ref.data(), ref.size()), 1e-5);

    // generate, chunked, exact: rows P-1 … 99.
    const std::string dump = (dir / "gen.safetensors").string();
    r = test::run_cli("generate " + kGraniteFixture + " --prompt " + test::id_list(std::span(t).first(kFixturePrompt)) +
                      " --forced " + test::id_list(std::span(t).subspan(kFixturePrompt)) +
                      " --exact --max-num-batched-tokens 16 --dump-logits " + dump + " --moe-routing " + pattern +
                      " --additional-config " + replacement_json(ids_path) + " --threads 2");
    ASSERT_EQ(r.status, 0) << r.err;
    got = test::read_logits(dump);
    const std::size_t first = (kFixturePrompt - 1) * kFixtureVocab;
    ASSERT_EQ(got.size(), ref.size() - first);
    EXPECT_LE(test::rel_fro(got.data(), ref.data() + first, got.size()), 1e-5);
  }

  // validate: HF's forced-routing logits as the reference (lm_head rows, the stream as the
  // continuation). With the injection it passes; without, it fails.
  accuracy::Captures c;
  accuracy::PromptCapture pc;
  pc.prompt_token_ids.assign(t.begin(), t.begin() + kFixturePrompt);
  pc.continuation_token_ids.assign(t.begin() + kFixturePrompt, t.end());
  pc.flat["lm_head"] = accuracy::Matrix{static_cast<int64_t>(t.size()), kFixtureVocab, ref};
  c.prompts.push_back(pc);
  const std::string vref = (dir / "validate_ref.safetensors").string();
  accuracy::write_captures(vref, c);
  for (const char* pattern : {"direct", "fused"}) {
    auto r = test::run_cli("validate " + kGraniteFixture + " --reference " + vref +
                           " --exact --max-num-batched-tokens 16 --max-tokens 20 --moe-routing " + pattern +
                           " --additional-config " + replacement_json(ids_path) + " --threads 2");
    EXPECT_EQ(r.status, 0) << pattern << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("PASSED"), std::string::npos) << r.out;
  }
  auto r = test::run_cli("validate " + kGraniteFixture + " --reference " + vref + " --exact --max-tokens 20 --threads 2");
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAILED"), std::string::npos) << r.out;

  r = test::run_cli("score " + kGraniteFixture + " --tokens 1,2,3 --out " + (dir / "x.safetensors").string() +
                    " --moe-routing sideways");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("moe-routing"), std::string::npos) << r.err;
  fs::remove_all(dir);
}
