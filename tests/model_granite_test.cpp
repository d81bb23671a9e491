// GraniteMoeHybridForCausalLM forward: the fixture's logits against the float64 reference, the
// router probe against Hugging Face's router logits, replacement of the router tensor, and
// bad checkpoints (missing tensor, wrong shape) named in the error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "accuracy/captures_file.h"
#include "accuracy/module_order.h"
#include "common/error.h"
#include "engine/exactness_gate.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "test_support.h"

using namespace parity;
namespace fs = std::filesystem;

namespace {

const std::string kFixture = std::string(PARITY_TEST_DATA) + "/granite_hybrid";

const model::Model& fixture() {
  static auto m = model::load_model(model::open_checkpoint(kFixture));
  return *m;
}

struct Err {
  double rel = 0, max_abs = 0;
};

Err error_vs(const float* got, const float* ref, std::size_t n) {
  double num = 0, den = 0;
  Err e;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
    e.max_abs = std::max(e.max_abs, std::fabs(d));
  }
  e.rel = std::sqrt(num / den);
  return e;
}

// Records every row of the probed modules of a single-shot pass.
class Recorder : public model::ProbeHooks {
 public:
  explicit Recorder(std::vector<std::string> names) : names_(std::move(names)) {}
  bool wants(const std::string& n) const override {
    return std::find(names_.begin(), names_.end(), n) != names_.end();
  }
  void visit(const std::string& n, float* d, int rows, int cols, const model::ProbeRows&) override {
    got[n].assign(d, d + std::size_t(rows) * cols);
  }
  std::map<std::string, std::vector<float>> got;

 private:
  std::vector<std::string> names_;
};

// Overwrites one module's tensor with given rows.
class Replacer : public model::ProbeHooks {
 public:
  Replacer(std::string name, std::vector<float> rows) : name_(std::move(name)), rows_(std::move(rows)) {}
  bool wants(const std::string& n) const override { return n == name_; }
  void visit(const std::string&, float* d, int rows, int cols, const model::ProbeRows&) override {
    ASSERT_EQ(rows_.size(), std::size_t(rows) * cols);
    std::copy(rows_.begin(), rows_.end(), d);
  }

 private:
  std::string name_;
  std::vector<float> rows_;
};

std::string router(int l) { return "model.layers." + std::to_string(l) + ".block_sparse_moe.router"; }

}  // namespace

TEST(GraniteHybrid, FixtureLogitsMatchFloat64Reference) {
  const auto toks = io::read_tokens(kFixture + "/tokens.json");
  auto ref_file = io::SafetensorsFile::open(kFixture + "/reference_logits.safetensors");
  const io::TensorView* ref = ref_file->find("logits");
  ASSERT_NE(ref, nullptr);
  ASSERT_EQ(ref->dtype, DType::F32);
  ASSERT_EQ(ref->shape, (std::vector<int64_t>{static_cast<int64_t>(toks.size()), fixture().vocab_size()}));
  const auto got = model::score_all_rows(fixture(), toks);
  const Err e = error_vs(got.data(), static_cast<const float*>(ref->data), got.size());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", e.rel);
  RecordProperty("relative_frobenius", buf);
  std::snprintf(buf, sizeof buf, "%.3g", e.max_abs);
  RecordProperty("max_abs", buf);
  EXPECT_LE(e.rel, 1e-5);
  EXPECT_LE(e.max_abs, 1e-3);
  EXPECT_GT(e.rel, 0.0) << "fp32 against float64 cannot be exact; a zero means the reference is not independent";
  // Plain mode (the chunk grid at 0) is as accurate; exact mode with a bf16 state pays bf16's
  // resolution at every grid boundary (figures in docs/exact-mode.md).
  const auto plain = model::score_all_rows(fixture(), toks, model::ScanMode::Plain);
  EXPECT_LE(error_vs(plain.data(), static_cast<const float*>(ref->data), plain.size()).rel, 1e-5);
  const cache::Numerics bf16 =
      cache::resolve_numerics(true, DType::BF16, std::nullopt, cache::StaggerChoice::Auto, fixture().chunk_size());
  const auto exact_bf16 = model::score_all_rows(fixture(), toks, bf16);
  const Err eb = error_vs(exact_bf16.data(), static_cast<const float*>(ref->data), exact_bf16.size());
  std::fprintf(stderr, "[ measured ] granite_hybrid: exact f32 relative %.3g max |d| %.3g; %s relative %.3g max |d| %.3g\n",
               e.rel, e.max_abs, bf16.describe().c_str(), eb.rel, eb.max_abs);
  EXPECT_LE(eb.rel, 5e-4);
  EXPECT_GT(eb.rel, e.rel) << "a bf16 state must cost accuracy: is it rounded at the boundaries?";
}

