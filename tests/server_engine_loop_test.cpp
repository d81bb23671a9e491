// The server's engine thread: tickets from several threads run in shared passes and get exactly
// what the engine gives one request alone (exact mode); a ticket with one bad sequence leaves
// nothing in the engine; the admission bound refuses, and cancelling frees the room.
#include <gtest/gtest.h>

#include <thread>

#include "engine/engine.h"
#include "frontends/server/engine_loop.h"
#include "model/model.h"
#include "test_support.h"

namespace parity::server {
namespace {

using namespace std::chrono_literals;

engine::EngineConfig loop_config(int seqs, model::ScanMode mode = model::ScanMode::Exact) {
  engine::EngineConfig cfg;
  cfg.mode = mode;
  cfg.sched.max_num_seqs = seqs;
  cfg.sched.max_num_batched_tokens = 5;
  cfg.max_model_len = 4096;
  // Plain mode (the companion) keeps an fp32 state: a bf16 state can round away the differences a
  // split prompt makes, and then whether the companion sees them depends on how threads interleave.
  if (mode == model::ScanMode::Plain) cfg.ssm_cache_dtype = DType::F32;
  return cfg;
}
engine::EngineConfig exact_loop_config(int seqs) { return loop_config(seqs); }

engine::RequestSpec spec(int i, int max_tokens = 6) {
  engine::RequestSpec s;
  for (int k = 0; k < 3 + i % 7; ++k) s.prompt.push_back(1 + (i * 37 + k * 11) % 500);
  s.sampling.max_tokens = max_tokens;
  s.sampling.temperature = 0.8f;
  s.sampling.seed = 100 + static_cast<uint64_t>(i);
  s.sampling.logprobs = 1;
  return s;
}

// Every event of a ticket folded into per-sequence results.
std::vector<engine::RequestResult> collect(Ticket& t, int n) {
  std::vector<engine::RequestResult> out(static_cast<std::size_t>(n));
  for (;;) {
    auto events = t.wait(100ms);
    for (auto& e : events) {
      auto& r = out[static_cast<std::size_t>(e.index)];
      r.tokens.insert(r.tokens.end(), e.tokens.begin(), e.tokens.end());
      r.logprobs.insert(r.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
      if (e.finished != engine::FinishReason::None) r.finish = e.finished;
    }
    if (events.empty() && t.state() == Ticket::State::Finished) break;
  }
  return out;
}

// 12 sequences from 6 client threads through one loop (3 slots, 5-token passes) against each run
// alone with a large budget; returns how many log-probs differ.
int mismatches_against_alone(model::ScanMode mode) {
  engine::Engine eng(test::tiny_model(), loop_config(3, mode));
  EngineLoop loop(eng, test::tiny_model().vocab_size(), 64);
  std::vector<std::vector<engine::RequestResult>> got(6);
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c)
    clients.emplace_back([&, c] {
      auto t = loop.submit({spec(2 * c), spec(2 * c + 1)}, {});
      if (!t) return ADD_FAILURE() << "refused";
      if (t->wait_admission() == Ticket::State::Rejected) return ADD_FAILURE() << "rejected: " << t->error();
      got[static_cast<std::size_t>(c)] = collect(*t, 2);
    });
  for (auto& th : clients) th.join();
  int bad = 0;
  for (int i = 0; i < 12; ++i) {
    engine::EngineConfig alone_cfg = loop_config(1, mode);
    alone_cfg.sched.max_num_batched_tokens = 2048;
    engine::Engine alone(test::tiny_model(), alone_cfg);
    const uint64_t id = alone.add_request(spec(i));
    const engine::RequestResult want = alone.run_to_completion()[id];
    if (got[static_cast<std::size_t>(i / 2)].size() != 2) {
      ++bad;
      continue;
    }
    const engine::RequestResult& r = got[static_cast<std::size_t>(i / 2)][static_cast<std::size_t>(i % 2)];
    EXPECT_EQ(r.finish, engine::FinishReason::Length);
    if (r.tokens != want.tokens || r.logprobs.size() != want.logprobs.size()) {
      ++bad;
      continue;
    }
    for (std::size_t k = 0; k < r.logprobs.size(); ++k) bad += r.logprobs[k][0].logprob != want.logprobs[k][0].logprob;
  }
  EXPECT_TRUE(loop.idle());
  EXPECT_EQ(loop.stats().sequences_finished, 12u);
  EXPECT_EQ(loop.stats().generation_tokens, 12u * 6u);
  return bad;
}

TEST(ServerEngineLoop, ConcurrentTicketsEqualOneRequestAlone) {
  EXPECT_EQ(mismatches_against_alone(model::ScanMode::Exact), 0);
}

// Companion: plain mode cuts the prompts at other places than the run alone, and it shows.
TEST(ServerEngineLoop, PlainModeDiffersSoTheCheckCanFail) {
  EXPECT_GT(mismatches_against_alone(model::ScanMode::Plain), 0);
}

TEST(ServerEngineLoop, ABadSequenceRejectsTheWholeTicket) {
  engine::Engine eng(test::tiny_model(), exact_loop_config(4));
  EngineLoop loop(eng, test::tiny_model().vocab_size(), 64);
  engine::RequestSpec bad = spec(1);
  bad.prompt.push_back(100000);  // outside the vocabulary: the engine refuses it
  auto t = loop.submit({spec(0), bad}, {});
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->wait_admission(), Ticket::State::Rejected);
  EXPECT_NE(t->error().find("outside the vocabulary"), std::string::npos) << t->error();
  EXPECT_TRUE(loop.idle());
  EXPECT_EQ(loop.stats().sequences_rejected, 2u);
  // The engine is untouched: the next request runs normally.
  auto ok = loop.submit({spec(0)}, {});
  ASSERT_NE(ok->wait_admission(), Ticket::State::Rejected);
  EXPECT_EQ(collect(*ok, 1)[0].tokens.size(), 6u);
}

TEST(ServerEngineLoop, AdmissionBoundAndCancel) {
  engine::Engine eng(test::tiny_model(), exact_loop_config(1));
  EngineLoop loop(eng, test::tiny_model().vocab_size(), 2);
  auto a = loop.submit({spec(0, 3000)}, {});
  auto b = loop.submit({spec(1, 3000)}, {});
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(loop.submit({spec(2)}, {}), nullptr);  // 2 sequences queued or running: full
  EXPECT_EQ(loop.submit({spec(2), spec(3), spec(4)}, {}), nullptr);
  a->wait_admission();
  a->cancel();  // the client went away
  const auto r = collect(*a, 1);
  EXPECT_EQ(r[0].finish, engine::FinishReason::Aborted);
  EXPECT_LT(r[0].tokens.size(), 3000u);
  auto c = loop.submit({spec(2)}, {});  // a's room is free again
  ASSERT_NE(c, nullptr);
  b->cancel();
  collect(*b, 1);
  EXPECT_EQ(collect(*c, 1)[0].finish, engine::FinishReason::Length);
  EXPECT_TRUE(loop.idle());
  loop.drain();
  EXPECT_EQ(loop.submit({spec(5)}, {}), nullptr);  // draining: nothing new
}

TEST(ServerEngineLoop, PromptLogprobsScoreEachPromptToken) {
  engine::Engine eng(test::tiny_model(), exact_loop_config(2));
  EngineLoop loop(eng, test::tiny_model().vocab_size(), 8);
  engine::RequestSpec s = spec(3, 2);
  s.return_prompt_logits = true;
  auto t = loop.submit({s}, {2});
  ASSERT_NE(t->wait_admission(), Ticket::State::Rejected);  // Running, or already Finished
  std::vector<std::vector<engine::TokenLogprob>> prompt_lps;
  while (true) {
    auto ev = t->wait(100ms);
    for (auto& e : ev) prompt_lps.insert(prompt_lps.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
    if (ev.empty() && t->state() == Ticket::State::Finished) break;
  }
  ASSERT_EQ(prompt_lps.size(), s.prompt.size() - 1);  // tokens 1.. of the prompt
  for (std::size_t k = 0; k < prompt_lps.size(); ++k) {
    EXPECT_EQ(prompt_lps[k][0].token, s.prompt[k + 1]);
    EXPECT_EQ(prompt_lps[k].size(), 3u);  // chosen + top 2
    EXPECT_LE(prompt_lps[k][0].logprob, 0.0f);
  }
}

}  // namespace
}  // namespace parity::server
