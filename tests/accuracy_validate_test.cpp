// Logit validation: the per-token check (tolerance map, divergence, NaN) and the teacher-forced
// loop with divergence retry, against references made here from parity's own score runs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "accuracy/logit_tolerance.h"
#include "accuracy/logit_validation.h"
#include "accuracy/replacement_session.h"
#include "accuracy/validation_report.h"
#include "accuracy_replacement_support.h"
#include "common/error.h"
#include "engine/engine.h"
#include "error_test_support.h"
#include "test_support.h"

using namespace parity;
using test::error_of;
using namespace parity::accuracy;

namespace {

std::vector<float> ramp(int n) {  // distinct values, argmax n-1
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = 0.5f * static_cast<float>(i) - 3.0f;
  return v;
}

}  // namespace

// ---- one token ------------------------------------------------------------------------------

TEST(AccuracyTokenCheck, IdenticalRowsMatchWithZeroError) {
  auto r = ramp(100);
  TokenCheck c = check_token_logits(r.data(), r.data(), 100, 99, 99, default_tol_map(), 0.001);
  EXPECT_EQ(c.status, TokenStatus::Matched);
  ASSERT_EQ(c.errors.size(), 4u);
  EXPECT_EQ(c.errors[0].k, 5);
  EXPECT_EQ(c.errors[3].k, 0);
  for (const auto& e : c.errors) EXPECT_EQ(e.max_abs, 0.0);
  EXPECT_EQ(c.errors[0].scale, 46.5);  // largest |ref| among the top 5 (ids 95..99)
}

TEST(AccuracyTokenCheck, BoundIsAtolPlusRtolTimesTheLargestReferenceInTheSet) {
  auto ref = ramp(100);
  auto ours = ref;
  // Top-5 = ids 95..99, scale = 46.5, bound = 1e-5 + 0.01 * 46.5 = 0.46501.
  ours[96] += 0.4650f;
  TokenCheck ok = check_token_logits(ours.data(), ref.data(), 100, 99, 99, {{5, 1e-5, 0.01}}, 0.001);
  EXPECT_EQ(ok.status, TokenStatus::Matched);
  EXPECT_EQ(ok.errors[0].worst_token, 96);
  ours[96] = ref[96] + 0.466f;
  TokenCheck bad = check_token_logits(ours.data(), ref.data(), 100, 99, 99, {{5, 1e-5, 0.01}}, 0.001);
  EXPECT_EQ(bad.status, TokenStatus::TopkErrors);
  EXPECT_FALSE(bad.passed());
  // An error outside the top 5 is seen only by wider sets.
  ours = ref;
  ours[10] += 1.5f;
  TokenCheck wide = check_token_logits(ours.data(), ref.data(), 100, 99, 99, default_tol_map(), 0.001);
  EXPECT_TRUE(wide.errors[0].passed);
  EXPECT_TRUE(wide.errors[1].passed);    // top-50 = ids 50..99
  EXPECT_FALSE(wide.errors[2].passed);   // top-1000 clamps to all 100 ids: 1.5 > 1e-5 + 0.03 * 46.5
  EXPECT_TRUE(wide.errors[3].passed);    // all: 1.5 <= 1e-5 + 0.05 * 46.5
  EXPECT_EQ(wide.status, TokenStatus::TopkErrors);
}

TEST(AccuracyTokenCheck, DivergenceIsAcceptableWhenTheReferenceNearlyChoseOurToken) {
  auto ref = ramp(10);
  ref[8] = ref[9] - 0.0005f;  // the reference's top-2 within 0.001
  auto ours = ref;
  ours[8] = ref[9] + 0.0001f;  // we pick 8
  TokenCheck c = check_token_logits(ours.data(), ref.data(), 10, 8, 9, {{0, 1e-3, 0}}, 0.001);
  EXPECT_EQ(c.status, TokenStatus::AcceptableDivergence);
  EXPECT_TRUE(c.passed());
  EXPECT_NEAR(c.reference_gap, 0.0005, 1e-6);
  EXPECT_GT(c.divergence_difference, 0);
  TokenCheck strict = check_token_logits(ours.data(), ref.data(), 10, 8, 9, {{0, 1e-3, 0}}, 0.0001);
  EXPECT_EQ(strict.status, TokenStatus::Diverged);
  TokenCheck loose = check_token_logits(ours.data(), ref.data(), 10, 8, 9, {{0, 0, 0}}, 0.001);
  EXPECT_EQ(loose.status, TokenStatus::AcceptableDivergenceTopkErrors);
  EXPECT_FALSE(loose.passed());
  TokenCheck both = check_token_logits(ours.data(), ref.data(), 10, 8, 9, {{0, 0, 0}}, 0.0);
  EXPECT_EQ(both.status, TokenStatus::DivergedTopkErrors);
}

