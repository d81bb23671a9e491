// Tensor replacement, unit level: every worked example of seed 000 (prefix matching, the corner
// case and its resolution by explicit binding, spec-decode slot tables, prefill padding) and
// every error branch of the replacer, its hooks, the session and --additional-config.
#include <gtest/gtest.h>

#include <filesystem>

#include "accuracy/active_context.h"
#include "accuracy/additional_config.h"
#include "accuracy/prompt_index.h"
#include "accuracy/replacement_hooks.h"
#include "accuracy/replacement_session.h"
#include "accuracy/shard_rows.h"
#include "accuracy/tensor_replacer.h"
#include "accuracy_replacement_support.h"
#include "common/error.h"
#include "io/safetensors.h"
#include "error_test_support.h"
#include "test_support.h"

using namespace parity;
using test::error_of;
using namespace parity::accuracy;

namespace {

// Row r of prompt p holds p*1000 + r*10 + c: every value names where it came from.
Matrix mat(int64_t rows, int64_t cols, int prompt) {
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) m.data.push_back(static_cast<float>(prompt * 1000 + r * 10 + c));
  return m;
}

float matrix_at(const Matrix& m, int64_t r, int64_t c) { return m.data[static_cast<std::size_t>(r * m.cols + c)]; }

// Two prompts with a 2-feature module "m" of 16 positions each.
TensorReplacer two_prompts(std::vector<int32_t> a = {10, 20, 30}, std::vector<int32_t> b = {40, 50},
                           MissingPosition pol = MissingPosition::Error) {
  return TensorReplacer({{{"m", mat(16, 2, 0)}}, {{"m", mat(16, 2, 1)}}}, {std::move(a), std::move(b)}, pol);
}

}  // namespace

// ---- prompt index: seed 000 "Prompt Index Resolution" -------------------------------------

TEST(AccuracyPromptIndex, SeedExampleRequestWithGeneratedTokensMapsToItsPrompt) {
  PromptIndex ix({{10, 20, 30}, {40, 50}});
  EXPECT_EQ(ix.register_request(0xabc, {10, 20, 30, 77, 88}), 0);
  EXPECT_EQ(ix.register_request(0xdef, {40, 50}), 1);
  EXPECT_EQ(ix.resolve(0xabc), 0);
  EXPECT_EQ(ix.resolve(0xdef), 1);
}

TEST(AccuracyPromptIndex, LongestVerifiedMatchWins) {
  PromptIndex ix({{1, 2, 3}, {1, 2, 3, 4, 5}});
  EXPECT_EQ(ix.match({1, 2, 3, 4, 5}), 1);    // [:3] matches 0, [:5] matches 1: longer wins
  EXPECT_EQ(ix.match({1, 2, 3, 77, 88}), 0);  // retry of prompt 0: [:5] is no stored prompt
  EXPECT_EQ(ix.match({1, 2, 3, 4}), 0);       // shorter than prompt 1: length 5 is skipped
  EXPECT_EQ(ix.match({1, 2, 3}), 0);
}

TEST(AccuracyPromptIndex, TeacherForcingRetryMapsToTheOriginalPrompt) {
  PromptIndex ix({{1, 2, 3}});
  EXPECT_EQ(ix.register_request(1, {1, 2, 3}), 0);           // iteration 1: exact match
  EXPECT_EQ(ix.register_request(2, {1, 2, 3, 77, 88}), 0);   // iteration 2: new id, prefix match
}

TEST(AccuracyPromptIndex, KnownCornerCaseAndItsResolutionByExplicitBinding) {
  PromptIndex ix({{1, 2, 3}, {1, 2, 3, 4, 5}});
  // A retry of prompt 0 whose model generated [4, 5]: prefix matching picks prompt 1 ...
  EXPECT_EQ(ix.register_request(7, {1, 2, 3, 4, 5}), 1);
  // ... binding the retry to the prompt it retries removes the ambiguity.
  ix.bind_request(8, 0);
  EXPECT_EQ(ix.resolve(8), 0);
  ix.bind_request(7, 0);  // binding overrides a prefix match
  EXPECT_EQ(ix.resolve(7), 0);
}

