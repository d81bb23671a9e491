// Speculative decoding on builtin:mamba2-130m (exact mode): generated tokens per second without
// drafts, with prompt-lookup drafts (ngram, k = 4) and with an oracle drafter that proposes the
// true continuation (k = 4; every draft is accepted: the ceiling of what verification can give),
// interleaved in every iteration so that the ratios come from one run. Batch 1 and 8; a
// repetitive prompt (a phrase repeated, where prompt lookup finds candidates) and random text.
// The built-in weights are random, so the model's own continuations rarely repeat the prompt:
// the ngram numbers show the cost of drafts that are rejected, the oracle numbers the gain of
// drafts that are accepted.
//
//   OMP_NUM_THREADS=1 build/parity_bench --benchmark_filter=Speculative
#include <benchmark/benchmark.h>

#include <chrono>
#include <map>
#include <memory>
#include <random>

#include "bench_support.h"
#include "engine/engine.h"
#include "engine/speculation/drafter.h"
#include "model/checkpoint.h"
#include "model/model.h"

using namespace parity;

namespace {

using bench::m130;

std::vector<int32_t> prompt(bool repetitive, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> phrase(12);
  for (auto& t : phrase) t = static_cast<int32_t>(rng() % 50000);
  std::vector<int32_t> p(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    p[static_cast<std::size_t>(i)] = repetitive ? phrase[static_cast<std::size_t>(i) % phrase.size()]
                                                : static_cast<int32_t>(rng() % 50000);
  return p;
}

class OracleDrafter : public engine::Drafter {
 public:
  explicit OracleDrafter(std::map<uint64_t, std::vector<int32_t>> s) : streams_(std::move(s)) {}
  void propose(std::vector<engine::DraftQuery>& qs) override {
    for (auto& q : qs) {
      const auto& full = streams_.at(q.request);
      q.drafts.clear();
      for (std::size_t i = q.tokens->size(); i < full.size() && q.drafts.size() < std::size_t(q.room); ++i)
        q.drafts.push_back(full[i]);
    }
  }
  const char* name() const override { return "oracle"; }

 private:
  std::map<uint64_t, std::vector<int32_t>> streams_;
};

struct Result {
  double tokens_per_s = 0;
  double acceptance = 0;
  std::map<uint64_t, std::vector<int32_t>> streams;
};

Result run(const model::Model& m, int batch, bool repetitive, int gen, const engine::SpeculativeConfig& sp) {
  engine::EngineConfig c;
  c.mode = model::ScanMode::Exact;
  c.sched.max_num_seqs = batch;
  c.speculative = sp;
  engine::Engine e(m, c);
  std::map<uint64_t, std::vector<int32_t>> prompts;
  for (int i = 0; i < batch; ++i) {
    engine::RequestSpec r;
    r.prompt = prompt(repetitive, 256, 10 + static_cast<uint32_t>(i));
    r.sampling.max_tokens = gen;
    prompts[e.add_request(r)] = r.prompt;
  }
  // Prefill first, untimed: the benchmark is about the decode phase.
  std::map<uint64_t, engine::RequestResult> out;
  while (out.size() < static_cast<std::size_t>(batch)) engine::Engine::accumulate(out, e.step());
  const auto t0 = std::chrono::steady_clock::now();
  while (e.has_unfinished()) engine::Engine::accumulate(out, e.step());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Result r;
  r.tokens_per_s = double(batch) * double(gen - 1) / s;
  r.acceptance = e.speculation_stats().acceptance_rate();
  for (auto& [id, p] : prompts) {
    r.streams[id] = p;
    r.streams[id].insert(r.streams[id].end(), out[id].tokens.begin(), out[id].tokens.end());
  }
  return r;
}

void BM_Speculative(benchmark::State& st) {
  const auto& m = m130();
  const int batch = static_cast<int>(st.range(0));
  const bool repetitive = st.range(1) != 0;
  const int gen = 48;
  Result off, ngram, oracle;
  for (auto _ : st) {
    off = run(m, batch, repetitive, gen, {});
    engine::SpeculativeConfig sp;
    sp.num_tokens = 4;
    ngram = run(m, batch, repetitive, gen, sp);
    OracleDrafter d(off.streams);
    sp.method = engine::SpeculativeMethod::Custom;
    sp.drafter = &d;
    oracle = run(m, batch, repetitive, gen, sp);
    st.SetIterationTime(1.0);
  }
  st.counters["tok_s_off"] = off.tokens_per_s;
  st.counters["tok_s_ngram"] = ngram.tokens_per_s;
  st.counters["ngram_ratio"] = ngram.tokens_per_s / off.tokens_per_s;
  st.counters["ngram_accept"] = ngram.acceptance;
  st.counters["tok_s_oracle"] = oracle.tokens_per_s;
  st.counters["oracle_ratio"] = oracle.tokens_per_s / off.tokens_per_s;
  st.counters["same_tokens"] = (ngram.streams == off.streams && oracle.streams == off.streams) ? 1 : 0;
  st.SetLabel(std::string(repetitive ? "repetitive" : "random") + ", batch " + std::to_string(batch));
}
BENCHMARK(BM_Speculative)
    ->Args({1, 1})
    ->Args({1, 0})
    ->Args({8, 1})
    ->Args({8, 0})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kSecond);

}  // namespace
