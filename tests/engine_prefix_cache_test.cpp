// Prefix caching: in exact mode a request that starts from a cached prefix produces every logit row
// bit for bit as single-shot prefill of its stream, whatever split made the cached state and
// whatever schedule follows (random budgets, arrivals, preemption; prompts ending on, one before
// and one after a grid cell and a chunk boundary; Mamba2 and hybrid models). Plain mode is the
// companion: a hit there can differ from a miss. Unit tests cover the key (numerics and caller
// identity), the LRU budget and the KV block sharing.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "cache/prefix_cache.h"
#include "engine/engine.h"
#include "model/model.h"
#include "test_support.h"

using namespace parity;
using engine::Engine;
using engine::EngineConfig;
using engine::RequestSpec;
using model::ScanMode;

namespace {

// Prompt + forced continuation, raw logits of every row from the last prompt token on.
RequestSpec forced_request(const std::vector<int32_t>& stream, int prompt_len) {
  RequestSpec r;
  r.prompt.assign(stream.begin(), stream.begin() + prompt_len);
  r.forced.assign(stream.begin() + prompt_len, stream.end());
  r.return_logits = true;
  return r;
}

// Shared prefix lengths around the interesting boundaries: the prefix block B, the exact grid's
// cell (8) and the model's chunk (32 for the tiny built-ins), on, one before and one after.
std::vector<int> prefix_lengths(int B) {
  std::vector<int> v;
  for (int base : {B, 2 * B, 3 * B, 8 * 5, 32, 64})
    for (int d : {-1, 0, 1}) v.push_back(base + d);
  return v;
}

struct SharedPrefixRun {
  std::map<uint64_t, engine::RequestResult> out;
  std::vector<std::vector<int32_t>> streams;
  std::vector<int> prompt_lens;
  std::vector<uint64_t> ids;
  cache::PrefixCacheStats stats;
};

// Three requests sharing a prefix of `shared` tokens (then different suffixes), added at random
// steps, under a random token budget and possibly a forced preemption.
SharedPrefixRun run_shared(const model::Model& m, ScanMode mode, bool caching, int B, int shared, uint64_t seed,
                           std::optional<int> budget_override = std::nullopt) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  const int V = m.vocab_size();
  const std::vector<int32_t> prefix = test::random_tokens(rng, shared, V);
  SharedPrefixRun res;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> s = prefix;
    const int suffix = 1 + static_cast<int>(rng() % 20), forced = 1 + static_cast<int>(rng() % 12);
    const auto tail = test::random_tokens(rng, suffix + forced, V);
    s.insert(s.end(), tail.begin(), tail.end());
    res.streams.push_back(s);
    res.prompt_lens.push_back(shared + suffix);
  }
  EngineConfig c;
  c.mode = mode;
  c.enable_prefix_caching = caching;
  c.prefix_block_tokens = B;
  c.sched.max_num_batched_tokens = budget_override ? *budget_override : 1 + static_cast<int>(rng() % 70);
  c.sched.max_num_seqs = 1 + static_cast<int>(rng() % 3);
  if (rng() % 3 == 0) c.preempt_at_step = 2 + static_cast<int>(rng() % 8);
  // Arrivals: request i joins at a random step (the first at step 0).
  std::vector<int> arrive = {0, static_cast<int>(rng() % 12), static_cast<int>(rng() % 24)};
  std::sort(arrive.begin(), arrive.end());
  Engine e(m, c);
  std::size_t added = 0;
  for (int step = 0; added < 3 || e.has_unfinished(); ++step) {
    while (added < 3 && arrive[added] <= step) {
      res.ids.push_back(e.add_request(forced_request(res.streams[added], res.prompt_lens[added])));
      ++added;
    }
    Engine::accumulate(res.out, e.step());
  }
  if (e.prefix_cache()) res.stats = e.prefix_cache()->stats();
  return res;
}