TEST(AccuracyPromptIndex, ResumedRequestKeepsItsPrompt) {
  PromptIndex ix({{1, 2, 3}, {4, 5}});
  EXPECT_EQ(ix.register_request(3, {1, 2, 3}), 0);
  EXPECT_EQ(ix.register_request(3, {4, 5, 6}), 0);  // same id again (recompute): not re-matched
  ix.bind_request(4, 1);
  EXPECT_EQ(ix.num_requests(), 2u);
  ix.forget_request(3);
  EXPECT_FALSE(ix.known(3));
  EXPECT_EQ(ix.num_requests(), 1u);
  EXPECT_EQ(ix.register_request(3, {4, 5, 6}), 1);  // a new request under a freed id is matched afresh
}

TEST(AccuracyPromptIndex, VerifiesTokensNotJustLengths) {
  PromptIndex ix({{1, 2, 3}, {9, 9}});
  EXPECT_EQ(ix.match({9, 9, 1}), 1);
  EXPECT_THROW(ix.match({1, 2, 4}), Error);
}

TEST(AccuracyPromptIndex, Errors) {
  EXPECT_NE(error_of([] { PromptIndex({{}, {}}).match({1, 2}); }).find("no prompt_token_ids"), std::string::npos);
  PromptIndex ix({{1, 2, 3}, {4, 5}});
  EXPECT_NE(error_of([&] { ix.match({7, 8, 9}); }).find("no reference prompt is a prefix"), std::string::npos);
  EXPECT_NE(error_of([&] { ix.match({1}); }).find("tried 0 prefix lengths"), std::string::npos);
  EXPECT_NE(error_of([&] { ix.resolve(42); }).find("request 42 was never registered"), std::string::npos);
  EXPECT_NE(error_of([&] { ix.bind_request(1, 2); }).find("has 2 prompts"), std::string::npos);
  EXPECT_THROW(ix.bind_request(1, -1), Error);
  PromptIndex dup({{1, 2}, {1, 2}});
  EXPECT_NE(error_of([&] { dup.match({1, 2, 3}); }).find("identical tokens"), std::string::npos);
  dup.bind_request(5, 1);  // explicit binding still works
  EXPECT_EQ(dup.resolve(5), 1);
}

TEST(AccuracyPromptIndex, EmptyPromptIsReachableByBindingOnly) {
  PromptIndex ix({{}, {4, 5}});
  EXPECT_EQ(ix.match({4, 5, 6}), 1);
  ix.bind_request(1, 0);
  EXPECT_EQ(ix.resolve(1), 0);
}

// ---- replacer: flattening and the seed's build_context -------------------------------------

TEST(AccuracyReplacer, FlattensStepCapturesKeepingTheLastRowOfLaterSteps) {
  Captures c;
  c.layout = CaptureLayout::Step;
  PromptCapture p;
  p.prompt_token_ids = {1, 2, 3};
  Matrix s0 = mat(3, 2, 0);            // prefill [3, E]
  Matrix s1 = mat(4, 2, 5);            // HF recomputes everything: [4, E], row 3 is new
  Matrix s2 = mat(1, 2, 7);            // a cached decode step: [1, E]
  p.steps["m"] = {s0, s1, s2};
  c.prompts.push_back(p);
  TensorReplacer r = TensorReplacer::from_captures(c);
  const Matrix& f = r.reference(0, "m");
  ASSERT_EQ(f.rows, 5);
  EXPECT_EQ(matrix_at(f, 2, 1), matrix_at(s0, 2, 1));
  EXPECT_EQ(matrix_at(f, 3, 0), matrix_at(s1, 3, 0));
  EXPECT_EQ(matrix_at(f, 4, 1), matrix_at(s2, 0, 1));
  EXPECT_EQ(r.register_request(1, {1, 2, 3, 9}), 0);  // prompt ids come from the captures
}

