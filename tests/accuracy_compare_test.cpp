// Comparing captures files: zero error against itself, the first parting module in forward
// order, tolerances, clear refusals; the `compare` command and its reports; and parity's
// capture of the mamba2_g1 fixture against Hugging Face's (tools/capture_hf.py).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "accuracy/capture_run.h"
#include "accuracy/captures_file.h"
#include "accuracy/compare.h"
#include "accuracy/compare_report.h"
#include "common/error.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "error_test_support.h"
#include "test_support.h"

using namespace parity;
using namespace parity::accuracy;
namespace fs = std::filesystem;

namespace {

using test::expect_error;

const std::vector<std::string> kModules = {"backbone.embeddings", "backbone.layers.0.mixer.in_proj",
                                           "backbone.layers.0.mixer", "backbone.layers.0",
                                           "backbone.layers.1.mixer.norm", "backbone.layers.1", "lm_head"};

Captures sine_sample() {
  Captures c;
  for (int i = 0; i < 2; ++i) {
    PromptCapture p;
    p.prompt_token_ids = {3 + i, 4, 5};
    p.continuation_token_ids = {6, 7};
    for (std::size_t k = 0; k < kModules.size(); ++k) {
      Matrix m{5, 8, {}};
      for (int j = 0; j < 40; ++j) m.data.push_back(std::sin(0.1f * static_cast<float>(j + 7 * k + 31 * i)) * 3.0f);
      p.flat[kModules[k]] = m;
    }
    c.prompts.push_back(p);
  }
  return c;
}

float& capture_at(Captures& c, int prompt, const std::string& m, int row, int col) {
  Matrix& x = c.prompts[static_cast<std::size_t>(prompt)].flat.at(m);
  return x.data[static_cast<std::size_t>(row * x.cols + col)];
}

TEST(AccuracyCompare, AFileAgainstItselfHasZeroError) {
  const Captures c = sine_sample();
  const CompareResult r = compare_captures(c, c, {});
  EXPECT_FALSE(r.first);
  ASSERT_EQ(r.modules.size(), kModules.size());
  for (std::size_t k = 0; k < kModules.size(); ++k) {
    EXPECT_EQ(r.modules[k].name, kModules[k]);  // forward order
    EXPECT_EQ(r.modules[k].max_abs, 0.0);
    EXPECT_EQ(r.modules[k].rows_compared, 10);
    EXPECT_EQ(r.modules[k].rows_parting, 0);
  }
  EXPECT_NE(compare_table(r).find("no module parts"), std::string::npos);
}

TEST(AccuracyCompare, FindsTheFirstPartingModuleInForwardOrder) {
  const Captures a = sine_sample();
  Captures b = a;
  capture_at(b, 0, "lm_head", 0, 0) += 1.0f;                       // early position, late module
  capture_at(b, 1, "backbone.layers.1.mixer.norm", 4, 3) += 0.5f;  // late position, earlier module
  capture_at(b, 1, "backbone.layers.1", 2, 1) -= 0.25f;
  const CompareResult r = compare_captures(a, b, {});
  ASSERT_TRUE(r.first);
  EXPECT_EQ(r.first->module, "backbone.layers.1.mixer.norm");
  EXPECT_EQ(r.first->prompt, 1);
  EXPECT_EQ(r.first->position, 4);
  EXPECT_FLOAT_EQ(static_cast<float>(r.first->error.max_abs), 0.5f);
  const ModuleComparison& head = r.modules.back();
  EXPECT_EQ(head.rows_parting, 1);
  EXPECT_EQ(head.worst_prompt, 0);
  EXPECT_EQ(head.worst_position, 0);
  EXPECT_NEAR(head.rows[0][0].max_abs, 1.0, 1e-6);
  EXPECT_EQ(head.rows[0][1].max_abs, 0.0);
  EXPECT_NE(compare_table(r).find("first divergence: backbone.layers.1.mixer.norm at prompt 1, position 4"),
            std::string::npos);
}

TEST(AccuracyCompare, TolerancesDecideWhatParts) {
  const Captures a = sine_sample();
  Captures b = a;
  capture_at(b, 0, "backbone.layers.0.mixer", 1, 1) += 1e-5f;
  capture_at(b, 0, "backbone.layers.1", 1, 1) += 0.1f;
  EXPECT_EQ(compare_captures(a, b, {0.0, 0.0}).first->module, "backbone.layers.0.mixer");
  EXPECT_EQ(compare_captures(a, b, {1e-4, 0.0}).first->module, "backbone.layers.1");
  EXPECT_EQ(compare_captures(a, b, {0.0, 1e-4}).first->module, "backbone.layers.1");  // row scale ~3
  EXPECT_FALSE(compare_captures(a, b, {0.0, 0.05}).first);
}

TEST(AccuracyCompare, NanAndInfinityAreDifferencesUnlessBothSidesAgree) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Captures a = sine_sample(), b = sine_sample();
  capture_at(a, 0, "backbone.layers.0", 0, 0) = nan;
  capture_at(b, 0, "backbone.layers.0", 0, 0) = nan;
  capture_at(a, 0, "backbone.layers.0", 1, 0) = inf;
  capture_at(b, 0, "backbone.layers.0", 1, 0) = inf;
  EXPECT_FALSE(compare_captures(a, b, {}).first);
  capture_at(b, 0, "backbone.layers.0", 2, 0) = nan;
  const CompareResult r = compare_captures(a, b, {1.0, 1.0});
  ASSERT_TRUE(r.first);
  EXPECT_EQ(r.first->position, 2);
  EXPECT_TRUE(std::isinf(r.first->error.max_abs));
}

