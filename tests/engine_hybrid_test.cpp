// Hybrid models in the engine: the paged KV cache and its allocator, the planner's split of one
// budget between state slots and KV blocks, preemption when KV blocks run out (exact mode stays
// bit-identical to single-shot prefill; plain mode is the companion that differs), and rejection
// of a request that could never fit the KV cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>

#include "accuracy/capture_run.h"
#include "cache/kv_cache.h"
#include "io/safetensors.h"
#include "cache/planner.h"
#include "common/error.h"
#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "test_support.h"

using namespace parity;
using engine::Engine;
using engine::EngineConfig;
using engine::RequestSpec;
using model::ScanMode;

namespace {

// Bytes of one sequence's state and of one KV block for the given mode.
struct Sizes {
  std::size_t state, block;
};
const model::Model& tiny_nemotron() {
  static auto m = model::load_model(model::open_checkpoint("builtin:tiny-nemotron-h"));
  return *m;
}

Sizes sizes(ScanMode mode, const model::Model& m = test::tiny_hybrid_model()) {
  cache::MambaCacheOptions o;
  o.exact = mode == ScanMode::Exact;
  o.ssm_dtype = o.exact ? DType::F32 : DType::BF16;
  const cache::CachePlan p = cache::plan_cache(m.cache_spec(), o, 0, 1);
  return {p.per_seq.total(), p.kv_per_token * static_cast<std::size_t>(p.kv_block_size)};
}

// Four staggered requests of 80 tokens (5 blocks each, 20 in all) over a cache of 10 blocks.
struct TightRun {
  std::map<uint64_t, engine::RequestResult> out;
  std::map<uint64_t, std::vector<int32_t>> streams;
  std::map<uint64_t, int> prompt_len;
  int preemptions = 0;
  int free_blocks_after = -1, blocks = 0;
};

TightRun run_tight(ScanMode mode, int budget_tokens, const model::Model& m = test::tiny_hybrid_model()) {
  const Sizes z = sizes(mode, m);
  EngineConfig c;
  c.mode = mode;
  c.sched.max_num_seqs = 4;
  c.sched.max_num_batched_tokens = budget_tokens;
  c.state_memory_budget = 4 * z.state + 10 * z.block;
  Engine e(m, c);
  EXPECT_EQ(e.plan().num_slots, 4);
  EXPECT_EQ(e.plan().kv_num_blocks, 10);
  TightRun r;
  for (int step = 0; r.streams.size() < 4 || e.has_unfinished(); ++step) {
    if (r.streams.size() < 4 && step % 2 == 0) {
      const int i = static_cast<int>(r.streams.size());
      std::vector<int32_t> s = test::random_tokens(40 + i, 80, 512);
      const uint64_t id = e.add_request(test::teacher_forced_all_rows(s, 30 + 3 * i));
      r.streams[id] = s;
      r.prompt_len[id] = 30 + 3 * i;
    }
    Engine::accumulate(r.out, e.step());
  }
  for (const auto& [id, s] : r.streams) r.preemptions += e.num_preemptions(id);
  r.free_blocks_after = e.cache().kv()->num_free_blocks();
  r.blocks = e.cache().kv()->num_blocks();
  return r;
}

int mismatched_rows(const TightRun& r, const model::Model& m = test::tiny_hybrid_model()) {
  const int V = m.vocab_size();
  int bad = 0;
  for (const auto& [id, s] : r.streams) {
    const auto ref = model::score_all_rows(m, s);
    const engine::RequestResult& got = r.out.at(id);
    EXPECT_EQ(got.logit_positions.size(), s.size());
    for (std::size_t i = 0; i < got.logit_positions.size(); ++i) {
      EXPECT_EQ(got.logit_positions[i], static_cast<int64_t>(i));
      bad += !test::same_bits(got.logit_rows[i].data(), ref.data() + i * V, static_cast<std::size_t>(V));
    }
  }
  return bad;
}

}  // namespace

