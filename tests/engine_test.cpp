// Engine behaviour: sampling determinism, stop / max_tokens / abort, preemption, rejection.
#include <gtest/gtest.h>

#include <random>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "test_support.h"

using namespace parity;
using engine::Engine;
using engine::EngineConfig;
using engine::FinishReason;
using engine::RequestSpec;
using model::ScanMode;

namespace {

RequestSpec prompt_spec(uint32_t seed, int len, int max_tokens) {
  std::mt19937 rng(seed);
  RequestSpec r;
  for (int i = 0; i < len; ++i) r.prompt.push_back(static_cast<int32_t>(rng() % 512));
  r.sampling.max_tokens = max_tokens;
  return r;
}

EngineConfig engine_config(ScanMode mode = ScanMode::Exact) {
  EngineConfig c;
  c.mode = mode;
  c.sched.max_num_seqs = 8;
  c.sched.max_num_batched_tokens = 64;
  return c;
}

std::vector<int32_t> run_one(const RequestSpec& s, EngineConfig c = engine_config()) {
  Engine e(test::tiny_model(), c);
  auto id = e.add_request(s);
  return e.run_to_completion()[id].tokens;
}

TEST(EngineSampling, SameSeedSameTokensAtBatch1AndBatch8) {
  RequestSpec s = prompt_spec(1, 40, 24);
  s.sampling.temperature = 0.9f;
  s.sampling.top_k = 50;
  s.sampling.top_p = 0.95f;
  s.sampling.seed = 1234;
  auto alone = run_one(s);
  Engine e(test::tiny_model(), engine_config());
  uint64_t target = 0;
  for (int i = 0; i < 8; ++i) {
    RequestSpec o = i == 3 ? s : prompt_spec(100 + i, 10 + 7 * i, 30);
    o.sampling.temperature = 1.0f;
    o.sampling.seed = i;
    if (i == 3) o = s;
    uint64_t id = e.add_request(o);
    if (i == 3) target = id;
  }
  auto all = e.run_to_completion();
  EXPECT_EQ(all[target].tokens, alone);
  EXPECT_EQ(alone.size(), 24u);
  // A different seed must be able to change the tokens (the check above can fail).
  RequestSpec s2 = s;
  s2.sampling.seed = 99;
  EXPECT_NE(run_one(s2), alone);
}

TEST(EngineSampling, GreedyPicksArgmaxAndDrawsAreSeedIndexed) {
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f};
  engine::SamplingParams p;
  EXPECT_EQ(engine::sample_token(l.data(), 4, p, 0), 1);  // ties → lowest id
  // The draw stream is pinned (splitmix64 of seed ^ golden·(index+1), top 53 bits): a change
  // would silently change every seeded request's tokens.
  EXPECT_EQ(engine::draw_uniform(5, 3), 3927412742104442.0 / 9007199254740992.0);
  EXPECT_EQ(engine::draw_uniform(5, 4), 1949510179313395.0 / 9007199254740992.0);
  p.temperature = 1.0f;
  p.top_k = 1;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(engine::sample_token(l.data(), 4, p, i), 1);
  // Two equally likely tokens: draw i alone picks the token (u < 0.5 → the first), and over 64
  // draws both come up.
  const std::vector<float> even = {0.0f, 0.0f};
  p.top_k = 0;
  p.seed = 5;
  int ones = 0;
  for (int i = 0; i < 64; ++i) {
    const int32_t t = engine::sample_token(even.data(), 2, p, i);
    EXPECT_EQ(t, engine::draw_uniform(5, i) < 0.5 ? 0 : 1) << i;
    ones += t;
  }
  EXPECT_GT(ones, 16);
  EXPECT_LT(ones, 48);
}

TEST(Engine, MaxTokensAndStopTokens) {
  RequestSpec s = prompt_spec(2, 30, 12);
  Engine e(test::tiny_model(), engine_config());
  auto id = e.add_request(s);
  auto r = e.run_to_completion()[id];
  ASSERT_EQ(r.tokens.size(), 12u);
  EXPECT_EQ(r.finish, FinishReason::Length);
  // Stop at the 5th greedy token: the stop token is the last one returned.
  RequestSpec st = s;
  st.sampling.stop_token_ids = {r.tokens[4]};
  auto first = std::find(r.tokens.begin(), r.tokens.end(), r.tokens[4]) - r.tokens.begin();
  Engine e2(test::tiny_model(), engine_config());
  auto id2 = e2.add_request(st);
  auto r2 = e2.run_to_completion()[id2];
  EXPECT_EQ(r2.finish, FinishReason::Stop);
  EXPECT_EQ(static_cast<long>(r2.tokens.size()), first + 1);
  EXPECT_TRUE(std::equal(r2.tokens.begin(), r2.tokens.end(), r.tokens.begin()));
}

