// Speculative decoding: in exact mode the output with drafts equals the output without, token for
// token and logit row for logit row (greedy and seeded sampling, n-gram and draft-model drafters,
// several requests sharing passes, forced preemption, drafts longer than a grid cell), and rejected
// rows leave no trace in the state, the replay ring or the KV cache. Plain mode is the companion:
// there the rows differ.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/speculation/draft_model_drafter.h"
#include "engine/speculation/drafter.h"
#include "engine/speculation/ngram_drafter.h"
#include "model/model.h"
#include "test_support.h"

using namespace parity;
using engine::Engine;
using engine::EngineConfig;
using engine::RequestSpec;
using model::ScanMode;

namespace {

// A prompt that repeats a short random phrase (n-gram drafting hits) or random text (it rarely does).
std::vector<int32_t> make_prompt(std::mt19937& rng, int n, int vocab, bool repetitive) {
  std::vector<int32_t> phrase(static_cast<std::size_t>(3 + rng() % 5));
  for (auto& t : phrase) t = static_cast<int32_t>(rng() % static_cast<unsigned>(vocab));
  std::vector<int32_t> p(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    p[static_cast<std::size_t>(i)] = repetitive ? phrase[static_cast<std::size_t>(i) % phrase.size()]
                                                : static_cast<int32_t>(rng() % static_cast<unsigned>(vocab));
  return p;
}

struct Workload {
  std::vector<RequestSpec> requests;
  EngineConfig cfg;
};

Workload make_workload(uint64_t seed, ScanMode mode, int vocab) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  Workload w;
  w.cfg.mode = mode;
  w.cfg.sched.max_num_seqs = 1 + static_cast<int>(rng() % 4);
  w.cfg.sched.max_num_batched_tokens = 8 + static_cast<int>(rng() % 60);
  if (rng() % 3 == 0) w.cfg.preempt_at_step = 3 + static_cast<int>(rng() % 10);
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < n; ++i) {
    RequestSpec r;
    r.prompt = make_prompt(rng, 5 + static_cast<int>(rng() % 40), vocab, rng() % 4 != 0);
    r.sampling.max_tokens = 8 + static_cast<int>(rng() % 30);
    if (rng() % 2) {  // seeded sampling
      r.sampling.temperature = 0.7f;
      r.sampling.top_k = 40;
      r.sampling.seed = rng();
    }
    r.return_logits = true;
    w.requests.push_back(r);
  }
  return w;
}

std::vector<engine::RequestResult> run(const model::Model& m, const Workload& w, const engine::SpeculativeConfig& sp,
                                       engine::SpeculationStats* stats = nullptr) {
  EngineConfig c = w.cfg;
  c.speculative = sp;
  Engine e(m, c);
  std::vector<uint64_t> ids;
  for (const auto& r : w.requests) ids.push_back(e.add_request(r));
  auto out = e.run_to_completion();
  if (stats) *stats = e.speculation_stats();
  std::vector<engine::RequestResult> res;
  for (uint64_t id : ids) res.push_back(out[id]);
  return res;
}

// Rows that differ between two runs of the same requests (tokens must agree for rows to line up).
int64_t differing_rows(const std::vector<engine::RequestResult>& a, const std::vector<engine::RequestResult>& b) {
  int64_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].tokens != b[i].tokens || a[i].logit_positions != b[i].logit_positions) return -1;
    for (std::size_t k = 0; k < a[i].logit_rows.size(); ++k)
      bad += !test::same_bits(a[i].logit_rows[k].data(), b[i].logit_rows[k].data(), a[i].logit_rows[k].size());
  }
  return bad;
}

// Knows every request's final stream (from a run without drafts; request ids are given in the
// same order) and proposes its true continuation, sometimes with one token wrong and sometimes
// shorter: high acceptance with rejections at every place, so verified rows are kept, cut and
// undone in all combinations.
class OracleDrafter : public engine::Drafter {
 public:
  OracleDrafter(std::map<uint64_t, std::vector<int32_t>> streams, int vocab, uint32_t seed)
      : streams_(std::move(streams)), vocab_(vocab), rng_(seed) {}
  void propose(std::vector<engine::DraftQuery>& qs) override {
    for (auto& q : qs) {
      const auto& full = streams_.at(q.request);
      const std::size_t T = q.tokens->size();
      q.drafts.clear();
      for (std::size_t i = T; i < full.size() && q.drafts.size() < static_cast<std::size_t>(q.room); ++i)
        q.drafts.push_back(full[i]);
      if (!q.drafts.empty() && rng_() % 3 == 0) {
        auto& t = q.drafts[rng_() % q.drafts.size()];
        t = (t + 1) % vocab_;
      }
      if (!q.drafts.empty() && rng_() % 6 == 0) q.drafts.resize(rng_() % q.drafts.size());
    }
  }
  const char* name() const override { return "oracle"; }

 private:
  std::map<uint64_t, std::vector<int32_t>> streams_;
  int vocab_;
  std::mt19937 rng_;
};