// Rows of request i that differ from single-shot prefill of its stream (with the engine's
// numerics); every row P-1 … end must be there.
int mismatches_vs_single_shot(const model::Model& m, const SharedPrefixRun& r, std::size_t i,
                              const cache::Numerics& num) {
  const int V = m.vocab_size();
  const auto ref = model::score_all_rows(m, r.streams[i], num);
  const engine::RequestResult& got = r.out.at(r.ids[i]);
  const int64_t P = r.prompt_lens[i], N = static_cast<int64_t>(r.streams[i].size());
  EXPECT_EQ(static_cast<int64_t>(got.logit_positions.size()), N - P + 1);
  int bad = 0;
  for (std::size_t k = 0; k < got.logit_positions.size(); ++k) {
    EXPECT_EQ(got.logit_positions[k], P - 1 + static_cast<int64_t>(k));
    bad += !test::same_bits(got.logit_rows[k].data(), ref.data() + got.logit_positions[k] * V, V);
  }
  return bad;
}

class PrefixCacheExact : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefixCacheExact, HitsAreBitIdenticalToSingleShotUnderRandomSchedules) {
  const auto& m = test::cached_model(GetParam());
  const cache::Numerics num = model::default_numerics(m, ScanMode::Exact);
  uint64_t hits = 0, hit_tokens = 0, seed = 1;
  for (int B : {16, 32}) {
    for (int shared : prefix_lengths(B)) {
      SCOPED_TRACE("block " + std::to_string(B) + ", shared prefix " + std::to_string(shared) + ", seed " +
                   std::to_string(seed));
      const SharedPrefixRun r = run_shared(m, ScanMode::Exact, true, B, shared, seed++);
      for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(mismatches_vs_single_shot(m, r, i, num), 0) << "request " << i;
      hits += r.stats.hits;
      hit_tokens += r.stats.hit_tokens;
    }
  }
  // The schedules are random, but most of them let a later request find the first one's prefix.
  EXPECT_GT(hits, 10u);
  EXPECT_GT(hit_tokens, 10u * 16u);
}

// The companion: with the same schedules in plain mode a hit can change bits (the cached state
// was made by other chunks than a miss computes), so the exact-mode check above can fail.
TEST_P(PrefixCacheExact, PlainModeHitsCanDifferFromMisses) {
  const auto& m = test::cached_model(GetParam());
  int differing = 0;
  uint64_t hits = 0;
  for (int shared : {33, 47, 64}) {
    // A budget that splits the prompts, the same with and without caching.
    const SharedPrefixRun with = run_shared(m, ScanMode::Plain, true, 16, shared, 100 + shared, 24);
    const SharedPrefixRun without = run_shared(m, ScanMode::Plain, false, 16, shared, 100 + shared, 24);
    hits += with.stats.hits;
    for (std::size_t i = 0; i < 3; ++i) {
      const auto& a = with.out.at(with.ids[i]);
      const auto& b = without.out.at(without.ids[i]);
      ASSERT_EQ(a.logit_rows.size(), b.logit_rows.size());
      for (std::size_t k = 0; k < a.logit_rows.size(); ++k)
        differing += !test::same_bits(a.logit_rows[k].data(), b.logit_rows[k].data(), a.logit_rows[k].size());
    }
  }
  EXPECT_GT(hits, 0u);
  EXPECT_GT(differing, 0);
}

INSTANTIATE_TEST_SUITE_P(Builtins, PrefixCacheExact,
                         ::testing::Values("builtin:tiny", "builtin:tiny-g2", "builtin:tiny-hybrid"),
                         test::builtin_param_name);