TEST(AccuracyReplacer, DecodeOneSlotPerRequestWithBatchPadding) {
  TensorReplacer r = two_prompts();
  r.register_request(100, {10, 20, 30});
  r.register_request(200, {40, 50});
  // positions = [5, 3, 0, 0]: slots 2 and 3 are padding (2 >= len(req_ids)).
  ReplacementContext ctx = r.build_context({100, 200}, {5, 3, 0, 0}, false);
  const Matrix& m = ctx.at("m");
  ASSERT_EQ(m.rows, 4);
  ASSERT_EQ(m.cols, 2);
  EXPECT_EQ(matrix_at(m, 0, 1), 0 * 1000 + 5 * 10 + 1);  // prompt_0_tensor[5]
  EXPECT_EQ(matrix_at(m, 1, 0), 1 * 1000 + 3 * 10 + 0);  // prompt_1_tensor[3]
  for (int s : {2, 3})
    for (int c : {0, 1}) EXPECT_EQ(matrix_at(m, s, c), 0.0f);
}

TEST(AccuracyReplacer, SpecDecodeOneRequestFourSlots) {
  TensorReplacer r = two_prompts();
  r.register_request(1, {10, 20, 30, 4, 4, 4, 4, 4});
  ReplacementContext ctx = r.build_context({1}, {8, 9, 10, 11}, false, 4);
  const Matrix& m = ctx.at("m");
  for (int s = 0; s < 4; ++s) EXPECT_EQ(matrix_at(m, s, 0), (8 + s) * 10) << s;
}

TEST(AccuracyReplacer, SpecDecodeTwoRequestsFourSlotsEach) {
  TensorReplacer r = two_prompts();
  r.register_request(1, {10, 20, 30});
  r.register_request(2, {40, 50});
  ReplacementContext ctx = r.build_context({1, 2}, {8, 9, 10, 11, 5, 6, 7, 8}, false, 4);
  const Matrix& m = ctx.at("m");
  const int want[8][2] = {{0, 8}, {0, 9}, {0, 10}, {0, 11}, {1, 5}, {1, 6}, {1, 7}, {1, 8}};
  for (int s = 0; s < 8; ++s) EXPECT_EQ(matrix_at(m, s, 1), want[s][0] * 1000 + want[s][1] * 10 + 1) << "slot " << s;
}

TEST(AccuracyReplacer, SpecDecodeSlotsPastTheRequestsArePadding) {
  TensorReplacer r = two_prompts();
  r.register_request(1, {10, 20, 30});
  // One request × 4 slots, bucket of 6: slots 4 and 5 stay zero even with real-looking positions.
  ReplacementContext ctx = r.build_context({1}, {8, 9, 10, 11, 12, 13}, false, 4);
  const Matrix& m = ctx.at("m");
  EXPECT_EQ(matrix_at(m, 3, 0), 110.0f);
  EXPECT_EQ(matrix_at(m, 4, 0), 0.0f);
  EXPECT_EQ(matrix_at(m, 5, 1), 0.0f);
  EXPECT_EQ(r.stats().rows_replaced, 4u);
}

TEST(AccuracyReplacer, PrefillPaddingStartsAtTheFirstRepeatedPosition) {
  TensorReplacer r = two_prompts();
  r.register_request(1, {10, 20, 30});
  ReplacementContext ctx = r.build_context({1}, {0, 1, 2, 3, 3, 3}, true);
  const Matrix& m = ctx.at("m");
  for (int s = 0; s < 4; ++s) EXPECT_EQ(matrix_at(m, s, 0), s * 10);
  EXPECT_EQ(matrix_at(m, 4, 0), 0.0f);
  EXPECT_EQ(matrix_at(m, 5, 1), 0.0f);
  // A later chunk of a chunked prefill: absolute positions index the flat tensor directly.
  ReplacementContext c2 = r.build_context({1}, {4, 5, 6, 6}, true);
  EXPECT_EQ(matrix_at(c2.at("m"), 0, 0), 40.0f);
  EXPECT_EQ(matrix_at(c2.at("m"), 2, 1), 61.0f);
  EXPECT_EQ(matrix_at(c2.at("m"), 3, 1), 0.0f);
}

