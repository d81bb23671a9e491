// Tensor capture and replacement under the engine's serving features: a capture taken with
// prefix caching and speculative decoding on equals, bit for bit in exact mode, the capture taken
// with both off (rows skipped by a cache hit come from the request that made the cached state;
// rows of rejected drafts are forgotten); requests under tensor replacement share cached state only
// with requests replaced the same way (same replacer, same reference prompt), and replacement in
// speculative verification passes gives the logits it gives without drafts — and the rows seed
// 000's tokens_per_req layout gives for those passes.
#include <gtest/gtest.h>

#include <random>

#include "accuracy/active_context.h"
#include "accuracy/capture_hooks.h"
#include "accuracy/replacement_session.h"
#include "engine/engine.h"
#include "model/model.h"
#include "test_support.h"

using namespace parity;

namespace {

// Prompts that share their first `shared` tokens, each followed by a tail of its own.
std::vector<std::vector<int32_t>> shared_prompts(int n, int shared, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> prefix(static_cast<std::size_t>(shared));
  for (auto& t : prefix) t = static_cast<int32_t>(rng() % static_cast<unsigned>(vocab));
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    auto p = prefix;
    for (int k = 0; k < 5 + i; ++k) p.push_back(static_cast<int32_t>(rng() % static_cast<unsigned>(vocab)));
    out.push_back(p);
  }
  return out;
}

engine::EngineConfig serial_exact_config(bool caching) {
  engine::EngineConfig c;
  c.mode = model::ScanMode::Exact;
  c.enable_prefix_caching = caching;
  c.prefix_block_tokens = 16;
  c.sched.max_num_seqs = 1;  // one after the other: later requests find the earlier ones' prefixes
  c.sched.max_num_batched_tokens = 13;
  return c;
}

struct CaptureRun {
  accuracy::Captures caps;
  cache::PrefixCacheStats stats;
};

CaptureRun capture_engine_run(const model::Model& m, const std::vector<std::vector<int32_t>>& prompts,
                              const std::vector<std::string>& modules, const engine::EngineConfig& cfg, int forced) {
  accuracy::CaptureHooks hooks(modules);
  engine::Engine e(m, cfg);
  e.set_probe_hooks(&hooks);
  std::vector<uint64_t> ids;
  for (const auto& p : prompts) {
    engine::RequestSpec r;
    r.prompt = p;
    for (int k = 0; k < forced; ++k) r.forced.push_back(static_cast<int32_t>(7 + k));
    ids.push_back(e.add_request(r));
  }
  auto out = e.run_to_completion();
  CaptureRun run;
  for (std::size_t i = 0; i < ids.size(); ++i)
    run.caps.prompts.push_back(hooks.build(ids[i], prompts[i], out[ids[i]].tokens,
                                           static_cast<int64_t>(prompts[i].size()) + forced,
                                           accuracy::CaptureLayout::Flat));
  if (e.prefix_cache()) run.stats = e.prefix_cache()->stats();
  return run;
}

void expect_same_captures(const accuracy::Captures& a, const accuracy::Captures& b) {
  ASSERT_EQ(a.prompts.size(), b.prompts.size());
  for (std::size_t i = 0; i < a.prompts.size(); ++i)
    for (const auto& [name, m] : a.prompts[i].flat) {
      SCOPED_TRACE("prompt " + std::to_string(i) + " " + name);
      const auto& o = b.prompts[i].flat.at(name);
      ASSERT_EQ(m.rows, o.rows);
      ASSERT_EQ(m.data.size(), o.data.size());
      EXPECT_TRUE(test::same_bits(m.data.data(), o.data.data(), m.data.size()));
    }
}

TEST(ServingFeaturesCapture, PrefixCachingCaptureEqualsUncachedCaptureBitForBit) {
  for (const char* spec : {"builtin:tiny", "builtin:tiny-hybrid"}) {
    SCOPED_TRACE(spec);
    const auto& m = test::cached_model(spec);
    const auto prompts = shared_prompts(4, 37, m.vocab_size(), 3);
    std::vector<std::string> modules;
    for (const auto& p : m.probe_points()) modules.push_back(p.name);  // every probe point
    const CaptureRun off = capture_engine_run(m, prompts, modules, serial_exact_config(false), 4);
    const CaptureRun on = capture_engine_run(m, prompts, modules, serial_exact_config(true), 4);
    EXPECT_EQ(on.stats.hits, 3u);
    EXPECT_EQ(on.stats.hit_tokens, 3u * 32u);
    expect_same_captures(off.caps, on.caps);
  }
}