TEST(KvCache, ReservesGrowsReleasesAndRefusesWhenOut) {
  cache::KvCache kv(2, {1, 16, 16}, 5, 3);
  EXPECT_EQ(kv.blocks_for(0), 0);
  EXPECT_EQ(kv.blocks_for(16), 1);
  EXPECT_EQ(kv.blocks_for(17), 2);
  EXPECT_TRUE(kv.reserve(0, 20));  // 2 blocks
  EXPECT_EQ(kv.capacity(0), 32);
  EXPECT_TRUE(kv.reserve(0, 32));  // already there
  EXPECT_EQ(kv.num_free_blocks(), 3);
  EXPECT_TRUE(kv.reserve(1, 48));  // 3 blocks
  EXPECT_EQ(kv.num_free_blocks(), 0);
  EXPECT_FALSE(kv.reserve(2, 1));
  EXPECT_FALSE(kv.reserve(0, 33));
  EXPECT_EQ(kv.capacity(0), 32) << "a refused reserve takes nothing";
  // Distinct physical blocks across slots.
  std::vector<int> seen = {kv.block_table(0)[0], kv.block_table(0)[1], kv.block_table(1)[0], kv.block_table(1)[1],
                           kv.block_table(1)[2]};
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4}));
  kv.release(1);
  EXPECT_EQ(kv.num_free_blocks(), 3);
  EXPECT_EQ(kv.capacity(1), 0);
  EXPECT_TRUE(kv.reserve(2, 40));
  EXPECT_EQ(kv.bytes_per_token(), 2u * 2u * 16u * 4u);
  EXPECT_THROW(cache::KvCache(1, {1, 16, 24}, 4, 1), Error);  // block size not a multiple of 16
}

TEST(CachePlanner, SplitsOneBudgetBetweenStateSlotsAndKvBlocks) {
  const Sizes z = sizes(ScanMode::Exact);
  cache::MambaCacheOptions o;
  o.exact = true;
  const auto& spec = test::tiny_hybrid_model().cache_spec();
  // Unlimited: max_num_seqs slots, KV room for min(max_model_len, 4096) tokens each.
  cache::CachePlan p = cache::plan_cache(spec, o, 0, 3, 100);
  EXPECT_EQ(p.num_slots, 3);
  EXPECT_EQ(p.kv_num_blocks, 3 * 7);
  EXPECT_EQ(p.kv_per_token, 2u * 2u * 1u * 16u * 4u);  // 2 attention layers, K + V, 1 kv head × 16
  // A budget: every slot gets at least one block, the rest goes to KV.
  p = cache::plan_cache(spec, o, 2 * z.state + 7 * z.block, 8);
  EXPECT_EQ(p.num_slots, 2);
  EXPECT_EQ(p.kv_num_blocks, 7);
  p = cache::plan_cache(spec, o, 8 * (z.state + z.block) - 1, 8);
  EXPECT_EQ(p.num_slots, 7);
  EXPECT_THROW(cache::plan_cache(spec, o, z.state + z.block - 1, 8), Error);
  const std::string d = p.describe();
  EXPECT_NE(d.find("per sequence"), std::string::npos) << d;
  EXPECT_NE(d.find("per token"), std::string::npos) << d;
  // A Mamba-only model plans no KV.
  auto tiny = model::load_model(model::open_checkpoint("builtin:tiny"));
  EXPECT_EQ(cache::plan_cache(tiny->cache_spec(), o, 0, 2).kv_num_blocks, 0);
}

// KV blocks run out: requests are preempted (latest arrival first), recompute later under the
// same id, and every logit row is still bit-identical to single-shot prefill.
TEST(EngineHybrid, KvExhaustionPreemptsAndExactModeStaysBitIdentical) {
  for (int budget : {24, 7}) {
    SCOPED_TRACE("max_num_batched_tokens " + std::to_string(budget));
    const TightRun r = run_tight(ScanMode::Exact, budget);
    RecordProperty("preemptions_budget_" + std::to_string(budget), std::to_string(r.preemptions));
    EXPECT_GT(r.preemptions, 0);
    EXPECT_EQ(mismatched_rows(r), 0);
    for (const auto& [id, s] : r.streams)
      EXPECT_EQ(r.out.at(id).tokens, std::vector<int32_t>(s.begin() + r.prompt_len.at(id), s.end()));
    EXPECT_EQ(r.free_blocks_after, r.blocks) << "every block back on the free list";
  }
}