TEST(AccuracyReplacer, EmptyRequestListGivesAnEmptyContextAndWarmupGivesZeros) {
  TensorReplacer r = two_prompts();
  EXPECT_TRUE(r.build_context({}, {0, 1}, true).empty());
  ReplacementContext w = r.warmup_context(7);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w.at("m").rows, 7);
  EXPECT_EQ(w.at("m").cols, 2);
  for (float v : w.at("m").data) EXPECT_EQ(v, 0.0f);
  EXPECT_THROW(r.warmup_context(-1), Error);
}

TEST(AccuracyReplacer, PositionPastTheReferenceIsAnErrorByDefaultAndCounted) {
  TensorReplacer r = two_prompts();
  r.register_request(1, {10, 20, 30});
  const std::string e = error_of([&] { r.build_context({1}, {15, 16}, false, 2); });
  EXPECT_NE(e.find("position 16"), std::string::npos) << e;
  EXPECT_NE(e.find("0..15"), std::string::npos) << e;
  EXPECT_NE(e.find("on_missing_position"), std::string::npos) << e;
  EXPECT_EQ(r.stats().rows_past_reference, 1u);
}

TEST(AccuracyReplacer, ZeroPolicyZeroFillsAndCounts) {
  TensorReplacer r = two_prompts({10, 20, 30}, {40, 50}, MissingPosition::Zero);
  r.register_request(1, {10, 20, 30});
  ReplacementContext ctx = r.build_context({1}, {15, 16, 17}, false, 3);
  EXPECT_EQ(matrix_at(ctx.at("m"), 0, 0), 150.0f);
  EXPECT_EQ(matrix_at(ctx.at("m"), 1, 0), 0.0f);
  EXPECT_EQ(r.stats().rows_past_reference, 2u);
  EXPECT_EQ(r.stats().rows_replaced, 1u);
  r.reset_stats();
  EXPECT_EQ(r.stats().rows_past_reference, 0u);
}

TEST(AccuracyReplacer, UnregisteredRequestIsAnError) {
  TensorReplacer r = two_prompts();
  EXPECT_NE(error_of([&] { r.build_context({9}, {0}, false); }).find("request 9 was never registered"),
            std::string::npos);
  EXPECT_THROW(r.build_context({9}, {0}, false, 0), Error);  // tokens_per_req < 1
}

TEST(AccuracyReplacer, ConstructionErrors) {
  using Flat = std::vector<std::map<std::string, Matrix>>;
  EXPECT_NE(error_of([] { TensorReplacer(Flat{}, {}); }).find("no prompts"), std::string::npos);
  EXPECT_NE(error_of([] { TensorReplacer(Flat{{{"m", mat(2, 2, 0)}}}, {{1}, {2}}); }).find("2 prompt token lists"),
            std::string::npos);
  EXPECT_NE(error_of([] { TensorReplacer(Flat{{}}, {{1}}); }).find("holds no tensors"), std::string::npos);
  EXPECT_NE(error_of([] { TensorReplacer(Flat{{{"m", mat(2, 2, 0)}}, {{"m", mat(2, 3, 1)}}}, {{1}, {2}}); })
                .find("3 features in prompt 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { TensorReplacer(Flat{{{"m", mat(2, 2, 0)}}, {{"x", mat(2, 2, 1)}}}, {{1}, {2}}); })
                .find("prompt 0 does not"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              TensorReplacer(Flat{{{"m", mat(2, 2, 0)}, {"x", mat(2, 2, 0)}}, {{"m", mat(2, 2, 1)}}}, {{1}, {2}});
            }).find("lacks x"),
            std::string::npos);
  Matrix bad = mat(2, 2, 0);
  bad.data.pop_back();
  EXPECT_NE(error_of([&] { TensorReplacer(Flat{{{"m", bad}}}, {{1}}); }).find("holds 3 values"), std::string::npos);
}

TEST(AccuracyReplacer, ModuleFilterKeepsOnlyNamedModulesAndRefusesUnknownOnes) {
  using Flat = std::vector<std::map<std::string, Matrix>>;
  TensorReplacer r(Flat{{{"a", mat(2, 2, 0)}, {"b", mat(2, 3, 0)}}}, {{1}});
  EXPECT_NE(error_of([&] { r.restrict_to({"c"}); }).find("holds: a, b"), std::string::npos);
  r.restrict_to({"b"});
  EXPECT_EQ(r.modules(), std::vector<std::string>{"b"});
  EXPECT_FALSE(r.has_module("a"));
  EXPECT_EQ(r.warmup_context(1).size(), 1u);
  EXPECT_THROW(r.feature_size("a"), Error);
  EXPECT_THROW(r.reference(0, "a"), Error);
  EXPECT_THROW(r.reference(1, "b"), Error);
}