TEST(GraniteHybrid, RouterProbeMatchesHuggingFaceRouterLogits) {
  const auto hf = accuracy::read_captures(kFixture + "/router_logits.safetensors");
  ASSERT_EQ(hf.prompts.size(), 1u);
  const auto& p = hf.prompts[0];
  std::vector<std::string> names;
  for (int l = 0; l < 4; ++l) names.push_back(router(l));
  Recorder rec(names);
  model::score_all_rows(fixture(), p.prompt_token_ids, model::ScanMode::Exact, &rec);
  for (const auto& n : names) {
    const accuracy::Matrix& want = p.flat.at(n);
    ASSERT_EQ(want.cols, 8);
    ASSERT_EQ(rec.got[n].size(), want.data.size()) << n;
    const Err e = error_vs(rec.got[n].data(), want.data.data(), want.data.size());
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g / %.3g", e.rel, e.max_abs);
    RecordProperty(n, buf);
    EXPECT_LE(e.rel, 1e-5) << n;
    EXPECT_LE(e.max_abs, 1e-4) << n;
    // The same two experts for every token: compare the top-2 sets.
    for (int64_t t = 0; t < want.rows; ++t) {
      auto top2 = [](const float* r) {
        int a = 0;
        for (int e2 = 1; e2 < 8; ++e2) if (r[e2] > r[a]) a = e2;
        int b = a == 0 ? 1 : 0;
        for (int e2 = 0; e2 < 8; ++e2) if (e2 != a && r[e2] > r[b]) b = e2;
        return std::make_pair(std::min(a, b), std::max(a, b));
      };
      EXPECT_EQ(top2(rec.got[n].data() + t * 8), top2(want.row(t))) << n << " token " << t;
    }
  }
}

// The router probe is a replacement point: other logits there change which experts run.
TEST(GraniteHybrid, ReplacingRouterLogitsChangesTheRouting) {
  const auto toks = io::read_tokens(kFixture + "/tokens.json");
  const std::vector<int32_t> t(toks.begin(), toks.begin() + 20);
  const auto base = model::score_all_rows(fixture(), t);
  Recorder rec({router(2)});
  model::score_all_rows(fixture(), t, model::ScanMode::Exact, &rec);
  // The same values written back keep every bit.
  Replacer same(router(2), rec.got[router(2)]);
  const auto kept = model::score_all_rows(fixture(), t, model::ScanMode::Exact, &same);
  EXPECT_TRUE(test::same_bits(base.data(), kept.data(), base.size()));
  // Reversed expert order: the selected experts change, so the logits do.
  std::vector<float> rev = rec.got[router(2)];
  for (std::size_t r = 0; r < rev.size(); r += 8) std::reverse(rev.begin() + r, rev.begin() + r + 8);
  Replacer other(router(2), rev);
  const auto moved = model::score_all_rows(fixture(), t, model::ScanMode::Exact, &other);
  EXPECT_FALSE(test::same_bits(base.data(), moved.data(), base.size()));
  // Rows are causal: layer 2's router of token 0 changes only token 0's row onward (all rows here).
  EXPECT_NE(base[0], moved[0]);
}