// Replacement: requests bound to the same reference prompt share cached state; a request bound to
// another reference prompt with the same tokens does not (its injected rows differ), and every
// request's logits equal those of a run without caching.
TEST(ServingFeaturesReplacement, CachedStateIsSharedOnlyUnderTheSameReplacement) {
  const auto& m = test::cached_model("builtin:tiny");
  const auto prompts = shared_prompts(1, 40, m.vocab_size(), 4);
  const std::string module = "backbone.layers.0.mixer";
  const CaptureRun ref = capture_engine_run(m, prompts, {module}, serial_exact_config(false), 3);
  // Reference prompt 1: the same tokens, perturbed rows.
  accuracy::Captures two = ref.caps;
  two.prompts.push_back(two.prompts[0]);
  for (float& v : two.prompts[1].flat.at(module).data) v += 0.125f;
  auto run = [&](bool caching, cache::PrefixCacheStats* stats) {
    accuracy::ReplacementConfig rc;
    rc.tensors = two;
    accuracy::ReplacementSession session(rc, m);
    engine::Engine e(m, serial_exact_config(caching));
    session.attach(e);
    std::vector<uint64_t> ids;
    for (int bind : {0, 1, 0, 1}) {
      engine::RequestSpec r;
      r.prompt = prompts[0];
      r.forced = {7, 8, 9};
      r.return_logits = true;
      r.reference_prompt = bind;
      ids.push_back(e.add_request(r));
    }
    auto out = e.run_to_completion();
    if (stats && e.prefix_cache()) *stats = e.prefix_cache()->stats();
    std::vector<engine::RequestResult> res;
    for (uint64_t id : ids) res.push_back(out[id]);
    return res;
  };
  cache::PrefixCacheStats st;
  const auto off = run(false, nullptr), on = run(true, &st);
  EXPECT_EQ(st.hits, 2u);  // the third request reuses the first's state, the fourth the second's
  ASSERT_EQ(off.size(), on.size());
  for (std::size_t i = 0; i < off.size(); ++i) {
    ASSERT_EQ(off[i].logit_rows.size(), on[i].logit_rows.size());
    for (std::size_t k = 0; k < off[i].logit_rows.size(); ++k)
      EXPECT_TRUE(test::same_bits(off[i].logit_rows[k].data(), on[i].logit_rows[k].data(), off[i].logit_rows[k].size()))
          << "request " << i << " row " << k;
  }
  // The two bindings do give different logits, so sharing across them would have shown.
  EXPECT_FALSE(test::same_bits(off[0].logit_rows[0].data(), off[1].logit_rows[0].data(), off[0].logit_rows[0].size()));
}

// Generation (not teacher forcing: only sampled requests take drafts) with every feature on or
// off; the capture holds every fed position (prompt + generated tokens but the last).
struct GenRun {
  accuracy::Captures caps;
  std::vector<std::vector<int32_t>> tokens;
  engine::SpeculationStats spec;
  cache::PrefixCacheStats prefix;
};

GenRun capture_generation(const model::Model& m, const std::vector<std::vector<int32_t>>& prompts,
                          const std::vector<std::string>& modules, bool features) {
  engine::EngineConfig c = serial_exact_config(features);
  c.sched.max_num_seqs = 2;
  if (features) {
    c.speculative.num_tokens = 4;
    c.speculative.method = engine::SpeculativeMethod::DraftModel;
    c.speculative.draft_model = &m;  // most drafts are accepted, some are not
  }
  accuracy::CaptureHooks hooks(modules);
  engine::Engine e(m, c);
  e.set_probe_hooks(&hooks);
  std::vector<uint64_t> ids;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    engine::RequestSpec r;
    r.prompt = prompts[i];
    r.sampling.max_tokens = 20;
    if (i % 2) {  // seeded sampling for every other request
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 11 + i;
    }
    ids.push_back(e.add_request(r));
  }
  auto out = e.run_to_completion();
  GenRun run;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto& toks = out[ids[i]].tokens;
    run.tokens.push_back(toks);
    run.caps.prompts.push_back(hooks.build(ids[i], prompts[i], toks,
                                           static_cast<int64_t>(prompts[i].size() + toks.size()) - 1,
                                           accuracy::CaptureLayout::Flat));
  }
  run.spec = e.speculation_stats();
  if (e.prefix_cache()) run.prefix = e.prefix_cache()->stats();
  return run;
}

TEST(ServingFeaturesCapture, SpeculationAndPrefixCachingCaptureEqualsPlainCaptureBitForBit) {
  for (const char* spec : {"builtin:tiny", "builtin:tiny-hybrid"}) {
    SCOPED_TRACE(spec);
    const auto& m = test::cached_model(spec);
    const auto prompts = shared_prompts(4, 37, m.vocab_size(), 5);
    std::vector<std::string> modules;
    for (const auto& p : m.probe_points()) modules.push_back(p.name);
    const GenRun off = capture_generation(m, prompts, modules, false);
    const GenRun on = capture_generation(m, prompts, modules, true);
    EXPECT_EQ(off.tokens, on.tokens);
    EXPECT_GT(on.prefix.hits, 0u);
    EXPECT_GT(on.spec.accepted, 0u);
    EXPECT_GT(on.spec.rollbacks, 0u);
    expect_same_captures(off.caps, on.caps);
  }
}