// One request after another with the same prompt: the second computes only the tokens after the
// last cached block boundary, and its rows are the first's.
TEST(PrefixCache, SecondIdenticalRequestReusesTheLastBlockBoundary) {
  const auto& m = test::cached_model("builtin:tiny");
  std::mt19937 rng(7);
  const auto s = test::random_tokens(rng, 50 + 5, m.vocab_size());
  EngineConfig c;
  c.mode = ScanMode::Exact;
  c.enable_prefix_caching = true;
  c.prefix_block_tokens = 16;
  Engine e(m, c);
  const uint64_t a = e.add_request(forced_request(s, 50));
  auto ra = e.run_to_completion();
  const int64_t steps_a = e.steps();
  const uint64_t b = e.add_request(forced_request(s, 50));
  auto rb = e.run_to_completion();
  const auto& st = e.prefix_cache()->stats();
  EXPECT_EQ(st.lookups, 2u);
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.hit_tokens, 48u);  // blocks end at 16, 32, 48 ≤ 49
  EXPECT_EQ(st.entries, 3);       // states at 16, 32 and 48
  EXPECT_EQ(st.inserts, 3u);
  // The first request's prefill ran in four chunks (cut at 16, 32, 48), the second in one.
  EXPECT_EQ(steps_a, 4 + 5);
  EXPECT_EQ(e.steps() - steps_a, 1 + 5);
  ASSERT_EQ(ra[a].logit_rows.size(), rb[b].logit_rows.size());
  for (std::size_t k = 0; k < ra[a].logit_rows.size(); ++k)
    EXPECT_TRUE(test::same_bits(ra[a].logit_rows[k].data(), rb[b].logit_rows[k].data(), ra[a].logit_rows[k].size()));
}

// A request that wants its prompt's logit rows computes them: it takes no cached prefix.
TEST(PrefixCache, PromptLogitRequestsComputeEveryRow) {
  const auto& m = test::cached_model("builtin:tiny");
  std::mt19937 rng(8);
  const auto s = test::random_tokens(rng, 40, m.vocab_size());
  EngineConfig c;
  c.mode = ScanMode::Exact;
  c.enable_prefix_caching = true;
  c.prefix_block_tokens = 16;
  Engine e(m, c);
  e.add_request(forced_request(s, 36));
  e.run_to_completion();
  const uint64_t b = e.add_request(test::teacher_forced_all_rows(s, 36));
  auto out = e.run_to_completion();
  EXPECT_EQ(e.prefix_cache()->stats().hits, 0u);
  EXPECT_EQ(out[b].logit_rows.size(), s.size());
}

// The key: the numerics identity and the caller's identity are part of it, and an entry made
// under one identity is never returned under another.
TEST(PrefixCache, KeyIncludesNumericsAndCallerIdentity) {
  const auto& m = test::cached_model("builtin:tiny");
  const cache::Numerics exact = model::default_numerics(m, ScanMode::Exact);
  cache::Numerics other = exact;
  other.grid.cell = 16;
  auto c1 = cache::make_single_cache(m.cache_spec(), 64, exact);
  auto c2 = cache::make_single_cache(m.cache_spec(), 64, other);
  cache::PrefixCache p1(c1, exact, 1 << 30, 16), p2(c2, other, 1 << 30, 16);
  std::mt19937 rng(9);
  const auto t = test::random_tokens(rng, 40, m.vocab_size());
  EXPECT_NE(p1.prefix_key(t, 2, 0), p2.prefix_key(t, 2, 0));  // numerics
  EXPECT_NE(p1.prefix_key(t, 2, 0), p1.prefix_key(t, 2, 1));  // caller identity
  EXPECT_NE(p1.prefix_key(t, 2, 0), p1.prefix_key(t, 1, 0));  // length
  auto t2 = t;
  t2[3] ^= 1;
  EXPECT_NE(p1.prefix_key(t, 2, 0), p1.prefix_key(t2, 2, 0));  // any token of the prefix
  // An entry under identity 5 serves identity 5 only.
  const int slot = c1.allocate();
  c1.set_position(slot, 32);
  p1.insert(slot, t, 5, 77);
  c1.release(slot);
  const int s2 = c1.allocate();
  EXPECT_EQ(p1.acquire(s2, t, 39, 6).length, 0);
  const cache::PrefixHit h = p1.acquire(s2, t, 39, 5);
  EXPECT_EQ(h.length, 32);
  EXPECT_EQ(h.source, 77u);
  EXPECT_EQ(c1.position(s2), 32);
}

