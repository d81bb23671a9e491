// The hybrid families against Hugging Face: each fixture in tests/data/<family> (tools/hf_reference.py, HF's own
// model in float64 with its fp32 casts removed) scored by parity, every row within 1e-5 relative of the reference
// row, in exact and plain mode; `parity verify`'s gate on the fixture; for the MoE fixture the router probe
// against HF's router logits and the forced-routing reference in both routing patterns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "accuracy/captures_file.h"
#include "engine/exactness_gate.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "test_support.h"

using namespace parity;

namespace {

std::string dir_of(const std::string& f) { return std::string(PARITY_TEST_DATA) + "/" + f; }

const model::Model& fixture_model(const std::string& f, model::MoeRoutingPattern p = model::MoeRoutingPattern::Direct) {
  static std::map<std::pair<std::string, int>, std::unique_ptr<model::Model>> cache;
  auto& m = cache[{f, static_cast<int>(p)}];
  if (!m) {
    model::ModelOptions o;
    o.moe_routing = p;
    m = model::load_model(model::open_checkpoint(dir_of(f)), o);
  }
  return *m;
}

// The worst row's ‖got − ref‖ / ‖ref‖.
double worst_row(const float* got, const float* ref, std::size_t rows, std::size_t cols) {
  double worst = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    double num = 0, den = 0;
    for (std::size_t c = 0; c < cols; ++c) {
      const double d = static_cast<double>(got[r * cols + c]) - ref[r * cols + c];
      num += d * d;
      den += static_cast<double>(ref[r * cols + c]) * ref[r * cols + c];
    }
    worst = std::max(worst, std::sqrt(num / den));
  }
  return worst;
}

std::vector<float> fixture_logits(const std::string& path) {
  auto f = io::SafetensorsFile::open(path);
  const io::TensorView* t = f->find("logits");
  if (!t || t->dtype != DType::F32) throw std::runtime_error(path + ": no F32 logits");
  const float* p = static_cast<const float*>(t->data);
  return std::vector<float>(p, p + t->nbytes / 4);
}

class HybridFixture : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(HybridFixture, EveryRowWithin1e5OfHuggingFaceFloat64) {
  const auto& m = fixture_model(GetParam());
  const auto toks = io::read_tokens(dir_of(GetParam()) + "/tokens.json");
  const auto ref = fixture_logits(dir_of(GetParam()) + "/reference_logits.safetensors");
  ASSERT_EQ(ref.size(), toks.size() * static_cast<std::size_t>(m.vocab_size()));
  for (auto mode : {model::ScanMode::Exact, model::ScanMode::Plain}) {
    const auto got = model::score_all_rows(m, toks, mode);
    const double w = worst_row(got.data(), ref.data(), toks.size(), static_cast<std::size_t>(m.vocab_size()));
    std::fprintf(stderr, "[ measured ] %s %s: worst row relative %.3g\n", GetParam().c_str(),
                 mode == model::ScanMode::Exact ? "exact" : "plain", w);
    EXPECT_LE(w, 1e-5);
    EXPECT_GT(w, 0.0) << "fp32 against float64 cannot be exact";
  }
}

TEST_P(HybridFixture, ExactGatePassesOnTheFixture) {
  const auto& m = fixture_model(GetParam());
  engine::GateOptions g;
  g.modes = {model::ScanMode::Exact};
  int ran = 0;
  for (const auto& r : engine::run_exactness_gate(m, g)) {
    SCOPED_TRACE(r.scenario);
    if (!r.not_run.empty()) continue;
    ++ran;
    EXPECT_EQ(r.all.mismatched, 0);
  }
  EXPECT_GE(ran, 8) << "the gate's scenarios did not run";
}

// The companion on one fixture: plain mode (vLLM's numerics) under the same scenarios does part, so the gate can fail.
TEST(HybridFixturePlain, GateFindsMismatchesInPlainMode) {
  const auto& m = fixture_model("nemotron_h_moe");
  engine::GateOptions g;
  g.modes = {model::ScanMode::Plain};
  int64_t mismatched = 0;
  for (const auto& r : engine::run_exactness_gate(m, g))
    if (r.not_run.empty()) mismatched += r.all.mismatched;
  EXPECT_GT(mismatched, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, HybridFixture,
                         ::testing::Values("nemotron_h", "nemotron_h_moe", "bamba", "falcon_h1", "falcon_h1_norm"));

TEST(HybridFixtureMoe, RouterProbeMatchesHfAndForcedRoutingInBothPatterns) {
  const std::string f = "nemotron_h_moe";
  const auto hf = accuracy::read_captures(dir_of(f) + "/router_logits.safetensors");
  ASSERT_EQ(hf.prompts.size(), 1u);
  const auto& p = hf.prompts[0];
  struct Rec : model::ProbeHooks {
    std::map<std::string, std::vector<float>> got;
    bool wants(const std::string& n) const override { return n.size() > 5 && n.substr(n.size() - 5) == ".gate"; }
    void visit(const std::string& n, float* d, int rows, int cols, const model::ProbeRows&) override {
      got[n].assign(d, d + std::size_t(rows) * cols);
    }
  } rec;
  model::score_all_rows(fixture_model(f), p.prompt_token_ids, model::ScanMode::Exact, &rec);
  ASSERT_FALSE(p.flat.empty());
  for (const auto& [name, want] : p.flat) {
    SCOPED_TRACE(name);
    ASSERT_EQ(rec.got[name].size(), want.data.size());
    EXPECT_LE(worst_row(rec.got[name].data(), want.data.data(), want.data.size() / want.cols, want.cols), 1e-5);
  }
  // Forced routing: inject forced_router_logits at every .gate (in place), compare with HF under the same forcing.
  const auto forced = accuracy::read_captures(dir_of(f) + "/forced_router_logits.safetensors");
  const auto fref = fixture_logits(dir_of(f) + "/forced_reference_logits.safetensors");
  struct Inject : model::ProbeHooks {
    const std::map<std::string, accuracy::Matrix>* rows;
    bool wants(const std::string& n) const override { return rows->count(n) > 0; }
    void visit(const std::string& n, float* d, int r, int c, const model::ProbeRows&) override {
      const auto& m = rows->at(n);
      ASSERT_EQ(m.data.size(), std::size_t(r) * c);
      std::copy(m.data.begin(), m.data.end(), d);
    }
  } inj;
  inj.rows = &forced.prompts[0].flat;
  std::vector<std::vector<float>> outs;
  for (auto pat : {model::MoeRoutingPattern::Direct, model::MoeRoutingPattern::Fused}) {
    const auto& m = fixture_model(f, pat);
    outs.push_back(model::score_all_rows(m, p.prompt_token_ids, model::ScanMode::Exact, &inj));
    EXPECT_LE(worst_row(outs.back().data(), fref.data(), p.prompt_token_ids.size(),
                        static_cast<std::size_t>(m.vocab_size())),
              1e-5);
  }
  EXPECT_TRUE(test::same_bits(outs[0].data(), outs[1].data(), outs[0].size()));
}