TEST(AccuracyCompare, RefusesDifferentPromptsAndShapes) {
  const Captures a = sine_sample();
  Captures b = a;
  b.prompts.pop_back();
  expect_error([&] { compare_captures(a, b, {}); }, {"A has 2 prompt(s), B has 1"});
  b = a;
  b.prompts[1].prompt_token_ids[2] = 9;
  expect_error([&] { compare_captures(a, b, {}); }, {"prompt 1 differs between the files: first difference at index 2 (A 5, B 9)"});
  b = a;
  b.prompts[0].prompt_token_ids.push_back(1);
  expect_error([&] { compare_captures(a, b, {}); }, {"A has 3 tokens, B 4"});
  b = a;
  for (auto& p : b.prompts) p.flat.at("lm_head") = Matrix{5, 3, std::vector<float>(15, 0.0f)};
  expect_error([&] { compare_captures(a, b, {}); }, {"module lm_head has different shapes: A [5, 8], B [5, 3]"});
  b = a;
  for (auto& p : b.prompts) {
    p.flat.clear();
    p.flat["other"] = Matrix{5, 8, std::vector<float>(40, 0.0f)};
  }
  expect_error([&] { compare_captures(a, b, {}); }, {"no module in common"});
}

TEST(AccuracyCompare, ComparesWhatBothHoldAndSaysWhatItLeftOut) {
  const Captures a = sine_sample();
  Captures b = a;
  for (auto& p : b.prompts) {
    p.flat.erase("backbone.embeddings");
    for (auto& [m, x] : p.flat) {  // B ran the prompt only
      x.rows = 3;
      x.data.resize(24);
    }
  }
  b.prompts[1].continuation_token_ids = {};
  CompareResult r = compare_captures(a, b, {});
  EXPECT_FALSE(r.first);
  EXPECT_EQ(r.modules.size(), kModules.size() - 1);
  EXPECT_EQ(r.modules[0].rows_compared, 6);
  const std::string table = compare_table(r);
  EXPECT_NE(table.find("backbone.embeddings: only in A"), std::string::npos) << table;
  EXPECT_NE(table.find("prompt 0: A has 5 positions, B 3; the first 3 are compared"), std::string::npos) << table;

  // Continuations that part: later positions saw different inputs and are not compared.
  Captures c = a;
  c.prompts[0].continuation_token_ids = {6, 8};
  capture_at(c, 0, "lm_head", 4, 0) += 1.0f;
  r = compare_captures(a, c, {});
  EXPECT_FALSE(r.first);
  EXPECT_NE(compare_table(r).find("prompt 0: the continuations part at position 4"), std::string::npos);
}

TEST(AccuracyCompare, StepAndFlatFilesCompare) {
  const Captures a = sine_sample();
  Captures s;
  s.layout = CaptureLayout::Step;
  for (const PromptCapture& p : a.prompts) {
    PromptCapture q;
    q.prompt_token_ids = p.prompt_token_ids;
    q.continuation_token_ids = p.continuation_token_ids;
    for (const auto& [m, x] : p.flat) {
      q.steps[m].push_back(Matrix{3, x.cols, std::vector<float>(x.data.begin(), x.data.begin() + 3 * x.cols)});
      for (int64_t r = 3; r < x.rows; ++r)  // HF style: each step recomputes the whole sequence
        q.steps[m].push_back(Matrix{r + 1, x.cols, std::vector<float>(x.data.begin(), x.data.begin() + (r + 1) * x.cols)});
    }
    s.prompts.push_back(q);
  }
  const CompareResult r = compare_captures(a, s, {});
  EXPECT_FALSE(r.first);
  EXPECT_EQ(r.modules[0].rows_compared, 10);
}

// ------------------------------------------------------------------------------------------

class AccuracyCompareCli : public test::ScratchDirTest {};

