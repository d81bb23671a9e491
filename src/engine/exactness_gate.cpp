#include "engine/exactness_gate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "common/error.h"
#include "engine/engine.h"
#include "kernels/isa.h"

namespace parity::engine {
namespace {

std::vector<int32_t> random_stream(uint64_t seed, int n, int vocab) {
  std::vector<int32_t> t(n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 12345;
  for (auto& x : t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return t;
}

void compare(const RequestResult& got, const std::vector<float>& ref, int vocab, int chunk, int64_t first_pos,
             ScenarioResult& res) {
  if (got.logit_positions.empty()) throw Error("verify: the engine returned no logit rows");
  const int64_t first_chunk = (std::max(first_pos, got.logit_positions.front())) / chunk;
  for (std::size_t i = 0; i < got.logit_positions.size(); ++i) {
    const int64_t p = got.logit_positions[i];
    if (p < first_pos) continue;
    const float* a = got.logit_rows[i].data();
    const float* b = ref.data() + std::size_t(p) * vocab;
    bool differs = std::memcmp(a, b, std::size_t(vocab) * 4) != 0;
    for (int v = 0; v < vocab; ++v) {
      float d = std::fabs(a[v] - b[v]);
      if (!(d <= res.max_abs)) res.max_abs = std::isnan(d) ? INFINITY : std::max(res.max_abs, d);
      res.mismatched_elements += std::memcmp(&a[v], &b[v], 4) != 0;
    }
    res.elements += vocab;
    RowTally& part = (p / chunk == first_chunk) ? res.first_chunk : res.after_boundary;
    for (RowTally* t : {&res.all, &part}) {
      t->rows++;
      t->mismatched += differs;
    }
  }
}

// Prefix blocks for the gate's streams: a few boundaries inside the prompt.
int gate_prefix_block(int prompt_len) { return std::max(16, prompt_len / 4 / 16 * 16); }

EngineConfig base_config(const cache::Numerics& n, const GateOptions& opt, int budget) {
  EngineConfig c;
  c.enable_prefix_caching = opt.prefix_caching;
  c.prefix_block_tokens = gate_prefix_block(opt.prompt_len);
  c.mode = n.exact ? model::ScanMode::Exact : model::ScanMode::Plain;
  c.ssm_cache_dtype = n.ssm_dtype;
  c.exact_grid = n.grid.cell;
  c.exact_stagger = opt.stagger;
  c.scan_products = n.grid.products;
  c.sched.max_num_seqs = 8;
  c.sched.max_num_batched_tokens = budget;
  return c;
}

RequestSpec forced_spec(const std::vector<int32_t>& stream, int prompt_len, bool all_rows) {
  RequestSpec s;
  s.prompt.assign(stream.begin(), stream.begin() + prompt_len);
  s.forced.assign(stream.begin() + prompt_len, stream.end());
  s.return_logits = true;
  s.return_prompt_logits = all_rows;
  if (s.forced.empty()) s.sampling.max_tokens = 1;
  return s;
}

}  // namespace

const char* mode_name(model::ScanMode m) { return m == model::ScanMode::Exact ? "exact" : "plain"; }

std::vector<std::string> gate_scenarios() {
  return {"decode",    "chunked-prefill", "preempt-recompute", "concurrent-8",
          "threads-2", "isa",             "prefix-cache",      "speculative"};
}

std::vector<ScenarioResult> run_exactness_gate(const model::Model& m, const GateOptions& opt,
                                               const GateProgress& progress) {
  const int cs = m.chunk_size(), V = m.vocab_size();
  const int P = opt.prompt_len > 0 ? opt.prompt_len : std::max(2, (600 * cs + 128) / 256);
  const int K = opt.forced_len > 0 ? opt.forced_len : std::max(1, (300 * cs + 128) / 256);
  // An unaligned token budget, 100 for chunk 256 (the RFC's max_num_batched_tokens).
  GateOptions gopt = opt;  // with the lengths resolved
  gopt.prompt_len = P;
  gopt.forced_len = K;
  int split = std::max(3, (100 * cs + 128) / 256);
  if (split % cs == 0) split += 1;
  std::vector<std::string> scen = opt.scenarios.empty() ? gate_scenarios() : opt.scenarios;
  for (auto& s : scen) {
    auto all = gate_scenarios();
    if (std::find(all.begin(), all.end(), s) == all.end()) throw Error("verify: unknown scenario '" + s + "'");
  }
  const int saved_threads = kernels::num_threads();
  const bool saved_force = kernels::force_parallel();
  kernels::set_num_threads(1);
  // Every numerics the gate runs: exact mode per state dtype, plain mode with its default.
  std::vector<cache::Numerics> configs;
  for (model::ScanMode mode : opt.modes) {
    if (mode == model::ScanMode::Exact) {
      for (DType d : opt.exact_dtypes)
        configs.push_back(cache::resolve_numerics(true, d, opt.exact_grid, opt.stagger, cs, m.default_exact_cell(),
                                                  opt.scan_products));
    } else {
      configs.push_back(cache::resolve_numerics(false, std::nullopt, std::nullopt, opt.stagger, cs));
    }
  }
  const std::vector<int32_t> stream = random_stream(opt.seed, P + K, V);
  const bool concurrent = std::find(scen.begin(), scen.end(), "concurrent-8") != scen.end();
  std::vector<std::vector<int32_t>> streams;  // eight streams of different lengths (concurrent-8)
  for (int i = 0; concurrent && i < 8; ++i)
    streams.push_back(random_stream(opt.seed * 1000 + i + 1, std::max(4, (P + K) * (5 + i) / 12), V));

  std::vector<ScenarioResult> results;
  const int total = static_cast<int>(scen.size() * configs.size());
  int done = 0;
  for (const cache::Numerics& num : configs) {
    const model::ScanMode mode = num.exact ? model::ScanMode::Exact : model::ScanMode::Plain;
    // Single-shot prefill with the same numerics is what every schedule must reproduce.
    kernels::set_num_threads(1);
    const std::vector<float> ref = model::score_all_rows(m, stream, num);
    std::vector<std::vector<float>> refs;
    for (const auto& st : streams) refs.push_back(model::score_all_rows(m, st, num));
    auto decode_run = [&](int threads, int prompt_len = 0, int total = 0) {
      kernels::set_num_threads(threads);
      Engine e(m, base_config(num, gopt, P + K));
      const std::vector<int32_t> s(stream.begin(), stream.begin() + (total ? total : P + K));
      const uint64_t id = e.add_request(forced_spec(s, prompt_len ? prompt_len : P, false));
      auto out = e.run_to_completion();
      kernels::set_num_threads(1);
      return out[id];
    };
    for (const std::string& s : scen) {
      if (progress) progress(done, total, s + " / " + num.describe());
      ScenarioResult res;
      res.scenario = s;
      res.mode = mode;
      res.numerics = num;
      kernels::set_num_threads(1);
      if ((s == "threads-2" || s == "isa") && std::string(m.device()) != "cpu") {
        // CPU thread counts and instruction sets do not reach a model on another device.
        res.not_run = std::string("CPU kernels only; the model runs on ") + m.device();
        results.push_back(res);
        ++done;
        continue;
      }
      if ((s == "prefix-cache" || s == "speculative") && m.cache_spec().state_on_device &&
          m.cache_spec().num_mamba_layers > 0) {
        // The engine refuses both there (they copy the Mamba state on the host): not a mismatch.
        res.not_run = std::string("needs the Mamba state on the host; the model keeps it on ") + m.device();
        results.push_back(res);
        ++done;
        continue;
      }
      if (s == "decode") {
        compare(decode_run(1), ref, V, cs, P - 1, res);
      } else if (s == "threads-2") {
        kernels::set_force_parallel(true);  // small models would otherwise run every kernel on one thread
        const RequestResult r = decode_run(2);
        kernels::set_force_parallel(saved_force);
        compare(r, ref, V, cs, P - 1, res);
      } else if (s == "chunked-prefill") {
        Engine e(m, base_config(num, gopt, split));
        uint64_t id = e.add_request(forced_spec(stream, P + K, true));
        auto out = e.run_to_completion();
        compare(out[id], ref, V, cs, 0, res);
      } else if (s == "preempt-recompute") {
        EngineConfig c = base_config(num, gopt, P + K);
        c.preempt_at_step = 1 + K / 2;  // mid-decode: step 1 is the prefill
        Engine e(m, c);
        uint64_t id = e.add_request(forced_spec(stream, P, false));
        auto out = e.run_to_completion();
        if (out[id].num_preemptions != 1) throw Error("verify: the forced preemption did not happen");
        compare(out[id], ref, V, cs, P - 1, res);
      } else if (s == "concurrent-8") {
        Engine e(m, base_config(num, gopt, split));
        std::map<uint64_t, int> which;
        std::map<uint64_t, RequestResult> out;
        int added = 0;
        // Staggered arrivals: one new request every third step, so prefill chunks of newcomers
        // share passes with the decodes of earlier ones.
        for (int64_t stepi = 0; added < 8 || e.has_unfinished(); ++stepi) {
          if (added < 8 && stepi % 3 == 0) {
            const auto& st = streams[added];
            int plen = std::max(1, static_cast<int>(st.size()) * 2 / 3);
            which[e.add_request(forced_spec(st, plen, true))] = added;
            ++added;
          }
          Engine::accumulate(out, e.step());
        }
        for (auto& [id, idx] : which) compare(out[id], refs[idx], V, cs, 0, res);
      } else if (s == "prefix-cache") {
        // Request A: the stream's prompt; then, together, B (the first P/2+1 tokens of the stream and
        // a tail of its own) and C (A's prompt again), both starting from A's cached state.
        EngineConfig c = base_config(num, gopt, split);
        c.enable_prefix_caching = true;
        c.prefix_block_tokens = gate_prefix_block(P);
        Engine e(m, c);
        std::map<uint64_t, RequestResult> out;
        const uint64_t a = e.add_request(forced_spec(stream, P, false));
        out.merge(e.run_to_completion());
        const int shared = P / 2 + 1;
        std::vector<int32_t> bs(stream.begin(), stream.begin() + shared);
        const std::vector<int32_t> tail = random_stream(opt.seed * 7919 + 5, P + K - shared, V);
        bs.insert(bs.end(), tail.begin(), tail.end());
        const uint64_t b = e.add_request(forced_spec(bs, P, false));
        const uint64_t cc = e.add_request(forced_spec(stream, P, false));
        out.merge(e.run_to_completion());
        compare(out[a], ref, V, cs, P - 1, res);
        compare(out[b], model::score_all_rows(m, bs, num), V, cs, P - 1, res);
        compare(out[cc], ref, V, cs, P - 1, res);
        const cache::PrefixCacheStats& st = e.prefix_cache()->stats();
        // C (a hit) against A (a miss) on the same stream: equal by construction in exact mode; plain
        // mode reports what it does.
        int64_t differ = 0;
        for (std::size_t i = 0; i < out[cc].logit_rows.size() && i < out[a].logit_rows.size(); ++i)
          differ += std::memcmp(out[cc].logit_rows[i].data(), out[a].logit_rows[i].data(), std::size_t(V) * 4) != 0;
        res.note = std::to_string(st.hits) + "/" + std::to_string(st.lookups) + " hits, " +
                   std::to_string(st.hit_tokens) + " tokens reused; hit vs miss: " + std::to_string(differ) + "/" +
                   std::to_string(out[cc].logit_rows.size()) + " rows differ";
      } else if (s == "speculative") {
        // Generation (greedy, and seeded sampling) with 4 drafts per step from a draft model — the
        // model itself, run in plain mode, so most drafts are accepted and some are not — against
        // single-shot prefill of the stream it generated and against the tokens of a run without
        // drafts.
        EngineConfig c = base_config(num, gopt, P + K);
        Engine plain_run(m, c);
        c.speculative.num_tokens = 4;
        c.speculative.method = SpeculativeMethod::DraftModel;
        c.speculative.draft_model = &m;
        Engine e(m, c);
        RequestSpec greedy;
        greedy.prompt.assign(stream.begin(), stream.begin() + P);
        greedy.sampling.max_tokens = K;
        greedy.return_logits = true;
        RequestSpec sampled = greedy;
        sampled.sampling.temperature = 0.8f;
        sampled.sampling.seed = opt.seed;
        const uint64_t ids[2] = {e.add_request(greedy), e.add_request(sampled)};
        plain_run.add_request(greedy);
        plain_run.add_request(sampled);
        auto out = e.run_to_completion();
        auto base = plain_run.run_to_completion();
        int differ = 0;
        for (const uint64_t id : ids) {
          const RequestResult& r = out[id];
          std::vector<int32_t> fed = greedy.prompt;
          fed.insert(fed.end(), r.tokens.begin(), r.tokens.end() - 1);  // the last token is never fed
          compare(r, model::score_all_rows(m, fed, num), V, cs, P - 1, res);
          differ += r.tokens != base[id].tokens;
        }
        const SpeculationStats& st = e.speculation_stats();
        char acc[32];
        std::snprintf(acc, sizeof acc, "%.0f%%", 100.0 * st.acceptance_rate());
        res.note = std::to_string(st.accepted) + "/" + std::to_string(st.drafted) + " drafts accepted (" + acc + "), " +
                   std::to_string(st.rollbacks) + " rollbacks; tokens vs no drafts: " + std::to_string(differ) +
                   "/2 requests differ";
      } else if (s == "isa") {
        // The decode schedule under every instruction set, against the same schedule under the
        // one the CPU picks: whole-model bits may not depend on the kernels' ISA (rule 3). The
        // portable kernels are slow on a large model, so the stream is cut to a chunk and a half
        // of prompt and three grid cells of decode: every kernel path still runs.
        const int ip = std::min(P, cs + cs / 2 + 1), it = std::min(P + K, ip + 3 * num.grid.cell + 1);
        const RequestResult base = decode_run(1, ip, it);
        std::vector<float> base_rows(std::size_t(P + K) * V);
        for (std::size_t i = 0; i < base.logit_positions.size(); ++i)
          std::copy(base.logit_rows[i].begin(), base.logit_rows[i].end(),
                    base_rows.begin() + std::size_t(base.logit_positions[i]) * V);
        for (kernels::Isa isa : {kernels::Isa::Portable, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
          ScenarioResult r = res;
          r.scenario = std::string("isa-") + kernels::isa_name(isa);
          if (static_cast<int>(isa) > static_cast<int>(kernels::detected_isa())) {
            r.not_run = std::string("this CPU has no ") + kernels::isa_name(isa);
          } else {
            kernels::set_isa_override(isa);
            const RequestResult got = decode_run(1, ip, it);
            kernels::clear_isa_override();
            compare(got, base_rows, V, cs, ip - 1, r);
          }
          results.push_back(r);
        }
        ++done;
        continue;
      }
      results.push_back(res);
      ++done;
    }
  }
  if (progress) progress(done, total, "done");
  kernels::set_num_threads(saved_threads);
  kernels::set_force_parallel(saved_force);
  return results;
}

std::string format_gate_table(const std::vector<ScenarioResult>& results) {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line, "%-18s %-12s %16s %12s %14s %16s %14s\n", "scenario", "mode", "mismatched rows",
                "max |Δ|", "first chunk", "after boundary", "elements");
  s += line;
  for (const auto& r : results) {
    const std::string mode = !r.numerics.exact ? "plain" : r.numerics.ssm_dtype == DType::F32 ? "exact-f32" : "exact-bf16";
    if (!r.not_run.empty()) {
      std::snprintf(line, sizeof line, "%-18s %-12s not run: %s\n", r.scenario.c_str(), mode.c_str(), r.not_run.c_str());
      s += line;
      continue;
    }
    char a[32], b[32], c[32], d[40];
    std::snprintf(a, sizeof a, "%lld/%lld", (long long)r.all.mismatched, (long long)r.all.rows);
    std::snprintf(b, sizeof b, "%lld/%lld", (long long)r.first_chunk.mismatched, (long long)r.first_chunk.rows);
    std::snprintf(c, sizeof c, "%lld/%lld", (long long)r.after_boundary.mismatched, (long long)r.after_boundary.rows);
    std::snprintf(d, sizeof d, "%.1f%% equal",
                  r.elements ? 100.0 * double(r.elements - r.mismatched_elements) / double(r.elements) : 100.0);
    std::snprintf(line, sizeof line, "%-18s %-12s %16s %12.4g %14s %16s %14s", r.scenario.c_str(), mode.c_str(),
                  a, static_cast<double>(r.max_abs), b, c, d);
    s += line;
    s += r.note.empty() ? "\n" : "  " + r.note + "\n";
  }
  return s;
}

}  // namespace parity::engine