// The companion: the same schedule in plain mode differs from single-shot, so the check can fail.
TEST(EngineHybrid, KvExhaustionPlainModeDiffers) {
  const TightRun r = run_tight(ScanMode::Plain, 24);
  EXPECT_GT(r.preemptions, 0);
  EXPECT_GT(mismatched_rows(r), 0);
}

// The same on NemotronH (Mamba2, MoE with the sigmoid router, attention without RoPE, ReLU² MLP): real preemption
// when the KV blocks run out, recompute, and every row bit-identical to single-shot prefill in exact mode.
TEST(EngineHybrid, NemotronHKvExhaustionPreemptsAndExactModeStaysBitIdentical) {
  for (int budget : {24, 7}) {
    SCOPED_TRACE("max_num_batched_tokens " + std::to_string(budget));
    const TightRun r = run_tight(ScanMode::Exact, budget, tiny_nemotron());
    EXPECT_GT(r.preemptions, 0);
    EXPECT_EQ(mismatched_rows(r, tiny_nemotron()), 0);
    for (const auto& [id, s] : r.streams)
      EXPECT_EQ(r.out.at(id).tokens, std::vector<int32_t>(s.begin() + r.prompt_len.at(id), s.end()));
    EXPECT_EQ(r.free_blocks_after, r.blocks) << "every block back on the free list";
  }
}

TEST(EngineHybrid, NemotronHKvExhaustionPlainModeDiffers) {
  const TightRun r = run_tight(ScanMode::Plain, 24, tiny_nemotron());
  EXPECT_GT(r.preemptions, 0);
  EXPECT_GT(mismatched_rows(r, tiny_nemotron()), 0);
}

// Greedy generation under KV pressure gives the tokens of an unconstrained run.
TEST(EngineHybrid, GreedyTokensSurvivePreemption) {
  auto run = [](std::size_t budget, int* preemptions) {
    EngineConfig c;
    c.mode = ScanMode::Exact;
    c.sched.max_num_seqs = 3;
    c.sched.max_num_batched_tokens = 32;
    c.state_memory_budget = budget;
    Engine e(test::tiny_hybrid_model(), c);
    std::vector<uint64_t> ids;
    for (int i = 0; i < 3; ++i) {
      RequestSpec s;
      s.prompt = test::random_tokens(70 + i, 20 + 5 * i, 512);
      s.sampling.max_tokens = 40;
      ids.push_back(e.add_request(s));
    }
    auto out = e.run_to_completion();
    std::vector<std::vector<int32_t>> toks;
    for (auto id : ids) {
      toks.push_back(out[id].tokens);
      *preemptions += out[id].num_preemptions;
    }
    return toks;
  };
  const Sizes z = sizes(ScanMode::Exact);
  int p_free = 0, p_tight = 0;
  const auto free_run = run(0, &p_free);
  const auto tight_run = run(3 * z.state + 6 * z.block, &p_tight);
  EXPECT_EQ(p_free, 0);
  EXPECT_GT(p_tight, 0);
  EXPECT_EQ(free_run, tight_run);
  for (const auto& t : free_run) EXPECT_EQ(t.size(), 40u);
}

