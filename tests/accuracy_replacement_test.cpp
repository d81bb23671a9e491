// Tensor replacement end to end on builtin:tiny in exact mode: tensors captured from parity and
// replaced with themselves give the same bits under another chunked schedule with mixed passes;
// a perturbed reference gives exactly what adding the perturbation in place gives; positions past
// the reference, explicit binding, the seed's bucketed adapter and the command line.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>

#include "accuracy/active_context.h"
#include "accuracy/replacement_hooks.h"
#include "accuracy/replacement_session.h"
#include "accuracy_replacement_support.h"
#include "common/error.h"
#include "engine/engine.h"
#include "io/safetensors.h"
#include "test_support.h"

using namespace parity;
using namespace parity::accuracy;

namespace {

const char* kMixer0 = "backbone.layers.0.mixer";

struct Stream {
  std::vector<int32_t> prompt, forced;
};

std::vector<Stream> streams() {
  std::mt19937 rng(7);
  auto toks = [&](int n) {
    std::vector<int32_t> t(static_cast<std::size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % 512);
    return t;
  };
  // The short one decodes while the long ones are still in prefill: passes mix both kinds.
  return {{toks(3), toks(10)}, {toks(40), toks(6)}, {toks(25), toks(8)}};
}

engine::EngineConfig exact(int budget) {
  engine::EngineConfig c;
  c.mode = model::ScanMode::Exact;
  c.sched.max_num_batched_tokens = budget;
  c.sched.max_num_seqs = 4;
  return c;
}

struct StreamRows {
  std::vector<std::vector<std::vector<float>>> rows;  // per stream, every position's logits
  std::vector<uint64_t> ids;
};

// Runs every stream (all logit rows returned) through an engine; `setup` attaches hooks.
template <class Setup>
StreamRows run_streams(const std::vector<Stream>& ss, engine::EngineConfig cfg, Setup&& setup,
                       std::vector<int> bind = {}) {
  engine::Engine eng(test::tiny_model(), cfg);
  setup(eng);
  StreamRows out;
  for (std::size_t i = 0; i < ss.size(); ++i) {
    engine::RequestSpec s;
    s.prompt = ss[i].prompt;
    s.forced = ss[i].forced;
    s.return_logits = s.return_prompt_logits = true;
    if (!bind.empty()) s.reference_prompt = bind[i];
    out.ids.push_back(eng.add_request(s));
  }
  auto res = eng.run_to_completion();
  for (uint64_t id : out.ids) out.rows.push_back(res.at(id).logit_rows);
  return out;
}

bool same_rows(const StreamRows& a, const StreamRows& b) {
  if (a.rows.size() != b.rows.size()) return false;
  for (std::size_t i = 0; i < a.rows.size(); ++i) {
    if (a.rows[i].size() != b.rows[i].size()) return false;
    for (std::size_t r = 0; r < a.rows[i].size(); ++r)
      if (!test::same_bits(a.rows[i][r].data(), b.rows[i][r].data(), a.rows[i][r].size())) return false;
  }
  return true;
}

std::set<std::string> all_points_but_head() {
  std::set<std::string> s;
  for (const auto& p : test::tiny_model().probe_points())
    if (p.name != "lm_head" && p.name != "backbone.norm_f") s.insert(p.name);
  return s;
}

// Captures `modules` from a baseline run; returns the captures (flat, one prompt per stream).
Captures capture_baseline(const std::vector<Stream>& ss, const std::set<std::string>& modules, int budget,
                          StreamRows* base, bool* mixed = nullptr) {
  test::RowRecorder rec(modules);
  *base = run_streams(ss, exact(budget), [&](engine::Engine& e) { e.set_probe_hooks(&rec); });
  if (mixed) *mixed = rec.mixed_pass;
  Captures c;
  for (std::size_t i = 0; i < ss.size(); ++i) {
    PromptCapture p;
    p.prompt_token_ids = ss[i].prompt;
    for (const auto& m : modules) p.flat[m] = rec.matrix(m, base->ids[i]);
    c.prompts.push_back(std::move(p));
  }
  return c;
}

void perturb(Captures& c, const std::string& module) {
  for (std::size_t i = 0; i < c.prompts.size(); ++i) {
    Matrix& m = c.prompts[i].flat.at(module);
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t col = 0; col < m.cols; ++col)
        m.data[static_cast<std::size_t>(r * m.cols + col)] += test::perturbation(static_cast<int>(i), r, col);
  }
}