TEST(Engine, AbortStopsOneRequestOthersContinueUnchanged) {
  RequestSpec a = prompt_spec(3, 20, 20), b = prompt_spec(4, 25, 20);
  auto solo_b = run_one(b);
  Engine e(test::tiny_model(), engine_config());
  auto ia = e.add_request(a);
  auto ib = e.add_request(b);
  std::map<uint64_t, engine::RequestResult> out;
  for (int i = 0; i < 5; ++i) Engine::accumulate(out, e.step());
  EXPECT_TRUE(e.abort(ia));
  EXPECT_FALSE(e.abort(ia));
  while (e.has_unfinished()) Engine::accumulate(out, e.step());
  EXPECT_EQ(out[ia].tokens.size(), 5u);
  EXPECT_EQ(out[ib].tokens, solo_b);
}

// The finish listener hears of every request once, with how it ended, in the step that ended it
// (or from abort); a preemption is no end.
TEST(Engine, FinishListenerHearsEachEndOnce) {
  EngineConfig c = engine_config();
  c.preempt_at_step = 3;
  Engine e(test::tiny_model(), c);
  std::vector<std::pair<uint64_t, FinishReason>> heard;
  e.set_finish_listener([&](uint64_t id, FinishReason why) { heard.emplace_back(id, why); });
  const auto len = e.add_request(prompt_spec(7, 20, 6));
  RequestSpec st = prompt_spec(10, 20, 30);
  st.sampling.stop_token_ids = {run_one(st).at(2)};
  const auto stop = e.add_request(st);
  RequestSpec f = prompt_spec(8, 15, 0);
  f.forced = {1, 2, 3};
  const auto forced = e.add_request(f);
  const auto aborted = e.add_request(prompt_spec(9, 12, 10));
  EXPECT_TRUE(e.abort(aborted));
  EXPECT_FALSE(e.abort(aborted));
  ASSERT_EQ(heard.size(), 1u);
  std::map<uint64_t, engine::RequestResult> out;
  while (e.has_unfinished()) {
    const std::size_t before = heard.size();
    const auto step = e.step();
    Engine::accumulate(out, step);
    std::vector<std::pair<uint64_t, FinishReason>> ended;
    for (const auto& o : step)
      if (o.finished != FinishReason::None) ended.emplace_back(o.id, o.finished);
    EXPECT_EQ(std::vector(heard.begin() + static_cast<long>(before), heard.end()), ended) << "step " << e.steps();
  }
  EXPECT_GT(e.num_preemptions(len), 0);
  const std::map<uint64_t, FinishReason> want = {
      {len, FinishReason::Length}, {stop, FinishReason::Stop}, {forced, FinishReason::Forced}, {aborted, FinishReason::Aborted}};
  EXPECT_EQ((std::map<uint64_t, FinishReason>(heard.begin(), heard.end())), want);
  EXPECT_EQ(heard.size(), 4u);
}

TEST(Engine, PreemptAndResumeLosesNoToken) {
  for (ScanMode mode : {ScanMode::Exact, ScanMode::Plain}) {
    RequestSpec s = prompt_spec(5, 45, 30);
    EngineConfig c = engine_config(mode);
    auto unpreempted = run_one(s, c);
    c.preempt_at_step = 9;
    Engine e(test::tiny_model(), c);
    auto id = e.add_request(s);
    auto r = e.run_to_completion()[id];
    EXPECT_EQ(r.num_preemptions, 1);
    ASSERT_EQ(r.tokens.size(), 30u);
    if (mode == ScanMode::Exact) {
      EXPECT_EQ(r.tokens, unpreempted);  // exact: even the values agree
    }
  }
}