std::map<uint64_t, std::vector<int32_t>> final_streams(const Workload& w, const std::vector<engine::RequestResult>& r) {
  std::map<uint64_t, std::vector<int32_t>> out;
  for (std::size_t i = 0; i < r.size(); ++i) {
    auto s = w.requests[i].prompt;
    s.insert(s.end(), r[i].tokens.begin(), r[i].tokens.end());
    out[i + 1] = s;  // ids count from 1 in every engine
  }
  return out;
}

TEST(NgramDrafter, ProposesWhatFollowedTheLatestEarlierOccurrence) {
  engine::NgramDrafter d(1, 3);
  EXPECT_EQ(d.lookup({5, 1, 2, 3, 4, 1, 2}, 3), (std::vector<int32_t>{3, 4, 1}));     // [1, 2] at 1
  EXPECT_EQ(d.lookup({7, 8, 9, 7, 8, 1, 7, 8}, 2), (std::vector<int32_t>{1, 7}));     // latest [7, 8] at 3
  EXPECT_EQ(d.lookup({1, 2, 3, 4}, 3), (std::vector<int32_t>{}));                      // no repeat
  EXPECT_EQ(d.lookup({4, 4, 4}, 5), (std::vector<int32_t>{4}));                        // the stream's end bounds it
  EXPECT_THROW(engine::NgramDrafter(2, 1), Error);
}

class SpeculativeExact : public ::testing::TestWithParam<std::string> {};

TEST_P(SpeculativeExact, OutputEqualsNonSpeculativeTokenForTokenAndRowForRow) {
  const auto& m = test::cached_model(GetParam());
  engine::SpeculationStats oracle, ngram;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const Workload w = make_workload(seed, ScanMode::Exact, m.vocab_size());
    const auto base = run(m, w, {});
    engine::SpeculativeConfig sp;
    sp.num_tokens = 3;
    engine::SpeculationStats st;
    {
      SCOPED_TRACE("seed " + std::to_string(seed) + ", ngram");
      EXPECT_EQ(differing_rows(base, run(m, w, sp, &st)), 0);
      ngram.drafted += st.drafted;
    }
    for (int k : {1, 3, 9}) {  // 9 > the 8-row grid cell: verified rows cross a boundary of every head
      SCOPED_TRACE("seed " + std::to_string(seed) + ", oracle, k " + std::to_string(k));
      OracleDrafter d(final_streams(w, base), m.vocab_size(), static_cast<uint32_t>(seed * 10 + k));
      sp.num_tokens = k;
      sp.method = engine::SpeculativeMethod::Custom;
      sp.drafter = &d;
      EXPECT_EQ(differing_rows(base, run(m, w, sp, &st)), 0);
      oracle.drafted += st.drafted;
      oracle.accepted += st.accepted;
      oracle.rollbacks += st.rollbacks;
    }
  }
  // The workloads exercise both sides: accepted drafts and rejected ones that were undone.
  EXPECT_GT(ngram.drafted, 0u);
  EXPECT_GT(oracle.accepted, 500u);
  EXPECT_GT(oracle.rollbacks, 50u);
  EXPECT_GT(oracle.drafted, oracle.accepted);
}

// The draft-model drafter: the target itself (acceptance is high: it differs from the target only in
// its plain-mode rounding) and another built-in of the same vocabulary (acceptance is low).
TEST_P(SpeculativeExact, DraftModelDrafterKeepsTheOutput) {
  const auto& m = test::cached_model(GetParam());
  for (const std::string& draft : {GetParam(), std::string("builtin:tiny-g2")}) {
    const auto& d = test::cached_model(draft);
    if (d.vocab_size() != m.vocab_size()) continue;
    engine::SpeculationStats total;
    // Six workloads; two in the sanitizer build (the same drafters, rollbacks and assertions).
    for (uint64_t seed = 20; seed <= (test::kSanitizerBuild ? 21u : 25u); ++seed) {
      SCOPED_TRACE("draft " + draft + ", seed " + std::to_string(seed));
      const Workload w = make_workload(seed, ScanMode::Exact, m.vocab_size());
      engine::SpeculativeConfig sp;
      sp.num_tokens = 4;
      sp.method = engine::SpeculativeMethod::DraftModel;
      sp.draft_model = &d;
      engine::SpeculationStats st;
      EXPECT_EQ(differing_rows(run(m, w, {}), run(m, w, sp, &st)), 0);
      total.drafted += st.drafted;
      total.accepted += st.accepted;
    }
    EXPECT_GT(total.drafted, 0u);
    if (draft == GetParam()) {
      EXPECT_GT(total.accepted, 0u);
    }
  }
}

// The companion: plain mode with drafts differs from plain mode without (a verification pass is a
// multi-row SSD call where decode would have been SSU steps, and rollback recomputes), so the
// exact-mode check above can fail.
TEST_P(SpeculativeExact, PlainModeRowsDiffer) {
  const auto& m = test::cached_model(GetParam());
  int64_t differ = 0, diverged = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const Workload w = make_workload(seed, ScanMode::Plain, m.vocab_size());
    engine::SpeculativeConfig sp;
    sp.num_tokens = 3;
    const int64_t d = differing_rows(run(m, w, {}), run(m, w, sp));
    if (d < 0) ++diverged;  // even the tokens changed
    else differ += d;
  }
  EXPECT_GT(differ + diverged, 0);
}

