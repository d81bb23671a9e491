// Prefix caching on builtin:mamba2-130m: a shared 2,048-token system prompt and 16 different
// 64-token questions (16 generated tokens each). The first request arrives alone; the other 15
// arrive when it has its first token (the system prompt is then cached). Every iteration runs the
// workload without and with prefix caching, interleaved, so the ratios come from one run:
// time to first token (mean over the 16 requests) and total time.
//
//   OMP_NUM_THREADS=1 build/parity_bench --benchmark_filter=PrefixCache
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <random>

#include "bench_support.h"
#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/model.h"

using namespace parity;

namespace {

using bench::m130;
using bench::random_tokens;

struct Timing {
  double ttft_ms = 0, total_ms = 0;
  uint64_t hit_tokens = 0;
};

Timing run_workload(const model::Model& m, model::ScanMode mode, bool caching, int system_len, int questions,
                    int question_len, int gen) {
  using clock = std::chrono::steady_clock;
  const auto system = random_tokens(system_len, 1);
  engine::EngineConfig c;
  c.mode = mode;
  c.enable_prefix_caching = caching;
  c.sched.max_num_seqs = 8;
  c.sched.max_num_batched_tokens = 2048;
  engine::Engine e(m, c);
  std::map<uint64_t, clock::time_point> added, first;
  auto add = [&](int q) {
    engine::RequestSpec r;
    r.prompt = system;
    const auto tail = random_tokens(question_len, 100 + static_cast<uint32_t>(q));
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    r.sampling.max_tokens = gen;
    added[e.add_request(r)] = clock::now();
  };
  const auto t0 = clock::now();
  add(0);
  int next = 1;
  while (e.has_unfinished()) {
    for (const auto& o : e.step())
      if (!o.new_tokens.empty() && !first.count(o.id)) first[o.id] = clock::now();
    if (next == 1 && !first.empty())
      for (; next < questions; ++next) add(next);
  }
  Timing t;
  t.total_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  for (const auto& [id, when] : first) t.ttft_ms += std::chrono::duration<double, std::milli>(when - added[id]).count();
  t.ttft_ms /= static_cast<double>(first.size());
  if (e.prefix_cache()) t.hit_tokens = e.prefix_cache()->stats().hit_tokens;
  return t;
}

void BM_PrefixCacheSharedSystemPrompt(benchmark::State& st) {
  const auto& m = m130();
  const auto mode = st.range(0) ? model::ScanMode::Exact : model::ScanMode::Plain;
  Timing off, on;
  for (auto _ : st) {
    off = run_workload(m, mode, false, 2048, 16, 64, 16);
    on = run_workload(m, mode, true, 2048, 16, 64, 16);
    st.SetIterationTime((off.total_ms + on.total_ms) / 1000.0);
  }
  st.counters["ttft_off_ms"] = off.ttft_ms;
  st.counters["ttft_on_ms"] = on.ttft_ms;
  st.counters["ttft_ratio"] = off.ttft_ms / on.ttft_ms;
  st.counters["total_off_s"] = off.total_ms / 1000.0;
  st.counters["total_on_s"] = on.total_ms / 1000.0;
  st.counters["total_ratio"] = off.total_ms / on.total_ms;
  st.counters["hit_tokens"] = static_cast<double>(on.hit_tokens);
  st.SetLabel(mode == model::ScanMode::Exact ? "exact" : "plain");
}
BENCHMARK(BM_PrefixCacheSharedSystemPrompt)->Arg(1)->Arg(0)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);

}  // namespace