TEST(Engine, ExplicitPreemptRequeuesUnderTheSameId) {
  Engine e(test::tiny_model(), engine_config());
  auto id = e.add_request(prompt_spec(6, 10, 8));
  e.step();
  EXPECT_TRUE(e.preempt(id));
  auto r = e.run_to_completion();
  ASSERT_EQ(r.count(id), 1u);
  EXPECT_EQ(r[id].tokens.size(), 7u);  // the first token came from the step before preemption
}

// Exact mode keeps a bf16 boundary state (rounded at every grid boundary), and its identity is
// the resolved grid; a grid that is not a power of two is refused naming the flag.
TEST(Engine, ExactModeNumericsAreResolvedAndBadGridsRefused) {
  EngineConfig c = engine_config(ScanMode::Exact);
  c.ssm_cache_dtype = DType::BF16;
  Engine e(test::tiny_model(), c);
  EXPECT_TRUE(e.numerics().exact);
  EXPECT_EQ(e.numerics().ssm_dtype, DType::BF16);
  EXPECT_EQ(e.numerics().grid.cell, kernels::kDefaultExactCell);
  EXPECT_EQ(e.numerics().grid.stagger, kernels::kDefaultExactCell != test::tiny_model().chunk_size());
  c.exact_grid = test::tiny_model().chunk_size();
  EXPECT_FALSE(Engine(test::tiny_model(), c).numerics().grid.stagger)
      << "the chunk-size grid is the RFC layout: no stagger";
  c.exact_grid = 24;
  try {
    Engine bad(test::tiny_model(), c);
    FAIL() << "a 24-row grid must be refused";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("--exact-grid"), std::string::npos) << err.what();
  }
}

TEST(Engine, BadRequestsAreRejectedWhileOthersKeepRunning) {
  RequestSpec good = prompt_spec(7, 30, 10);
  auto solo = run_one(good);
  EngineConfig c = engine_config();
  c.max_model_len = 100;
  Engine e(test::tiny_model(), c);
  auto id = e.add_request(good);
  std::map<uint64_t, engine::RequestResult> out;
  Engine::accumulate(out, e.step());
  RequestSpec bad = prompt_spec(8, 10, 5);
  bad.prompt[3] = 512;
  EXPECT_THROW(e.add_request(bad), Error);
  bad.prompt[3] = -1;
  EXPECT_THROW(e.add_request(bad), Error);
  EXPECT_THROW(e.add_request(prompt_spec(9, 95, 10)), Error);  // 105 > max_model_len
  EXPECT_THROW(e.add_request(RequestSpec{}), Error);           // empty prompt
  RequestSpec badforced = prompt_spec(10, 5, 1);
  badforced.forced = {1, 99999};
  EXPECT_THROW(e.add_request(badforced), Error);
  while (e.has_unfinished()) Engine::accumulate(out, e.step());
  EXPECT_EQ(out[id].tokens, solo);
  EXPECT_EQ(out.size(), 1u);
}

TEST(Engine, StateBudgetLimitsConcurrentSequences) {
  EngineConfig c = engine_config();
  auto one = cache::slot_bytes(test::tiny_model().cache_spec().mamba, test::tiny_model().cache_spec().num_mamba_layers,
                               {1, DType::F32, true, {}})
                 .total();
  c.state_memory_budget = one * 2 + 1;
  Engine e(test::tiny_model(), c);
  EXPECT_EQ(e.plan().num_slots, 2);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(e.add_request(prompt_spec(20 + i, 12, 4)));
  auto r = e.run_to_completion();
  for (auto id : ids) EXPECT_EQ(r[id].tokens.size(), 4u);
  c.state_memory_budget = one - 1;
  EXPECT_THROW(Engine(test::tiny_model(), c), Error);
}

TEST(Engine, ForcedContinuationYieldsKPlusOneRows) {
  RequestSpec s = prompt_spec(11, 20, 1);
  s.forced = {1, 2, 3, 4, 5};
  s.return_logits = true;
  Engine e(test::tiny_model(), engine_config());
  auto id = e.add_request(s);
  auto r = e.run_to_completion()[id];
  EXPECT_EQ(r.finish, FinishReason::Forced);
  EXPECT_EQ(r.tokens, s.forced);
  ASSERT_EQ(r.logit_positions.size(), 6u);
  EXPECT_EQ(r.logit_positions.front(), 19);
  EXPECT_EQ(r.logit_positions.back(), 24);
}

}  // namespace