TEST(AccuracyTokenCheck, NaNFailsTheTokenWithoutComparing) {
  auto ref = ramp(10);
  auto ours = ref;
  ours[3] = std::numeric_limits<float>::quiet_NaN();
  TokenCheck a = check_token_logits(ours.data(), ref.data(), 10, 9, 9, default_tol_map(), 0.001);
  EXPECT_EQ(a.status, TokenStatus::NaN);
  EXPECT_EQ(a.nan_in, "ours");
  EXPECT_FALSE(a.passed());
  TokenCheck b = check_token_logits(ref.data(), ours.data(), 10, 9, 9, default_tol_map(), 0.001);
  EXPECT_EQ(b.nan_in, "reference");
  TokenCheck c = check_token_logits(ours.data(), ours.data(), 10, 9, 9, default_tol_map(), 0.001);
  EXPECT_EQ(c.nan_in, "both");
  EXPECT_EQ(argmax_logit(ours.data(), 10), 9);  // NaN never wins the argmax
}

TEST(AccuracyTokenCheck, InfinitiesCompareEqualOnlyToThemselves) {
  auto ref = ramp(10);
  ref[0] = -std::numeric_limits<float>::infinity();
  auto ours = ref;
  EXPECT_EQ(check_token_logits(ours.data(), ref.data(), 10, 9, 9, default_tol_map(), 0.001).status,
            TokenStatus::Matched);
  ours[0] = -1e30f;
  TokenCheck c = check_token_logits(ours.data(), ref.data(), 10, 9, 9, default_tol_map(), 0.001);
  EXPECT_TRUE(std::isinf(c.errors.back().max_abs));
  EXPECT_EQ(c.status, TokenStatus::TopkErrors);
}

TEST(AccuracyTokenCheck, Errors) {
  auto r = ramp(10);
  EXPECT_THROW(check_token_logits(r.data(), r.data(), 10, 10, 9, default_tol_map(), 0.001), Error);
  EXPECT_THROW(check_token_logits(r.data(), r.data(), 10, 9, -1, default_tol_map(), 0.001), Error);
  EXPECT_THROW(check_token_logits(r.data(), r.data(), 0, 0, 0, default_tol_map(), 0.001), Error);
}

TEST(AccuracyTolMap, ParsesSortsAndRefusesBadEntries) {
  TolMap m = parse_tol_map(nlohmann::json::parse(R"({"all": [1e-5, 0.05], "50": [0, 0.02], "5": [1e-5, 0.01]})"));
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].k, 5);
  EXPECT_EQ(m[1].k, 50);
  EXPECT_EQ(m[2].k, 0);
  EXPECT_EQ(tol_map_to_json(m).dump(), R"({"5":[1e-05,0.01],"50":[0.0,0.02],"all":[1e-05,0.05]})");
  auto err = [](const char* t) { return error_of([&] { parse_tol_map(nlohmann::json::parse(t)); }); };
  EXPECT_NE(err("{}").find("non-empty"), std::string::npos);
  EXPECT_NE(err(R"({"top5": [0, 0]})").find("\"top5\" is neither"), std::string::npos);
  EXPECT_NE(err(R"({"0": [0, 0]})").find("neither"), std::string::npos);
  EXPECT_NE(err(R"({"5": 0.01})").find("[atol, rtol]"), std::string::npos);
  EXPECT_NE(err(R"({"5": [0, -1]})").find("negative"), std::string::npos);
  EXPECT_NE(err(R"({"5": [0, 0], "05": [0, 0]})").find("given twice"), std::string::npos);
}

// ---- the loop ---------------------------------------------------------------------------------