TEST(AccuracyReplacer, MissingPositionNames) {
  EXPECT_EQ(missing_position_from_name("error"), MissingPosition::Error);
  EXPECT_EQ(missing_position_from_name("zero"), MissingPosition::Zero);
  EXPECT_NE(error_of([] { missing_position_from_name("skip"); }).find("\"skip\""), std::string::npos);
}

// ---- the global (thread-local) hand-off ----------------------------------------------------

TEST(AccuracyActiveContext, NothingWhenUnconfiguredTheTensorWhenSet) {
  set_active_context(nullptr);
  EXPECT_EQ(get_replacement_tensor("m"), nullptr);
  TensorReplacer r = two_prompts();
  r.register_request(1, {10, 20, 30});
  {
    ActiveContextScope scope(std::make_shared<ReplacementContext>(r.build_context({1}, {2}, false)));
    const Matrix* m = get_replacement_tensor("m");
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(matrix_at(*m, 0, 1), 21.0f);
    EXPECT_EQ(get_replacement_tensor("other"), nullptr);
  }
  EXPECT_EQ(get_replacement_tensor("m"), nullptr);
}

// ---- sharded injection points ---------------------------------------------------------------

TEST(AccuracyShardRows, SlicesTheRanksRows) {
  Matrix full = mat(8, 3, 0);
  Matrix s = shard_rows(full, 1, 4);
  ASSERT_EQ(s.rows, 2);
  ASSERT_EQ(s.cols, 3);
  EXPECT_EQ(matrix_at(s, 0, 0), 20.0f);
  EXPECT_EQ(matrix_at(s, 1, 2), 32.0f);
  EXPECT_EQ(shard_rows(full, 0, 1).data, full.data);
}

TEST(AccuracyShardRows, Errors) {
  Matrix full = mat(6, 2, 0);
  EXPECT_NE(error_of([&] { shard_rows(full, 0, 4); }).find("6 rows do not split evenly over 4"), std::string::npos);
  EXPECT_THROW(shard_rows(full, 2, 2), Error);
  EXPECT_THROW(shard_rows(full, -1, 2), Error);
  EXPECT_THROW(shard_rows(full, 0, 0), Error);
}

// ---- hooks at the injection point ------------------------------------------------------------

namespace {

struct FakePass {
  model::ForwardBatch batch;
  model::ProbeRows meta;
  // Two sequences in one pass: request 100 positions 3..5 (a prefill chunk), request 200 at 7.
  FakePass() {
    batch.seqs = {{0, 3, 3}, {1, 7, 1}};
    batch.request_ids = {100, 200};
    meta.batch = &batch;
    meta.seq = {0, 0, 0, 1};
    meta.position = {3, 4, 5, 7};
  }
};

}  // namespace

TEST(AccuracyReplacementHooks, OverwritesEachRowFromItsRequestAndPosition) {
  TensorReplacer r = two_prompts();
  r.register_request(100, {10, 20, 30, 1});
  r.register_request(200, {40, 50, 1});
  ReplacementHooks h(r);
  EXPECT_TRUE(h.wants("m"));
  EXPECT_FALSE(h.wants("n"));
  FakePass p;
  std::vector<float> live(8, -1.0f);
  h.visit("m", live.data(), 4, 2, p.meta);
  EXPECT_EQ(live, (std::vector<float>{30, 31, 40, 41, 50, 51, 1070, 1071}));
}