ReplacementConfig in_memory(Captures c, MissingPosition pol = MissingPosition::Error) {
  ReplacementConfig cfg;
  cfg.tensors = std::move(c);
  cfg.on_missing_position = pol;
  return cfg;
}

// Attaches `s` and notes the prompt each request is bound to on arrival (the binding itself is
// released when the request finishes).
auto attach_noting(ReplacementSession& s, std::map<uint64_t, int>& bound) {
  return [&s, &bound](engine::Engine& e) {
    s.attach(e);
    e.set_request_listener([&s, &bound](uint64_t id, const engine::RequestSpec& r) {
      s.on_request(id, r);
      bound[id] = s.replacer().resolve(id);
    });
  };
}

}  // namespace

TEST(AccuracyReplacementE2E, SameTensorsGiveTheSameBitsUnderAnotherMixedSchedule) {
  const auto ss = streams();
  StreamRows base;
  bool mixed_capture = false;
  Captures c = capture_baseline(ss, all_points_but_head(), 16, &base, &mixed_capture);
  EXPECT_TRUE(mixed_capture);
  ReplacementSession session(in_memory(c), test::tiny_model());
  test::RowRecorder watch({"backbone.embeddings"});
  test::ChainHooks chain(session.hooks(), watch);
  StreamRows replaced = run_streams(ss, exact(7), [&](engine::Engine& e) {
    session.attach(e);
    e.set_probe_hooks(&chain);  // the session's hooks first, then the pass-shape watcher
  });
  EXPECT_TRUE(watch.mixed_pass);
  EXPECT_TRUE(same_rows(base, replaced));
  uint64_t positions = 0;
  for (const auto& s : ss) positions += s.prompt.size() + s.forced.size();
  EXPECT_EQ(session.replacer().stats().rows_replaced, positions * all_points_but_head().size());
  EXPECT_EQ(session.replacer().stats().rows_past_reference, 0u);
}

TEST(AccuracyReplacementE2E, PerturbedPointEqualsAddingThePerturbationInPlace) {
  const auto ss = streams();
  StreamRows base;
  Captures c = capture_baseline(ss, {kMixer0}, 16, &base);
  perturb(c, kMixer0);
  ReplacementSession session(in_memory(c), test::tiny_model());
  StreamRows replaced = run_streams(ss, exact(7), [&](engine::Engine& e) { session.attach(e); });
  EXPECT_FALSE(same_rows(base, replaced));
  // Reference computation: the live value (the same bits as the capture, exact mode) plus the
  // same perturbation, in place, under a third schedule. Request ids 1..3 are prompts 0..2.
  test::PerturbHooks add(kMixer0, {{1, 0}, {2, 1}, {3, 2}});
  StreamRows reference = run_streams(ss, exact(11), [&](engine::Engine& e) { e.set_probe_hooks(&add); });
  EXPECT_TRUE(same_rows(replaced, reference));
  // Every row passes layer 0, so even each stream's first row differs from the unperturbed run.
  for (std::size_t i = 0; i < ss.size(); ++i)
    EXPECT_FALSE(test::same_bits(base.rows[i][0].data(), replaced.rows[i][0].data(), base.rows[i][0].size()));
}