TEST(GraniteHybrid, ProbePointsUseHuggingFaceNames) {
  std::vector<std::string> names;
  for (const auto& p : fixture().probe_points()) names.push_back(p.name);
  for (const char* n : {"model.embed_tokens", "model.layers.0.mamba.in_proj", "model.layers.0.mamba",
                        "model.layers.1.self_attn", "model.layers.1.self_attn.q_proj", "model.layers.3.block_sparse_moe.router",
                        "model.layers.3.block_sparse_moe", "model.layers.3.shared_mlp", "model.layers.3", "model.norm",
                        "lm_head"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  // compare's module order (read from files, without the model) agrees with the forward order.
  std::vector<std::string> sorted = names;
  accuracy::sort_forward(sorted);
  EXPECT_EQ(sorted, names);
  EXPECT_EQ(fixture().architecture(), "GraniteMoeHybridForCausalLM");
  EXPECT_EQ(fixture().cache_spec().num_mamba_layers, 2);
  EXPECT_EQ(fixture().cache_spec().num_attention_layers, 2);
}

// ---- bad checkpoints: the error names the tensor.

class GraniteBadCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = test::scratch_dir("granite_bad");
    fs::copy_file(kFixture + "/config.json", dir / "config.json");
    src = io::SafetensorsFile::open(kFixture + "/model.safetensors");
  }
  void TearDown() override { fs::remove_all(dir); }
  // Rewrites model.safetensors: `drop` left out, `reshape` given shape {2, 2} with 4 elements.
  void write(const std::string& drop, const std::string& reshape) {
    std::vector<io::TensorToWrite> ts;
    static const float small[4] = {1, 2, 3, 4};
    for (const auto& t : src->tensors()) {
      if (t.name == drop) continue;
      if (t.name == reshape) ts.push_back({t.name, DType::F32, {2, 2}, small});
      else ts.push_back({t.name, t.dtype, t.shape, t.data});
    }
    io::write_safetensors((dir / "model.safetensors").string(), ts, {{"format", "pt"}});
  }
  std::string load_error() {
    try {
      model::load_model(model::open_checkpoint(dir.string()));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir;
  std::shared_ptr<io::SafetensorsFile> src;
};

TEST_F(GraniteBadCheckpoint, MissingTensorIsNamed) {
  for (const char* n : {"model.layers.1.self_attn.k_proj.weight", "model.layers.2.block_sparse_moe.router.layer.weight",
                        "model.layers.0.mamba.A_log", "model.layers.3.shared_mlp.output_linear.weight"}) {
    write(n, "");
    const std::string e = load_error();
    EXPECT_NE(e.find(n), std::string::npos) << e;
    EXPECT_NE(e.find("missing"), std::string::npos) << e;
  }
}

TEST_F(GraniteBadCheckpoint, WrongShapeIsNamed) {
  for (const char* n : {"model.layers.1.self_attn.o_proj.weight", "model.layers.0.block_sparse_moe.input_linear.weight",
                        "model.layers.2.mamba.in_proj.weight", "lm_head.weight"}) {
    write("", n);
    const std::string e = load_error();
    EXPECT_NE(e.find(n), std::string::npos) << e;
    EXPECT_NE(e.find("[2, 2]"), std::string::npos) << e;
  }
}

TEST_F(GraniteBadCheckpoint, UnknownArchitectureListsTheSupportedOnes) {
  test::write_text(dir / "config.json", R"({"architectures": ["JambaForCausalLM"], "hidden_size": 64})");
  write("", "");
  const std::string e = load_error();
  EXPECT_NE(e.find("JambaForCausalLM"), std::string::npos) << e;
  EXPECT_NE(e.find("GraniteMoeHybridForCausalLM"), std::string::npos) << e;
  EXPECT_NE(e.find("Mamba2ForCausalLM"), std::string::npos) << e;
}

// Variants the fixture does not cover: no experts (the shared MLP alone is the FFN, as in
// granite-4.0-h-350m), no position embedding (the Granite 4.0 H checkpoints are NoPE) and no Mamba
// layer at all (a cache with KV blocks only; layers 0 and 2 borrow the attention weights of 1 and 3). Each
// changes the logits and stays bit-identical to single-shot prefill under decode and chunked prefill.
TEST(GraniteHybrid, DenseNopeAndAttentionOnlyVariantsAreScheduleInvariant) {
  const auto toks = io::read_tokens(kFixture + "/tokens.json");
  const std::vector<int32_t> t(toks.begin(), toks.begin() + 40);
  auto base = model::load_model(model::open_checkpoint("builtin:tiny-hybrid"));
  const auto base_logits = model::score_all_rows(*base, t);
  for (const std::string variant : {"dense", "nope", "attention-only"}) {
    SCOPED_TRACE(variant);
    model::Checkpoint ck = model::open_checkpoint("builtin:tiny-hybrid");
    if (variant == "dense") ck.config["num_local_experts"] = 0;
    if (variant == "nope") ck.config["position_embedding_type"] = "nope";
    if (variant == "attention-only") {
      ck.config["layer_types"] = {"attention", "attention", "attention", "attention"};
      ck.find = [inner = ck.find](const std::string& n) {
        for (const auto& [from, to] : {std::pair<std::string, std::string>{"model.layers.0.self_attn", "model.layers.1.self_attn"},
                                       {"model.layers.2.self_attn", "model.layers.3.self_attn"}})
          if (n.rfind(from, 0) == 0) return inner(to + n.substr(from.size()));
        return inner(n);
      };
    }
    auto m = model::load_model(ck);
    bool has_router = false;
    for (const auto& p : m->probe_points()) has_router = has_router || p.name.find(".router") != std::string::npos;
    EXPECT_EQ(has_router, variant != "dense");
    EXPECT_EQ(m->cache_spec().num_mamba_layers, variant == "attention-only" ? 0 : 2);
    const auto logits = model::score_all_rows(*m, t);
    EXPECT_FALSE(test::same_bits(logits.data(), base_logits.data(), logits.size()));
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
    engine::GateOptions g;
    g.prompt_len = 40;
    g.forced_len = 10;
    g.modes = {model::ScanMode::Exact};
    g.exact_dtypes = {DType::F32};
    g.scenarios = {"decode", "chunked-prefill"};
    const auto res = engine::run_exactness_gate(*m, g);
    ASSERT_EQ(res.size(), 2u);
    for (const auto& r : res) {
      // decode compares rows 39 … 49; the chunked prefill every row 0 … 49.
      EXPECT_EQ(r.all.rows, r.scenario == "decode" ? 11 : 50) << r.scenario;
      EXPECT_EQ(r.all.mismatched, 0) << r.scenario;
    }
  }
}