// The budget: least recently used entries go first; a hit refreshes its entry.
TEST(PrefixCache, LruEvictionWithinTheBudget) {
  const auto& m = test::cached_model("builtin:tiny");
  const cache::Numerics num = model::default_numerics(m, ScanMode::Exact);
  auto c = cache::make_single_cache(m.cache_spec(), 64, num);
  cache::MambaSlotImage probe;
  const int slot = c.allocate();
  c.save_state(slot, probe);
  const std::size_t one = probe.bytes();
  cache::PrefixCache p(c, num, 2 * one + one / 2, 16);  // room for two images
  std::mt19937 rng(10);
  std::vector<std::vector<int32_t>> t;
  for (int i = 0; i < 3; ++i) t.push_back(test::random_tokens(rng, 20, m.vocab_size()));
  c.set_position(slot, 16);
  p.insert(slot, t[0], 0, 1);
  p.insert(slot, t[1], 0, 2);
  EXPECT_EQ(p.acquire(slot, t[0], 19, 0).length, 16);  // refreshes t[0]
  c.release(slot);
  const int s = c.allocate();
  c.set_position(s, 16);
  p.insert(s, t[2], 0, 3);  // evicts t[1], the least recently used
  EXPECT_EQ(p.stats().entries, 2);
  EXPECT_EQ(p.stats().evictions, 1u);
  EXPECT_EQ(p.stats().state_bytes, 2 * one);
  c.release(s);
  const int s3 = c.allocate();
  EXPECT_EQ(p.acquire(s3, t[1], 19, 0).length, 0);
  c.release(s3);
  const int s4 = c.allocate();
  EXPECT_EQ(p.acquire(s4, t[0], 19, 0).length, 16);
  // A budget below one image stores nothing.
  cache::PrefixCache tiny_budget(c, num, one - 1, 16);
  tiny_budget.insert(s4, t[0], 0, 1);
  EXPECT_EQ(tiny_budget.stats().entries, 0);
}

// Hybrids: cached prefixes share KV blocks with the sequences that use them; every block is free
// again once the sequences are done and the cache is cleared; the rows stay exact.
TEST(PrefixCache, HybridSharesKvBlocks) {
  const auto& m = test::cached_model("builtin:tiny-hybrid");
  const cache::Numerics num = model::default_numerics(m, ScanMode::Exact);
  std::mt19937 rng(11);
  const int V = m.vocab_size();
  const auto prefix = test::random_tokens(rng, 64, V);
  std::vector<std::vector<int32_t>> streams;
  for (int i = 0; i < 6; ++i) {
    auto s = prefix;
    const auto tail = test::random_tokens(rng, 10 + i, V);
    s.insert(s.end(), tail.begin(), tail.end());
    streams.push_back(s);
  }
  EngineConfig c;
  c.mode = ScanMode::Exact;
  c.enable_prefix_caching = true;
  c.prefix_block_tokens = 16;
  c.sched.max_num_seqs = 2;
  Engine e(m, c);
  std::vector<uint64_t> ids;
  for (const auto& s : streams) ids.push_back(e.add_request(forced_request(s, 70)));
  auto out = e.run_to_completion();
  const auto& st = e.prefix_cache()->stats();
  EXPECT_GE(st.hits, 4u);
  EXPECT_EQ(st.kv_blocks, 1 + 2 + 3 + 4);  // the prefixes 16, 32, 48, 64: four distinct blocks
  const cache::KvCache* kv = e.cache().kv();
  ASSERT_NE(kv, nullptr);
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const auto ref = model::score_all_rows(m, streams[i], num);
    const auto& got = out[ids[i]];
    for (std::size_t k = 0; k < got.logit_positions.size(); ++k)
      EXPECT_TRUE(test::same_bits(got.logit_rows[k].data(), ref.data() + got.logit_positions[k] * V, V));
  }
  EXPECT_EQ(kv->num_free_blocks(), kv->num_blocks() - 4);
  const_cast<cache::PrefixCache*>(e.prefix_cache())->clear();
  EXPECT_EQ(kv->num_free_blocks(), kv->num_blocks());
}

}  // namespace