TEST(AccuracyReplacementHooks, Errors) {
  TensorReplacer r = two_prompts();
  r.register_request(100, {10, 20, 30});
  ReplacementHooks h(r);
  FakePass p;
  std::vector<float> live(12);
  EXPECT_NE(error_of([&] { h.visit("m", live.data(), 4, 3, p.meta); }).find("2 features in the reference but 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { h.visit("m", live.data(), 4, 2, p.meta); }).find("request 200 was never registered"),
            std::string::npos);
  EXPECT_THROW(h.visit("m", live.data(), 3, 2, p.meta), Error);  // rows vs metadata
}

TEST(AccuracyContextHooks, CopiesTheActiveContextAndChecksItsShape) {
  TensorReplacer r = two_prompts();
  r.register_request(1, {10, 20, 30});
  ContextHooks h;
  set_active_context(nullptr);
  EXPECT_FALSE(h.wants("m"));
  ActiveContextScope scope(std::make_shared<ReplacementContext>(r.build_context({1}, {0, 1, 2, 2}, true)));
  EXPECT_TRUE(h.wants("m"));
  FakePass p;
  std::vector<float> live(6, -1.0f);
  h.visit("m", live.data(), 3, 2, p.meta);
  EXPECT_EQ(live, (std::vector<float>{0, 1, 10, 11, 20, 21}));
  std::vector<float> big(10);
  EXPECT_NE(error_of([&] { h.visit("m", big.data(), 5, 2, p.meta); }).find("4 slots but the pass has 5 rows"),
            std::string::npos);
  EXPECT_NE(error_of([&] { h.visit("m", big.data(), 2, 5, p.meta); }).find("features"), std::string::npos);
}

// ---- the session: checks against the model ---------------------------------------------------

namespace {

Captures one_module(const std::string& name, int64_t cols, int64_t rows = 8) {
  Captures c;
  PromptCapture p;
  p.prompt_token_ids = {1, 2, 3};
  p.flat[name] = mat(rows, cols, 0);
  c.prompts.push_back(p);
  return c;
}

ReplacementConfig cfg_of(Captures c) {
  ReplacementConfig cfg;
  cfg.tensors = std::move(c);
  return cfg;
}

}  // namespace

TEST(AccuracyReplacementSession, AcceptsAProbePointWithTheRightSize) {
  ReplacementSession s(cfg_of(one_module("backbone.layers.0.mixer", 64)), test::tiny_model());
  EXPECT_EQ(s.replacer().modules(), std::vector<std::string>{"backbone.layers.0.mixer"});
  EXPECT_NE(s.describe().find("1 module(s) from 1 reference prompt(s), on_missing_position error"), std::string::npos);
}

TEST(AccuracyReplacementSession, UnknownModuleIsAnError) {
  const std::string e =
      error_of([] { ReplacementSession(cfg_of(one_module("model.layers.0.mlp.router", 64)), test::tiny_model()); });
  EXPECT_NE(e.find("model.layers.0.mlp.router is not a probe point"), std::string::npos) << e;
}

TEST(AccuracyReplacementSession, FeatureSizeMismatchWithTheModelIsAnError) {
  const std::string e =
      error_of([] { ReplacementSession(cfg_of(one_module("backbone.layers.0.mixer", 65)), test::tiny_model()); });
  EXPECT_NE(e.find("65 features in the reference but 64 in the model"), std::string::npos) << e;
}

TEST(AccuracyReplacementSession, DtypeMismatchIsAnErrorUnlessWideningIsAllowed) {
  ReplacementConfig cfg = cfg_of(one_module("backbone.layers.0.mixer", 64));
  cfg.tensor_dtypes["backbone.layers.0.mixer"] = DType::BF16;
  const std::string e = error_of([&] { ReplacementSession(cfg, test::tiny_model()); });
  EXPECT_NE(e.find("is BF16 in the reference but the live tensor is F32"), std::string::npos) << e;
  cfg.allow_dtype_widening = true;
  EXPECT_NO_THROW(ReplacementSession(cfg, test::tiny_model()));
}

TEST(AccuracyReplacementSession, ConfigSourceErrors) {
  ReplacementConfig both = cfg_of(one_module("lm_head", 512));
  both.tensors_path = "x.safetensors";
  EXPECT_NE(error_of([&] { ReplacementSession(both, test::tiny_model()); }).find("not both"), std::string::npos);
  EXPECT_NE(error_of([] { ReplacementSession(ReplacementConfig{}, test::tiny_model()); }).find("no reference tensors"),
            std::string::npos);
  ReplacementConfig ids = cfg_of(one_module("lm_head", 512));
  ids.prompt_token_ids = std::vector<std::vector<int32_t>>{{1}};
  ids.prompt_token_ids_path = "ids.json";
  EXPECT_NE(error_of([&] { ReplacementSession(ids, test::tiny_model()); }).find("prompt_token_ids_path, not both"),
            std::string::npos);
  ReplacementConfig count = cfg_of(one_module("lm_head", 512));
  count.prompt_token_ids = std::vector<std::vector<int32_t>>{{1}, {2}};
  EXPECT_NE(error_of([&] { ReplacementSession(count, test::tiny_model()); }).find("2 prompt token lists for 1"),
            std::string::npos);
  ReplacementConfig filt = cfg_of(one_module("lm_head", 512));
  filt.modules = {"backbone.norm_f"};
  EXPECT_NE(error_of([&] { ReplacementSession(filt, test::tiny_model()); }).find("module filter names backbone.norm_f"),
            std::string::npos);
}

TEST(AccuracyReplacementSession, ListenerBindsExplicitlyOrMatchesByPrefix) {
  Captures c = one_module("lm_head", 512);
  PromptCapture p1 = c.prompts[0];
  p1.prompt_token_ids = {1, 2, 3, 4, 5};
  c.prompts.push_back(p1);
  ReplacementSession s(cfg_of(c), test::tiny_model());
  engine::RequestSpec spec;
  spec.prompt = {1, 2, 3, 4, 5};
  s.on_request(1, spec);
  EXPECT_EQ(s.replacer().resolve(1), 1);  // the seed's corner case under prefix matching
  spec.reference_prompt = 0;
  s.on_request(2, spec);
  EXPECT_EQ(s.replacer().resolve(2), 0);  // explicit binding
  // Through the engine: an unknown reference prompt rejects the request and queues nothing.
  engine::Engine eng(test::tiny_model(), engine::EngineConfig{});
  s.attach(eng);
  spec.reference_prompt = 5;
  EXPECT_THROW(eng.add_request(spec), Error);
  EXPECT_FALSE(eng.has_unfinished());
}

// ---- --additional-config ---------------------------------------------------------------------

TEST(AccuracyAdditionalConfig, ParsesEveryKey) {
  auto j = parse_additional_config(R"({"tensor_replacement": {"tensors_path": "t.safetensors",
      "prompt_token_ids_path": "ids.json", "on_missing_position": "zero",
      "modules": ["backbone.layers.0.mixer"], "allow_dtype_widening": true}})");
  auto c = replacement_config_from_json(j);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->tensors_path, "t.safetensors");
  EXPECT_EQ(c->prompt_token_ids_path, "ids.json");
  EXPECT_EQ(c->on_missing_position, MissingPosition::Zero);
  EXPECT_EQ(c->modules, std::vector<std::string>{"backbone.layers.0.mixer"});
  EXPECT_TRUE(c->allow_dtype_widening);
  EXPECT_FALSE(replacement_config_from_json(parse_additional_config("{}")).has_value());
  EXPECT_EQ(make_replacement_from_additional_config(nlohmann::json::object(), test::tiny_model()), nullptr);
}