TEST(EngineHybrid, RequestLargerThanTheWholeKvCacheIsRejected) {
  const Sizes z = sizes(ScanMode::Exact);
  EngineConfig c;
  c.mode = ScanMode::Exact;
  c.state_memory_budget = 2 * z.state + 4 * z.block;  // 64 tokens of KV
  c.sched.max_num_seqs = 2;
  Engine e(test::tiny_hybrid_model(), c);
  RequestSpec ok;
  ok.prompt = test::random_tokens(1, 30, 512);
  ok.sampling.max_tokens = 35;  // feeds 30 + 34 = 64 tokens (the last sampled one is never fed): fits
  const uint64_t id = e.add_request(ok);
  RequestSpec forced;
  forced.prompt = test::random_tokens(3, 30, 512);
  forced.forced = test::random_tokens(4, 34, 512);  // feeds all 64
  const uint64_t id2 = e.add_request(forced);
  for (RequestSpec big : {ok, forced}) {
    if (big.forced.empty()) big.sampling.max_tokens++;
    else big.forced.push_back(1);
    try {
      e.add_request(big);
      ADD_FAILURE() << "a request feeding 65 tokens over a 64-token KV cache was accepted";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("KV cache holds 64"), std::string::npos) << err.what();
    }
  }
  auto out = e.run_to_completion();
  EXPECT_EQ(out[id].tokens.size(), 35u);
  EXPECT_EQ(out[id2].tokens, forced.forced);
}

// The attention and MoE parts hold no per-schedule state: a hybrid sequence alone and packed
// with others (different slots, different KV blocks) gives the same bits, in both modes.
TEST(EngineHybrid, PackingInvarianceInOnePass) {
  const auto& m = test::tiny_hybrid_model();
  const auto a = test::random_tokens(5, 45, 512), s = test::random_tokens(6, 77, 512),
             c = test::random_tokens(7, 20, 512);
  for (auto mode : {ScanMode::Exact, ScanMode::Plain}) {
    cache::ModelCacheOptions o;
    o.mamba.exact = mode == ScanMode::Exact;
    o.mamba.num_slots = 3;
    o.kv_num_blocks = 16;
    cache::ModelCache cc(m.cache_spec(), o);
    model::ForwardBatch b;
    for (const auto* t : {&a, &s, &c}) b.tokens.insert(b.tokens.end(), t->begin(), t->end());
    b.seqs = {{cc.allocate(), 0, 45}, {cc.allocate(), 0, 77}, {cc.allocate(), 0, 20}};
    // Slot 0 takes its blocks last, so the middle sequence does not sit in blocks 0.. as alone.
    ASSERT_TRUE(cc.reserve(b.seqs[2].slot, 20));
    ASSERT_TRUE(cc.reserve(b.seqs[1].slot, 77));
    ASSERT_TRUE(cc.reserve(b.seqs[0].slot, 45));
    for (int i = 0; i < 77; ++i) b.logit_rows.push_back(45 + i);
    std::vector<float> packed(77 * static_cast<std::size_t>(m.vocab_size()));
    m.forward(b, cc, mode, packed.data());
    const auto alone = model::score_all_rows(m, s, mode);
    EXPECT_TRUE(test::same_bits(packed.data(), alone.data(), packed.size()));
  }
}

// The companion: the same comparison sees a hybrid sequence that starts from its neighbour's
// Mamba state and KV blocks (attention then also reads the neighbour's keys). In exact mode that
// sequence is the continuation of the neighbour, bit for bit.
TEST(EngineHybrid, PackingInvarianceCheckSeesALeakedState) {
  const auto& m = test::tiny_hybrid_model();
  const auto a = test::random_tokens(5, 45, 512), s = test::random_tokens(6, 77, 512),
             c = test::random_tokens(7, 20, 512);
  std::vector<int32_t> as = a;
  as.insert(as.end(), s.begin(), s.end());
  const std::size_t V = static_cast<std::size_t>(m.vocab_size());
  for (auto mode : {ScanMode::Exact, ScanMode::Plain}) {
    SCOPED_TRACE(mode == ScanMode::Exact ? "exact" : "plain");
    cache::ModelCacheOptions o;
    o.mamba.exact = mode == ScanMode::Exact;
    o.mamba.num_slots = 2;
    o.kv_num_blocks = 16;
    cache::ModelCache cc(m.cache_spec(), o);
    const int leaky = cc.allocate(), other = cc.allocate();
    ASSERT_TRUE(cc.reserve(leaky, 45 + 77));
    ASSERT_TRUE(cc.reserve(other, 20));
    model::ForwardBatch first;  // a's state and keys are left in the slot s is then given
    first.tokens = a;
    first.seqs = {{leaky, 0, 45}};
    m.forward(first, cc, mode, nullptr);
    model::ForwardBatch b;
    for (const auto* t : {&s, &c}) b.tokens.insert(b.tokens.end(), t->begin(), t->end());
    b.seqs = {{leaky, 45, 77}, {other, 0, 20}};
    for (int i = 0; i < 77; ++i) b.logit_rows.push_back(i);
    std::vector<float> packed(77 * V);
    m.forward(b, cc, mode, packed.data());
    EXPECT_FALSE(test::same_bits(packed.data(), model::score_all_rows(m, s, mode).data(), packed.size()));
    if (mode == ScanMode::Exact) {
      const auto continued = model::score_all_rows(m, as, mode);
      EXPECT_TRUE(test::same_bits(packed.data(), continued.data() + 45 * V, packed.size()));
    }
  }
}