TEST_F(AccuracyCompareCli, SelfIsZeroAndAPerturbedCopyPartsAtTheRightModule) {
  auto r = test::run_cli("capture builtin:tiny --prompt 1,2,3,4,5,6 --forced 7,8,9 --exact --modules "
                         "'re:backbone\\.layers\\.\\d+.*' lm_head --out " + path("a.safetensors"));
  ASSERT_EQ(r.status, 0) << r.err;
  r = test::run_cli("compare " + path("a.safetensors") + " " + path("a.safetensors") + " --html " + path("r.html") +
                    " --json " + path("r.json"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("no module parts beyond atol 0, rtol 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("backbone.layers.1.mixer.conv1d"), std::string::npos) << r.out;

  // Perturb one row of layer 1's gated norm output: compare must name it, not a later module.
  Captures c = read_captures(path("a.safetensors"));
  c.prompts[0].flat.at("backbone.layers.1.mixer.norm").data[5 * 128 + 3] += 1e-3f;
  c.prompts[0].flat.at("lm_head").data[0] += 1.0f;
  write_captures(path("b.safetensors"), c);
  r = test::run_cli("compare " + path("a.safetensors") + " " + path("b.safetensors") + " --html " + path("r.html") +
                    " --json " + path("r.json"));
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.out.find("first divergence: backbone.layers.1.mixer.norm at prompt 0, position 5"), std::string::npos)
      << r.out;
  // A tolerance above the perturbation moves the verdict to the head.
  r = test::run_cli("compare " + path("a.safetensors") + " " + path("b.safetensors") + " --atol 0.01");
  EXPECT_NE(r.out.find("first divergence: lm_head at prompt 0, position 0"), std::string::npos) << r.out;

  const std::string html = test::read_file(path("r.html"));
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("backbone.layers.1.mixer.norm"), std::string::npos);
  for (const char* external : {"<script", "<link", "src=", "@import"})
    EXPECT_EQ(html.find(external), std::string::npos) << external;
  const auto j = nlohmann::json::parse(test::read_file(path("r.json")));
  EXPECT_EQ(j["first_divergence"]["module"], "backbone.layers.1.mixer.norm");
  EXPECT_EQ(j["first_divergence"]["position"], 5);
  EXPECT_EQ(j["modules"].size(), 13u);  // 6 points × 2 layers + lm_head
  EXPECT_EQ(j["modules"][0]["per_prompt"][0]["max_abs"].size(), 9u);
}

TEST_F(AccuracyCompareCli, UnreadableOrMismatchedFilesAreClearErrors) {
  auto r = test::run_cli("capture builtin:tiny --prompt 1,2,3 --modules lm_head --out " + path("a.safetensors"));
  ASSERT_EQ(r.status, 0) << r.err;
  r = test::run_cli("capture builtin:tiny --prompt 1,2,4 --modules lm_head --out " + path("b.safetensors"));
  ASSERT_EQ(r.status, 0) << r.err;
  r = test::run_cli("compare " + path("a.safetensors") + " " + path("b.safetensors"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("error: prompt 0 differs between the files: first difference at index 2 (A 3, B 4)"),
            std::string::npos)
      << r.err;
  r = test::run_cli("compare " + path("a.safetensors") + " " + path("missing.safetensors"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("missing.safetensors"), std::string::npos) << r.err;
}

// tools/capture_hf.py ran Hugging Face in float64 (internal fp32 casts removed) on a fixture:
// Mamba2ForCausalLM on mamba2_g1 (eight modules), GraniteMoeHybridForCausalLM on granite_hybrid (all 37
// probe points, router logits included). parity's fp32 capture of the same modules and tokens, through
// the engine with chunked prefill and teacher-forced decode, must agree to a relative error (per row:
// max|Δ| / max(|a|, |b|)) of 1e-4; the largest seen is about 2e-6.
class AccuracyHfCapture : public ::testing::TestWithParam<std::string> {};

TEST_P(AccuracyHfCapture, ParityMatchesHuggingFace) {
  const std::string dir = std::string(PARITY_TEST_DATA) + "/" + GetParam();
  const std::string file = dir + "/hf_captures.safetensors";
  ASSERT_TRUE(fs::exists(file)) << "the committed fixture " << file << " is missing (made by tools/capture_hf.py)";
  const Captures hf = read_captures(file);
  const auto model = model::load_model(model::open_checkpoint(dir));
  for (int budget : {1000, 13}) {
    CaptureSpec spec;
    for (const PromptCapture& p : hf.prompts) spec.prompts.push_back(p.prompt_token_ids);
    for (const PromptCapture& p : hf.prompts) spec.forced.push_back(p.continuation_token_ids);
    spec.modules = captured_modules(hf);
    spec.engine.mode = model::ScanMode::Exact;
    spec.engine.sched.max_num_batched_tokens = budget;
    spec.max_tokens = 1;  // a prompt without continuation: the sampled token is never fed
    const Captures ours = capture_through_engine(*model, spec);
    const CompareResult r = compare_captures(ours, hf, {0.0, 1e-4});
    EXPECT_TRUE(r.notes.empty()) << r.notes[0];
    ASSERT_EQ(r.modules.size(), spec.modules.size());
    for (const auto& m : r.modules) {
      EXPECT_EQ(m.rows_parting, 0) << m.name << " max rel " << m.max_rel;
      // An embedding is a lookup of bf16-exact values, the same in both; everything computed differs.
      if (m.name.find("embed") == std::string::npos) {
        EXPECT_GT(m.max_abs, 0.0) << m.name << ": fp32 vs float64 should not be bit-identical";
      }
    }
    std::printf("budget %d:\n%s", budget, compare_table(r).c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, AccuracyHfCapture,
                         ::testing::Values("mamba2_g1", "granite_hybrid", "nemotron_h", "nemotron_h_moe", "bamba", "falcon_h1",
                                           "falcon_h1_norm"));

}  // namespace