TEST(AccuracyAdditionalConfig, ErrorsNameTheProblem) {
  auto err = [](const std::string& text) {
    return error_of([&] { replacement_config_from_json(parse_additional_config(text)); });
  };
  EXPECT_NE(err("{\"tensor_replacement\": ").find("not valid JSON"), std::string::npos);
  EXPECT_NE(err("[1]").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(err(R"({"neuron_config": {}})").find("unknown key \"neuron_config\" in the top level"), std::string::npos);
  EXPECT_NE(err(R"({"tensor_replacement": {"tensors_path": "a", "tensor_path": "b"}})")
                .find("unknown key \"tensor_path\" in tensor_replacement"),
            std::string::npos);
  EXPECT_NE(err(R"({"tensor_replacement": {}})").find("needs \"tensors_path\""), std::string::npos);
  EXPECT_NE(err(R"({"tensor_replacement": 3})").find("must be an object"), std::string::npos);
  EXPECT_NE(err(R"({"tensor_replacement": {"tensors_path": 3}})").find("tensors_path must be a string"),
            std::string::npos);
  EXPECT_NE(err(R"({"tensor_replacement": {"tensors_path": "a", "on_missing_position": "skip"}})")
                .find("on_missing_position must be"),
            std::string::npos);
  EXPECT_NE(err(R"({"tensor_replacement": {"tensors_path": "a", "modules": "x"}})").find("list of names"),
            std::string::npos);
  EXPECT_NE(err(R"({"tensor_replacement": {"tensors_path": "a", "modules": [1]}})").find("not a name"),
            std::string::npos);
  EXPECT_NE(err(R"({"tensor_replacement": {"tensors_path": "a", "modules": []}})").find("modules is empty"),
            std::string::npos);
  EXPECT_NE(err(R"({"tensor_replacement": {"tensors_path": "a", "allow_dtype_widening": 1}})").find("true or false"),
            std::string::npos);
}

TEST(AccuracyAdditionalConfig, LoadsACapturesFileWithItsOwnOrSeparatePromptIds) {
  auto dir = test::scratch_dir("acc_cfg");
  Captures c = one_module("backbone.layers.1.mixer", 64);
  write_captures((dir / "t.safetensors").string(), c);
  const std::string path = (dir / "t.safetensors").string();
  auto s = make_replacement_from_additional_config(
      parse_additional_config(R"({"tensor_replacement": {"tensors_path": ")" + path + "\"}}"), test::tiny_model());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->replacer().register_request(1, {1, 2, 3, 4}), 0);  // ids from the file
  test::write_text(dir / "ids.json", "[[[7, 8]]]");                // the tokenizer's batch dimension
  auto s2 = make_replacement_from_additional_config(
      parse_additional_config(R"({"tensor_replacement": {"tensors_path": ")" + path +
                              R"(", "prompt_token_ids_path": ")" + (dir / "ids.json").string() + "\"}}"),
      test::tiny_model());
  EXPECT_EQ(s2->replacer().register_request(1, {7, 8, 9}), 0);
  EXPECT_THROW(s2->replacer().register_request(2, {1, 2, 3}), Error);
  test::write_text(dir / "bad.json", "[[1, \"x\"]]");
  const std::string e = error_of([&] {
    make_replacement_from_additional_config(
        parse_additional_config(R"({"tensor_replacement": {"tensors_path": ")" + path +
                                R"(", "prompt_token_ids_path": ")" + (dir / "bad.json").string() + "\"}}"),
        test::tiny_model());
  });
  EXPECT_NE(e.find("not a token id"), std::string::npos) << e;
  std::filesystem::remove_all(dir);
}