TEST(EngineHybrid, ForwardRefusesAChunkBeyondItsKvBlocks) {
  const auto& m = test::tiny_hybrid_model();
  cache::ModelCacheOptions o;
  o.mamba.exact = true;
  o.kv_num_blocks = 4;
  cache::ModelCache cc(m.cache_spec(), o);
  const int slot = cc.allocate();
  ASSERT_TRUE(cc.reserve(slot, 16));
  model::ForwardBatch b;
  b.tokens = test::random_tokens(3, 17, 512);
  b.seqs = {{slot, 0, 17}};
  EXPECT_THROW(m.forward(b, cc, ScanMode::Exact, nullptr), Error);
  EXPECT_EQ(cc.position(slot), 0);
  // A cache built for another model's layers is refused, not indexed out of range.
  auto tiny = model::load_model(model::open_checkpoint("builtin:tiny"));
  cache::ModelCacheOptions to;
  to.mamba.exact = true;
  cache::ModelCache other(tiny->cache_spec(), to);
  b.seqs = {{other.allocate(), 0, 17}};
  EXPECT_THROW(m.forward(b, other, ScanMode::Exact, nullptr), Error);
  EXPECT_THROW(tiny->forward(b, cc, ScanMode::Exact, nullptr), Error);
}

TEST(EngineHybrid, VerifyCommandPassesOnHybrids) {
  for (const std::string& model : {std::string("builtin:tiny-hybrid"), std::string(PARITY_TEST_DATA) + "/granite_hybrid"}) {
    auto r = test::run_cli("verify " + model + " --prompt-len 40 --forced-len 10");
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("GraniteMoeHybridForCausalLM"), std::string::npos) << r.out;
  }
  // The other router pattern (seed 000's fused top-k) through the gate too; a pattern that does not
  // exist is refused, naming the flag.
  auto fused = test::run_cli("verify builtin:tiny-hybrid --prompt-len 40 --forced-len 10 --moe-routing fused "
                             "--scenario decode --scenario concurrent-8");
  EXPECT_EQ(fused.status, 0) << fused.out << fused.err;
  EXPECT_NE(fused.out.find("PASS"), std::string::npos) << fused.out;
  EXPECT_NE(fused.out.find("concurrent-8"), std::string::npos) << fused.out;
  auto bad = test::run_cli("verify builtin:tiny-hybrid --moe-routing sideways");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("--moe-routing"), std::string::npos) << bad.err;
}