INSTANTIATE_TEST_SUITE_P(Builtins, SpeculativeExact,
                         ::testing::Values("builtin:tiny", "builtin:tiny-g2", "builtin:tiny-hybrid"),
                         test::builtin_param_name);

// Rejected rows leave no trace: whenever the speculative engine has its one sequence at position P,
// the sequence's whole state — conv state, boundary states, replay ring, and the K/V of every
// block it holds — has the bytes the non-speculative engine has at P.
TEST(SpeculativeState, RejectedRowsLeaveNoTrace) {
  for (const char* spec : {"builtin:tiny", "builtin:tiny-hybrid"}) {
    SCOPED_TRACE(spec);
    const auto& m = test::cached_model(spec);
    std::mt19937 rng(5);
    RequestSpec r;
    r.prompt = make_prompt(rng, 30, m.vocab_size(), true);
    r.sampling.max_tokens = 60;
    EngineConfig c;
    c.mode = ScanMode::Exact;
    c.sched.max_num_seqs = 1;
    Workload w;
    w.requests = {r};
    const auto ref = run(m, w, {});
    OracleDrafter d(final_streams(w, ref), m.vocab_size(), 3);
    Engine base(m, c);
    c.speculative.num_tokens = 5;
    c.speculative.method = engine::SpeculativeMethod::Custom;
    c.speculative.drafter = &d;
    Engine spec_e(m, c);
    base.add_request(r);
    spec_e.add_request(r);
    int compared = 0;
    auto image = [](const Engine& e) {
      cache::MambaSlotImage img;
      e.cache().save_state(0, img);
      return img;
    };
    // K and V of the blocks that hold positions < P (zero past P: rejected rows are erased).
    auto kv_bytes = [](const Engine& e, int64_t P) {
      std::vector<float> out;
      const cache::KvCache* kv = e.cache().kv();
      if (!kv) return out;
      const int64_t bf = kv->layout().block_floats();
      const int blocks = kv->blocks_for(P);
      auto* k = const_cast<cache::KvCache*>(kv);
      for (int l = 0; l < kv->num_layers(); ++l)
        for (int b = 0; b < blocks; ++b)
          for (float* base_ptr : {k->k(l), k->v(l)}) {
            const float* p = base_ptr + kv->block_table(0)[b] * bf;
            out.insert(out.end(), p, p + bf);
          }
      return out;
    };
    while (spec_e.has_unfinished()) {
      spec_e.step();
      if (!spec_e.has_unfinished() || !spec_e.cache().in_use(0)) break;
      const int64_t P = spec_e.cache().position(0);
      while (base.cache().position(0) < P) base.step();
      ASSERT_EQ(base.cache().position(0), P);
      const auto a = image(base), b = image(spec_e);
      EXPECT_EQ(a.conv, b.conv);
      EXPECT_EQ(a.ring, b.ring);
      EXPECT_EQ(a.ssm_f32, b.ssm_f32);
      if (m.cache_spec().num_attention_layers > 0) {
        EXPECT_EQ(kv_bytes(base, P), kv_bytes(spec_e, P));
      }
      ++compared;
    }
    EXPECT_GT(spec_e.speculation_stats().rollbacks, 0u);
    EXPECT_GT(compared, 5);
  }
}

// The draft model keeps a state per request; when a request it still holds is not drafted for (it
// was preempted), its slot goes to the next one, and coming back it catches up from scratch.
TEST(DraftModelDrafter, ReusesTheSlotOfARequestNotBeingDrafted) {
  const auto& m = test::cached_model("builtin:tiny");
  engine::DraftModelDrafter d(m, 1, 256);
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {9, 8, 7};
  std::vector<engine::DraftQuery> q1 = {{1, &a, 3, {}}};
  d.propose(q1);
  std::vector<engine::DraftQuery> q2 = {{2, &b, 3, {}}};
  EXPECT_NO_THROW(d.propose(q2));
  std::vector<engine::DraftQuery> q3 = {{1, &a, 3, {}}};
  d.propose(q3);
  EXPECT_EQ(q1[0].drafts, q3[0].drafts);  // recomputed from scratch: the same greedy drafts
  EXPECT_EQ(q1[0].drafts.size(), 3u);
}

// Bad configurations are errors that name the problem.
TEST(SpeculativeConfig, BadSettingsAreErrors) {
  const auto& m = test::cached_model("builtin:tiny");
  EngineConfig c;
  c.speculative.num_tokens = 3;
  c.speculative.method = engine::SpeculativeMethod::DraftModel;
  EXPECT_THROW(Engine(m, c), Error);  // no draft model
  c.speculative.draft_model = &test::cached_model("mamba2_g1");  // 256 tokens, the target 512
  try {
    Engine e(m, c);
    ADD_FAILURE() << "a draft model of another vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary"), std::string::npos) << e.what();
  }
  c.speculative = {};
  c.speculative.num_tokens = 65;
  EXPECT_THROW(Engine(m, c), Error);
}

}  // namespace