TEST(AccuracyAdditionalConfig, AReferenceFileInBf16IsRefusedUnlessWideningIsAllowed) {
  auto dir = test::scratch_dir("acc_bf16");
  const std::string path = (dir / "t.safetensors").string();
  std::vector<int64_t> ids = {1, 2, 3};
  std::vector<uint16_t> vals(8 * 64, 0x3f80);  // bf16 1.0
  io::write_safetensors(path,
                        {{"p0/prompt_token_ids", DType::I64, {3}, ids.data()},
                         {"p0/backbone.layers.0.mixer", DType::BF16, {8, 64}, vals.data()}},
                        {{"layout", "flat"}, {"modules", "backbone.layers.0.mixer"}, {"num_prompts", "1"}});
  const std::string cfg = R"({"tensor_replacement": {"tensors_path": ")" + path + "\"";
  const std::string e = error_of(
      [&] { make_replacement_from_additional_config(parse_additional_config(cfg + "}}"), test::tiny_model()); });
  EXPECT_NE(e.find("backbone.layers.0.mixer is BF16 in the reference but the live tensor is F32"), std::string::npos)
      << e;
  auto s = make_replacement_from_additional_config(parse_additional_config(cfg + R"(, "allow_dtype_widening": true}})"),
                                                   test::tiny_model());
  EXPECT_EQ(s->replacer().reference(0, "backbone.layers.0.mixer").data[5], 1.0f);
  std::filesystem::remove_all(dir);
}