// Captures through the engine under KV pressure (chunked prefill, preemption, shared passes)
// equal a single-shot pass: the router logits of every layer and the logits (lm_head).
TEST(EngineHybrid, RouterAndLogitCapturesThroughTheEngineEqualSingleShot) {
  const auto& m = test::tiny_hybrid_model();
  const Sizes z = sizes(ScanMode::Exact);
  accuracy::CaptureSpec spec;
  for (int i = 0; i < 3; ++i) spec.prompts.push_back(test::random_tokens(90 + i, 25 + 4 * i, 512));
  spec.forced = {test::random_tokens(99, 30, 512)};
  spec.modules = {"model.layers.0.block_sparse_moe.router", "model.layers.3.block_sparse_moe.router", "lm_head"};
  spec.engine.mode = ScanMode::Exact;
  spec.engine.sched.max_num_seqs = 3;
  spec.engine.sched.max_num_batched_tokens = 20;
  spec.engine.state_memory_budget = 3 * z.state + 6 * z.block;
  const accuracy::Captures c = accuracy::capture_through_engine(m, spec);
  ASSERT_EQ(c.prompts.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    std::vector<int32_t> all = spec.prompts[i];
    all.insert(all.end(), spec.forced[0].begin(), spec.forced[0].end());
    std::map<std::string, std::vector<float>> want;
    struct Rec : model::ProbeHooks {
      std::map<std::string, std::vector<float>>* out;
      const std::vector<std::string>* names;
      bool wants(const std::string& n) const override {
        return std::find(names->begin(), names->end(), n) != names->end();
      }
      void visit(const std::string& n, float* d, int rows, int cols, const model::ProbeRows&) override {
        (*out)[n].assign(d, d + std::size_t(rows) * cols);
      }
    } rec;
    rec.out = &want;
    rec.names = &spec.modules;
    const auto logits = model::score_all_rows(m, all, ScanMode::Exact, &rec);
    EXPECT_TRUE(test::same_bits(want["lm_head"].data(), logits.data(), logits.size()));
    for (const auto& name : spec.modules) {
      const accuracy::Matrix& got = c.prompts[i].flat.at(name);
      ASSERT_EQ(got.data.size(), want[name].size()) << name;
      EXPECT_TRUE(test::same_bits(got.data.data(), want[name].data(), got.data.size())) << name << " prompt " << i;
    }
  }
}

// ---- the commands on a hybrid: export + score round trip, generate's logit rows, rejection.

namespace {

}  // namespace

TEST(HybridCli, ExportScoreAndGenerateAgreeWithInProcess) {
  namespace fs = std::filesystem;
  const fs::path dir = test::scratch_dir("hybrid_cli");
  const auto s = test::random_tokens(123, 50, 512);
  const std::vector<int32_t> prompt(s.begin(), s.begin() + 35), forced(s.begin() + 35, s.end());
  const auto want = model::score_all_rows(test::tiny_hybrid_model(), s);
  const std::size_t V = static_cast<std::size_t>(test::tiny_hybrid_model().vocab_size());

  auto r = test::run_cli("export builtin:tiny-hybrid --out " + (dir / "m").string());
  ASSERT_EQ(r.status, 0) << r.err;
  r = test::run_cli("score " + (dir / "m").string() + " --exact --tokens " + test::id_list(s) + " --out " +
                    (dir / "s.st").string());
  ASSERT_EQ(r.status, 0) << r.err;
  const auto scored = test::read_logits((dir / "s.st").string());
  ASSERT_EQ(scored.size(), want.size());
  EXPECT_TRUE(test::same_bits(scored.data(), want.data(), want.size()));

  r = test::run_cli("generate builtin:tiny-hybrid --exact --prompt " + test::id_list(prompt) + " --forced " +
                    test::id_list(forced) + " --max-num-batched-tokens 9 --preempt-at-step 5 --dump-logits " +
                    (dir / "g.st").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("KV cache:"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("\"preemptions\":1"), std::string::npos) << r.out;
  const auto gen = test::read_logits((dir / "g.st").string());
  ASSERT_EQ(gen.size(), (forced.size() + 1) * V);
  EXPECT_TRUE(test::same_bits(gen.data(), want.data() + (prompt.size() - 1) * V, gen.size()));
  fs::remove_all(dir);
}

TEST(HybridCli, GenerateRejectsARequestLargerThanTheKvCache) {
  // 0.04 MiB: one exact-mode slot (about 33 KiB of Mamba state on the default 8-row grid) and two
  // 16-token KV blocks; the request feeds 39 tokens.
  auto r = test::run_cli("generate builtin:tiny-hybrid --exact --state-memory-mb 0.04 --prompt " +
                         test::id_list(test::random_tokens(5, 20, 512)) + " --max-tokens 20");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("KV cache holds 32"), std::string::npos) << r.err;
}