TEST(AccuracyReplacementE2E, PositionPastTheReferenceIsAnErrorOrZeroFilled) {
  auto ss = streams();
  StreamRows base;
  Captures c = capture_baseline(ss, {kMixer0}, 16, &base);
  ss[1].forced.push_back(5);
  ss[1].forced.push_back(6);  // two positions more than the reference covers
  {
    ReplacementSession session(in_memory(c), test::tiny_model());
    try {
      run_streams(ss, exact(16), [&](engine::Engine& e) { session.attach(e); });
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("needs backbone.layers.0.mixer at position 46"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(session.replacer().stats().rows_past_reference, 1u);
  }
  ReplacementSession session(in_memory(c, MissingPosition::Zero), test::tiny_model());
  StreamRows r = run_streams(ss, exact(16), [&](engine::Engine& e) { session.attach(e); });
  EXPECT_EQ(session.replacer().stats().rows_past_reference, 2u);
  EXPECT_NE(session.describe().find("2 past the reference"), std::string::npos);
  // Rows before the extension are untouched by the zero fill.
  for (std::size_t row = 0; row < base.rows[1].size(); ++row)
    EXPECT_TRUE(test::same_bits(base.rows[1][row].data(), r.rows[1][row].data(), base.rows[1][row].size())) << row;
}

TEST(AccuracyReplacementE2E, ExplicitBindingResolvesTheCornerCase) {
  // Reference prompt 0 = X, prompt 1 = X + two more tokens: a request whose prompt is prompt 1's
  // tokens (a retry of prompt 0 that generated exactly those) is matched to prompt 1 by prefix,
  // and to prompt 0 when bound. Prompt 1's tensors are perturbed so the two are told apart.
  const auto ss = streams();
  Stream s = ss[1];
  StreamRows base;
  Captures one = capture_baseline({s}, {kMixer0}, 16, &base);
  Captures c = one;
  c.prompts.push_back(one.prompts[0]);
  c.prompts[0].prompt_token_ids.resize(s.prompt.size() - 2);
  perturb(c, kMixer0);  // prompt 0 gets perturbation(0, …), prompt 1 perturbation(1, …)
  Captures exact_for_0 = c;
  exact_for_0.prompts[0].flat = one.prompts[0].flat;  // prompt 0: the true values
  ReplacementSession by_prefix(in_memory(exact_for_0), test::tiny_model());
  std::map<uint64_t, int> prefix_bound, explicit_bound;
  StreamRows prefix = run_streams({s}, exact(16), attach_noting(by_prefix, prefix_bound));
  EXPECT_EQ(prefix_bound, (std::map<uint64_t, int>{{1, 1}}));
  EXPECT_FALSE(same_rows(base, prefix));
  ReplacementSession bound(in_memory(exact_for_0), test::tiny_model());
  StreamRows b = run_streams({s}, exact(16), attach_noting(bound, explicit_bound), {0});
  EXPECT_EQ(explicit_bound, (std::map<uint64_t, int>{{1, 0}}));
  EXPECT_TRUE(same_rows(base, b));
}

// A binding lives as long as its request: made on arrival, kept across a preemption (the request
// recomputes under the same id), released when the request finishes or is aborted, so an engine
// serving for days does not accumulate one per request it ever served.
TEST(AccuracyReplacementE2E, BindingsAreReleasedWhenRequestsFinishOrAreAborted) {
  const auto ss = streams();
  StreamRows base;
  Captures c = capture_baseline(ss, {kMixer0}, 16, &base);
  ReplacementSession session(in_memory(c), test::tiny_model());
  const PromptIndex& ix = session.replacer().prompt_index();
  engine::EngineConfig cfg = exact(16);
  cfg.preempt_at_step = 3;
  engine::Engine eng(test::tiny_model(), cfg);
  session.attach(eng);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<uint64_t> ids;
    for (const Stream& st : ss) {
      engine::RequestSpec r;
      r.prompt = st.prompt;
      r.forced = st.forced;
      r.return_logits = r.return_prompt_logits = true;
      ids.push_back(eng.add_request(r));
    }
    EXPECT_EQ(ix.num_requests(), 3u);
    ASSERT_TRUE(eng.abort(ids[2]));
    EXPECT_FALSE(ix.known(ids[2]));
    EXPECT_EQ(ix.num_requests(), 2u);
    std::map<uint64_t, engine::RequestResult> out;
    while (eng.has_unfinished()) {
      engine::Engine::accumulate(out, eng.step());
      for (uint64_t id : {ids[0], ids[1]}) EXPECT_EQ(ix.known(id), out[id].finish == engine::FinishReason::None) << id;
    }
    EXPECT_EQ(ix.num_requests(), 0u);
    // The preempted requests resumed under their bindings: replaced by their own values, every row
    // is the baseline's.
    if (round == 0) {
      EXPECT_GT(eng.num_preemptions(ids[0]) + eng.num_preemptions(ids[1]), 0);
    }
    for (int i : {0, 1}) {
      const auto& got = out[ids[static_cast<std::size_t>(i)]].logit_rows;
      ASSERT_EQ(got.size(), base.rows[static_cast<std::size_t>(i)].size());
      for (std::size_t r = 0; r < got.size(); ++r)
        EXPECT_TRUE(test::same_bits(got[r].data(), base.rows[static_cast<std::size_t>(i)][r].data(), got[r].size()))
            << i << " row " << r;
    }
  }
  EXPECT_GT(session.replacer().stats().rows_replaced, 0u);
}

TEST(AccuracyReplacementE2E, SeedBucketedContextGivesTheSameBitsAsTheNativePath) {
  const auto ss = streams();
  StreamRows base;
  Captures c = capture_baseline({ss[2]}, {kMixer0}, 64, &base);
  perturb(c, kMixer0);
  std::vector<int32_t> toks = ss[2].prompt;
  toks.insert(toks.end(), ss[2].forced.begin(), ss[2].forced.end());
  // Native path: rows carry request 0 (score passes no ids).
  ReplacementSession native(in_memory(c), test::tiny_model());
  native.replacer().register_request(0, toks);
  std::vector<float> a = model::score_all_rows(test::tiny_model(), toks, model::ScanMode::Exact, &native.hooks());
  // Seed path: one prefill, bucket padded with repeated positions, context set around the pass.
  TensorReplacer r = TensorReplacer::from_captures(c);
  r.register_request(0, toks);
  std::vector<int64_t> pos;
  for (std::size_t i = 0; i < toks.size(); ++i) pos.push_back(static_cast<int64_t>(i));
  pos.push_back(pos.back());
  pos.push_back(pos.back());
  ContextHooks ctx_hooks;
  std::vector<float> b;
  {
    ActiveContextScope scope(std::make_shared<ReplacementContext>(r.build_context({0}, pos, true)));
    b = model::score_all_rows(test::tiny_model(), toks, model::ScanMode::Exact, &ctx_hooks);
  }
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(test::same_bits(a.data(), b.data(), a.size()));
  test::PerturbHooks add(kMixer0, {{0, 0}});
  std::vector<float> want = model::score_all_rows(test::tiny_model(), toks, model::ScanMode::Exact, &add);
  EXPECT_TRUE(test::same_bits(a.data(), want.data(), a.size()));
}

// ---- command line ------------------------------------------------------------------------------

namespace {

}  // namespace

TEST(AccuracyReplacementCli, ScoreAndGenerateAcceptAdditionalConfig) {
  const auto ss = streams();
  const Stream& s = ss[2];
  StreamRows base;
  Captures c = capture_baseline({s}, {kMixer0}, 64, &base);
  perturb(c, kMixer0);
  auto dir = test::scratch_dir("acc_repl_cli");
  const std::string ref = (dir / "ref.safetensors").string();
  write_captures(ref, c);
  std::vector<int32_t> toks = s.prompt;
  toks.insert(toks.end(), s.forced.begin(), s.forced.end());
  test::PerturbHooks add(kMixer0, {{0, 0}});
  const std::vector<float> want = model::score_all_rows(test::tiny_model(), toks, model::ScanMode::Exact, &add);
  const std::string cfg = "'{\"tensor_replacement\": {\"tensors_path\": \"" + ref + "\"}}'";

  auto r = test::run_cli("score builtin:tiny --exact --tokens " + test::id_list(toks) + " --out " +
                         (dir / "s.safetensors").string() + " --additional-config " + cfg);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("rows replaced"), std::string::npos) << r.err;
  std::vector<float> got = test::read_logits((dir / "s.safetensors").string());
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(test::same_bits(got.data(), want.data(), want.size()));

  r = test::run_cli("generate builtin:tiny --exact --max-num-batched-tokens 5 --prompt " + test::id_list(s.prompt) +
                    " --forced " + test::id_list(s.forced) + " --dump-logits " + (dir / "g.safetensors").string() +
                    " --additional-config " + cfg);
  ASSERT_EQ(r.status, 0) << r.err;
  got = test::read_logits((dir / "g.safetensors").string());
  const std::size_t V = 512, P = s.prompt.size();
  ASSERT_EQ(got.size(), (s.forced.size() + 1) * V);
  EXPECT_TRUE(test::same_bits(got.data(), want.data() + (P - 1) * V, got.size()));

  r = test::run_cli("score builtin:tiny --tokens 1,2 --out " + (dir / "x.safetensors").string() +
                    " --additional-config '{\"tensor_replacement\": {\"tensors_path\": 1}}'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("tensors_path must be a string"), std::string::npos) << r.err;
  r = test::run_cli("score builtin:tiny --tokens 1,2 --out " + (dir / "x.safetensors").string() +
                    " --additional-config " + cfg);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("no reference prompt is a prefix"), std::string::npos) << r.err;
  r = test::run_cli("generate builtin:tiny --prompt 1,2 --max-tokens 2 --additional-config '{bad'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("not valid JSON"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "x.safetensors"));
  std::filesystem::remove_all(dir);
}