namespace {

struct ValidationCase {
  const model::Model* m = nullptr;
  int V = 0;
  std::vector<int32_t> prompt, greedy;  // greedy: 10 tokens parity generates after the prompt
};

ValidationCase make_validation_case(const std::string& spec) {
  ValidationCase f;
  f.m = &test::cached_model(spec);
  f.V = f.m->vocab_size();
  std::mt19937 rng(11);
  for (int i = 0; i < 12; ++i) f.prompt.push_back(static_cast<int32_t>(rng() % static_cast<unsigned>(f.V)));
  f.greedy = [&] {
    engine::EngineConfig c;
    c.mode = model::ScanMode::Exact;
    engine::Engine e(*f.m, c);
    engine::RequestSpec s;
    s.prompt = f.prompt;
    s.sampling.max_tokens = 10;
    auto id = e.add_request(s);
    return e.run_to_completion().at(id).tokens;
  }();
  return f;
}

// Reference for prompt + stream: every row of a score run (row p = after token p).
PromptReference reference_of(const ValidationCase& f, const std::vector<int32_t>& cont) {
  std::vector<int32_t> toks = f.prompt;
  toks.insert(toks.end(), cont.begin(), cont.end());
  PromptReference r;
  r.prompt = f.prompt;
  r.logits.rows = static_cast<int64_t>(toks.size());
  r.logits.cols = f.V;
  r.logits.data = model::score_all_rows(*f.m, toks);
  return r;
}

ValidationOptions exact_opts(int budget = 5) {
  ValidationOptions o;
  o.engine.mode = model::ScanMode::Exact;
  o.engine.sched.max_num_batched_tokens = budget;  // chunked prefill for every run
  return o;
}

// The reference stream of the perturbed case: parity's tokens 0..3, then X at token 4 (where
// parity picks greedy[4]), then parity's own greedy continuation of that stream. Row P+3 is
// edited so that X is its argmax: the reference "chose" X there.
struct Perturbed {
  std::vector<int32_t> stream;  // the 9 tokens fed after the prompt
  int32_t next = -1;            // token 9: parity's greedy choice after prompt + stream
  int32_t x = 0;
  PromptReference ref;
};

Perturbed perturbed(const ValidationCase& f) {
  Perturbed p;
  p.x = (f.greedy[4] + 1) % f.V;
  std::vector<int32_t> head(f.greedy.begin(), f.greedy.begin() + 4);
  head.push_back(p.x);
  engine::EngineConfig c;
  c.mode = model::ScanMode::Exact;
  engine::Engine e(*f.m, c);
  engine::RequestSpec s;
  s.prompt = f.prompt;
  s.prompt.insert(s.prompt.end(), head.begin(), head.end());
  s.sampling.max_tokens = 5;
  auto id = e.add_request(s);
  auto tail = e.run_to_completion().at(id).tokens;
  p.stream = head;
  p.stream.insert(p.stream.end(), tail.begin(), tail.begin() + 4);
  p.next = tail.at(4);
  p.ref = reference_of(f, p.stream);
  float* row = p.ref.logits.data.data() + (f.prompt.size() + 3) * static_cast<std::size_t>(f.V);
  float mx = row[0];
  for (int i = 1; i < f.V; ++i) mx = std::max(mx, row[i]);
  row[p.x] = mx + 1.0f;
  return p;
}

class AccuracyValidateE2E : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(AccuracyValidateE2E, OwnReferencePassesWithZeroError) {
  ValidationCase f = make_validation_case(GetParam());
  std::vector<int32_t> fed(f.greedy.begin(), f.greedy.begin() + 9);
  ValidationReport rep = validate_logits(*f.m, {reference_of(f, fed)}, exact_opts());
  ASSERT_TRUE(rep.passed()) << validation_summary(rep);
  const PromptValidation& p = rep.prompts.at(0);
  EXPECT_EQ(p.runs, 1);
  ASSERT_EQ(p.tokens.size(), 10u);
  EXPECT_EQ(p.expected_tokens, f.greedy);
  for (const TokenCheck& t : p.tokens) {
    EXPECT_EQ(t.status, TokenStatus::Matched);
    for (const auto& e : t.errors) EXPECT_EQ(e.max_abs, 0.0);
  }
  EXPECT_EQ(p.tokens[9].position, static_cast<int64_t>(f.prompt.size()) + 8);
}

TEST_P(AccuracyValidateE2E, PerturbedReferenceFailsAtTheRightTokenAndTheRetryContinues) {
  ValidationCase f = make_validation_case(GetParam());
  Perturbed pt = perturbed(f);
  ValidationReport rep = validate_logits(*f.m, {pt.ref}, exact_opts());
  EXPECT_FALSE(rep.passed());
  const PromptValidation& p = rep.prompts.at(0);
  const int64_t P = static_cast<int64_t>(f.prompt.size());
  ASSERT_EQ(p.tokens.size(), 10u);
  EXPECT_EQ(p.runs, 2);
  EXPECT_EQ(p.first_failure(), 4);
  for (int j = 0; j < 10; ++j) {
    const TokenCheck& t = p.tokens[static_cast<std::size_t>(j)];
    EXPECT_EQ(t.index, j);
    EXPECT_EQ(t.position, P - 1 + j);
    EXPECT_EQ(t.run, j <= 4 ? 0 : 1) << j;
    if (j == 4) {
      EXPECT_EQ(t.status, TokenStatus::DivergedTopkErrors);
      EXPECT_EQ(t.expected, pt.x);
      EXPECT_EQ(t.actual, f.greedy[4]);
      EXPECT_FLOAT_EQ(static_cast<float>(t.reference_gap), 1.0f);
    } else {
      // After the retry the stream is the reference's; token 9 is past it, where the reference's
      // argmax (its last row) and parity's choice are both parity's greedy token.
      const int32_t want = j < 9 ? pt.stream[static_cast<std::size_t>(j)] : pt.next;
      EXPECT_EQ(t.status, TokenStatus::Matched) << j;
      EXPECT_EQ(t.expected, want) << j;
      EXPECT_EQ(t.actual, want) << j;
    }
  }
  nlohmann::json j = validation_to_json(rep);
  EXPECT_FALSE(j["passed"].get<bool>());
  EXPECT_EQ(j["prompts"][0]["first_failure"], 4);
  EXPECT_EQ(j["prompts"][0]["retries"], 1);
  EXPECT_EQ(j["prompts"][0]["tokens"][4]["status"], "DIVERGED+TOPK_ERRORS");
  EXPECT_EQ(j["summary"]["failed_tokens"], 1);
  EXPECT_EQ(j["summary"]["divergences"], 1);
  EXPECT_EQ(j["summary"]["worst"]["5"]["token_index"], 4);
  const std::string s = validation_summary(rep);
  EXPECT_NE(s.find("FAILED at token 4 (position " + std::to_string(P + 3) + ")"), std::string::npos) << s;
  EXPECT_NE(s.find("FAILED: 9 of 10 tokens"), std::string::npos) << s;
}

TEST_P(AccuracyValidateE2E, AcceptableDivergenceWithLooseTolerancesPasses) {
  ValidationCase f = make_validation_case(GetParam());
  ValidationOptions o = exact_opts();
  o.tol_map = {{0, 100.0, 0.0}};
  o.divergence_tol = 2.0;
  ValidationReport rep = validate_logits(*f.m, {perturbed(f).ref}, o);
  EXPECT_TRUE(rep.passed()) << validation_summary(rep);
  EXPECT_EQ(rep.prompts[0].tokens[4].status, TokenStatus::AcceptableDivergence);
  EXPECT_EQ(rep.prompts[0].runs, 2);
}

INSTANTIATE_TEST_SUITE_P(Models, AccuracyValidateE2E, ::testing::Values("builtin:tiny", "mamba2_g1"),
                         [](const auto& i) { return i.param == "builtin:tiny" ? std::string("tiny") : std::string("g1"); });

TEST(AccuracyValidate, StoredContinuationIsTheExpectedStream) {
  // A reference that fed X at token 4 although its own argmax there is parity's token: with the
  // continuation stored, X is expected, the divergence is acceptable (ref[X] < ref[ours]) and the
  // retry follows the reference's stream, so every row matches.
  ValidationCase f = make_validation_case("builtin:tiny");
  Perturbed pt = perturbed(f);
  PromptReference ref = reference_of(f, pt.stream);  // unedited rows
  ref.continuation = pt.stream;
  ValidationReport rep = validate_logits(*f.m, {ref}, exact_opts());
  EXPECT_TRUE(rep.passed()) << validation_summary(rep);
  EXPECT_EQ(rep.prompts[0].tokens[4].status, TokenStatus::AcceptableDivergence);
  EXPECT_LT(rep.prompts[0].tokens[4].reference_gap, 0);
  EXPECT_EQ(rep.prompts[0].runs, 2);
  ref.continuation.clear();  // argmax of the rows instead: the stream no longer matches the rows
  EXPECT_FALSE(validate_logits(*f.m, {ref}, exact_opts()).passed());
}

TEST(AccuracyValidate, NaNInTheReferenceFailsThatTokenOnly) {
  ValidationCase f = make_validation_case("builtin:tiny");
  PromptReference ref = reference_of(f, {f.greedy.begin(), f.greedy.begin() + 9});
  ref.logits.data[(f.prompt.size() + 1) * static_cast<std::size_t>(f.V) + 3] = std::nanf("");
  ValidationReport rep = validate_logits(*f.m, {ref}, exact_opts());
  EXPECT_FALSE(rep.passed());
  EXPECT_EQ(rep.prompts[0].first_failure(), 2);
  EXPECT_EQ(rep.prompts[0].tokens[2].status, TokenStatus::NaN);
  int failed = 0;
  for (const auto& t : rep.prompts[0].tokens) failed += !t.passed();
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(validation_to_json(rep)["prompts"][0]["tokens"][2]["nan_in"], "reference");
}

TEST(AccuracyValidate, MaxTokensAndPromptSelection) {
  ValidationCase f = make_validation_case("builtin:tiny");
  PromptReference ref = reference_of(f, {f.greedy.begin(), f.greedy.begin() + 9});
  ValidationOptions o = exact_opts();
  o.max_tokens = 3;
  o.prompt_indices = {1};
  ValidationReport rep = validate_logits(*f.m, {ref, ref}, o);
  ASSERT_EQ(rep.prompts.size(), 1u);
  EXPECT_EQ(rep.prompts[0].prompt_index, 1);
  EXPECT_EQ(rep.prompts[0].tokens.size(), 3u);
}

TEST(AccuracyValidate, WithTensorReplacementEachRunIsBoundToItsPrompt) {
  ValidationCase f = make_validation_case("builtin:tiny");
  Perturbed pt = perturbed(f);
  // Replacement values for layer 0's mixer captured on the reference's stream.
  std::vector<int32_t> toks = f.prompt;
  toks.insert(toks.end(), pt.stream.begin(), pt.stream.end());
  test::RowRecorder rec({"backbone.layers.0.mixer"});
  model::score_all_rows(*f.m, toks, model::ScanMode::Exact, &rec);
  ReplacementConfig cfg;
  cfg.tensors = Captures{};
  PromptCapture pc;
  pc.prompt_token_ids = f.prompt;
  pc.flat["backbone.layers.0.mixer"] = rec.matrix("backbone.layers.0.mixer", 0);
  cfg.tensors->prompts = {pc, pc};
  cfg.tensors->prompts[1].prompt_token_ids = toks;  // a longer prompt every retry would prefix-match
  // Prompt 1's values are perturbed: a run replaced from it instead of prompt 0 would show.
  Matrix& other = cfg.tensors->prompts[1].flat["backbone.layers.0.mixer"];
  for (int64_t r = 0; r < other.rows; ++r)
    for (int64_t c = 0; c < other.cols; ++c) other.data[static_cast<std::size_t>(r * other.cols + c)] += test::perturbation(1, r, c);
  ReplacementSession session(std::move(cfg), *f.m);
  ValidationOptions o = exact_opts();
  o.replacement = &session;
  ValidationReport rep = validate_logits(*f.m, {pt.ref}, o);
  EXPECT_EQ(rep.prompts[0].first_failure(), 4);
  EXPECT_EQ(rep.prompts[0].runs, 2);
  for (int j : {0, 1, 2, 3, 5, 6, 7, 8, 9}) EXPECT_EQ(rep.prompts[0].tokens[static_cast<std::size_t>(j)].status, TokenStatus::Matched) << j;
  for (const auto& t : rep.prompts[0].tokens) {
    if (t.index == 4) continue;  // the edited reference row
    for (const auto& e : t.errors) EXPECT_EQ(e.max_abs, 0.0) << t.index;
  }
  EXPECT_GT(session.replacer().stats().rows_replaced, 0u);
  EXPECT_EQ(session.replacer().prompt_index().num_requests(), 0u);  // both runs' bindings released
  // The companion: validated as reference prompt 1, the runs take prompt 1's perturbed values.
  o.prompt_indices = {1};
  ValidationReport other_rep = validate_logits(*f.m, {pt.ref, pt.ref}, o);
  double worst = 0;
  for (const auto& t : other_rep.prompts[0].tokens)
    for (const auto& e : t.errors) worst = std::max(worst, e.max_abs);
  EXPECT_GT(worst, 0.0);
}

TEST(AccuracyValidate, Errors) {
  ValidationCase f = make_validation_case("builtin:tiny");
  PromptReference ref = reference_of(f, {f.greedy.begin(), f.greedy.begin() + 9});
  ValidationOptions o = exact_opts();
  o.prompt_indices = {2};
  EXPECT_NE(error_of([&] { validate_logits(*f.m, {ref}, o); }).find("prompt index 2"), std::string::npos);
  o = exact_opts();
  o.tol_map.clear();
  EXPECT_THROW(validate_logits(*f.m, {ref}, o), Error);
  PromptReference narrow = ref;
  narrow.logits.cols = 7;
  EXPECT_NE(error_of([&] { validate_logits(*f.m, {narrow}, exact_opts()); }).find("model's vocabulary is 512"),
            std::string::npos);
  Captures c;
  PromptCapture pc;
  pc.prompt_token_ids = f.prompt;
  pc.flat["backbone.norm_f"] = Matrix{12, 4, std::vector<float>(48)};
  c.prompts.push_back(pc);
  EXPECT_NE(error_of([&] { logit_reference_from_captures(c); }).find("has no lm_head rows"), std::string::npos);
  c.prompts[0].flat["lm_head"] = Matrix{11, 4, std::vector<float>(44)};
  EXPECT_NE(error_of([&] { logit_reference_from_captures(c); }).find("at least 12"), std::string::npos);
  c.prompts[0].prompt_token_ids.clear();
  EXPECT_NE(error_of([&] { logit_reference_from_captures(c); }).find("no prompt_token_ids"), std::string::npos);
}

// ---- command line ------------------------------------------------------------------------------

TEST(AccuracyValidateCli, ReportsPassAndFailureWithJson) {
  ValidationCase f = make_validation_case("builtin:tiny");
  auto dir = test::scratch_dir("acc_validate");
  auto write_ref = [&](const PromptReference& r, const std::string& name) {
    Captures c;
    PromptCapture pc;
    pc.prompt_token_ids = r.prompt;
    pc.flat["lm_head"] = r.logits;
    c.prompts.push_back(pc);
    write_captures((dir / name).string(), c);
    return (dir / name).string();
  };
  const std::string good = write_ref(reference_of(f, {f.greedy.begin(), f.greedy.begin() + 9}), "good.safetensors");
  const std::string bad = write_ref(perturbed(f).ref, "bad.safetensors");
  const std::string P3 = std::to_string(f.prompt.size() + 3);

  auto r = test::run_cli("validate builtin:tiny --exact --reference " + good + " --max-num-batched-tokens 7");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASSED: 10 of 10 tokens"), std::string::npos) << r.out;

  const std::string js = (dir / "report.json").string();
  r = test::run_cli("validate builtin:tiny --exact --reference " + bad + " --json " + js);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.out.find("FAILED at token 4 (position " + P3 + ")"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("DIVERGED+TOPK_ERRORS"), std::string::npos) << r.out;
  std::ifstream in(js);
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["prompts"][0]["first_failure"], 4);
  EXPECT_EQ(j["prompts"][0]["runs"], 2);
  EXPECT_EQ(j["mode"], "exact");
  EXPECT_EQ(j["tol_map"]["all"][1], 0.05);

  r = test::run_cli("validate builtin:tiny --exact --reference " + bad +
                    " --tol-map '{\"all\": [100, 0]}' --divergence-tol 2");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ACCEPTABLE_DIVERGENCE"), std::string::npos) << r.out;

  r = test::run_cli("validate builtin:tiny --reference " + good + " --tol-map '{\"top5\": [0, 0]}'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("\"top5\" is neither"), std::string::npos) << r.err;
  r = test::run_cli("validate builtin:tiny --reference " + good + " --prompt-index 3");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("prompt index 3"), std::string::npos) << r.err;
  r = test::run_cli("validate builtin:tiny --reference " + good + " --additional-config '{\"x\": 1}'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("unknown key \"x\""), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}