// Checks every pass in which each request verifies the same number T of rows (1 + drafts): the
// rows the native replacement writes equal those of seed 000's build_context(req_ids, positions,
// is_prefill = false, tokens_per_req = T).
class SeedLayoutCheck : public model::ProbeHooks {
 public:
  SeedLayoutCheck(model::ProbeHooks& inner, accuracy::TensorReplacer& r) : inner_(inner), r_(r) {}
  bool wants(const std::string& name) const override { return inner_.wants(name); }
  void visit(const std::string& name, float* data, int rows, int cols, const model::ProbeRows& meta) override {
    inner_.visit(name, data, rows, cols, meta);
    const auto& seqs = meta.batch->seqs;
    const int T = seqs.front().n;
    bool uniform = T > 1 && !meta.batch->draft_from.empty();
    for (std::size_t i = 0; i < seqs.size(); ++i)
      uniform = uniform && seqs[i].n == T && meta.batch->draft_from[i] == seqs[i].start + 1;
    if (!uniform) return;
    const accuracy::ReplacementContext ctx =
        r_.build_context(meta.batch->request_ids, meta.position, /*is_prefill=*/false, T);
    const accuracy::Matrix& m = ctx.at(name);
    EXPECT_TRUE(test::same_bits(m.data.data(), data, static_cast<std::size_t>(rows) * cols)) << name;
    ++uniform_passes;
  }
  std::optional<uint64_t> prefix_identity(uint64_t request) override { return inner_.prefix_identity(request); }
  void on_rows_discarded(uint64_t request, int64_t from) override { inner_.on_rows_discarded(request, from); }
  int uniform_passes = 0;

 private:
  model::ProbeHooks& inner_;
  accuracy::TensorReplacer& r_;
};

TEST(ServingFeaturesReplacement, SpeculativeVerificationPassesReplaceAsWithoutDrafts) {
  const auto& m = test::cached_model("builtin:tiny");
  const auto prompts = shared_prompts(2, 30, m.vocab_size(), 6);
  const std::string module = "backbone.layers.1.mixer";
  // The reference: what a run without drafts fed, every position of both streams.
  const GenRun ref = capture_generation(m, prompts, {module}, false);
  auto run = [&](bool features, bool check_seed) {
    accuracy::ReplacementConfig rc;
    rc.tensors = ref.caps;
    for (auto& p : rc.tensors->prompts)
      for (float& v : p.flat.at(module).data) v *= 0.5f;  // a replacement that changes the outcome
    accuracy::ReplacementSession session(rc, m);
    engine::EngineConfig c = serial_exact_config(features);
    c.sched.max_num_seqs = 2;
    c.sched.max_num_batched_tokens = 64;
    if (features) {
      c.speculative.num_tokens = 3;
      c.speculative.method = engine::SpeculativeMethod::DraftModel;
      c.speculative.draft_model = &m;
    }
    engine::Engine e(m, c);
    SeedLayoutCheck check(session.hooks(), session.replacer());
    session.attach(e);
    if (check_seed) e.set_probe_hooks(&check);
    std::vector<uint64_t> ids;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      engine::RequestSpec r;
      r.prompt = prompts[i];
      r.sampling.max_tokens = 20;
      r.return_logits = true;
      r.reference_prompt = static_cast<int>(i);
      ids.push_back(e.add_request(r));
    }
    auto out = e.run_to_completion();
    if (check_seed) {
      EXPECT_GT(check.uniform_passes, 0);
    }
    std::vector<engine::RequestResult> res;
    for (uint64_t id : ids) res.push_back(out[id]);
    return res;
  };
  const auto off = run(false, false), on = run(true, true);
  for (std::size_t i = 0; i < off.size(); ++i) {
    EXPECT_EQ(off[i].tokens, on[i].tokens);
    ASSERT_EQ(off[i].logit_rows.size(), on[i].logit_rows.size());
    for (std::size_t k = 0; k < off[i].logit_rows.size(); ++k)
      EXPECT_TRUE(test::same_bits(off[i].logit_rows[k].data(), on[i].logit_rows[k].data(), off[i].logit_rows[k].size()));
  }
  // The replacement did change the outcome (so equality above means something).
  EXPECT_NE(off[0].tokens, ref.tokens[0]);
}

}  // namespace
