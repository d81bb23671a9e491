// Model-level benchmarks on builtin:mamba2-130m: prefill tokens/s and engine throughput on a mixed
// workload (exact vs plain decode step: bench_exact_overhead.cpp).
//
//   build/parity_bench --benchmark_filter='Model|Engine' --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <memory>
#include <random>

#include "bench_support.h"
#include "decode_timing.h"
#include "engine/engine.h"
#include "kernels/isa.h"
#include "model/checkpoint.h"
#include "model/model.h"

using namespace parity;

namespace {

using bench::m130;
using bench::random_tokens;

// Single-shot prefill of n tokens, plain (the chunked scan at chunk_size) and exact (its own
// grid of `cell` rows) interleaved in every iteration; counters are the median times and the median ratio. One
// untimed pass of each first, so that first-touch page faults of the activations and caches are
// not counted.
void BM_ModelPrefill(benchmark::State& st) {
  const auto& m = m130();
  const int n = static_cast<int>(st.range(0));
  auto toks = random_tokens(n, 1);
  auto make_cache = [&](bool exact) {
    cache::ModelCacheOptions o;
    o.mamba.exact = exact;
    o.mamba.grid.cell = static_cast<int>(st.range(1));
    o.mamba.ssm_dtype = DType::F32;
    return std::make_unique<cache::ModelCache>(m.cache_spec(), o);
  };
  auto plain = make_cache(false), exact = make_cache(true);
  std::vector<float> logits(m.vocab_size());
  auto pass = [&](cache::ModelCache& c, model::ScanMode mode) {
    const double t0 = bench::now_ms();
    int slot = c.allocate();
    model::ForwardBatch b;
    b.tokens = toks;
    b.seqs = {{slot, 0, n}};
    b.logit_rows = {n - 1};
    m.forward(b, c, mode, logits.data());
    c.release(slot);
    return bench::now_ms() - t0;
  };
  pass(*plain, model::ScanMode::Plain);
  pass(*exact, model::ScanMode::Exact);
  std::vector<double> tp, te, ratio;
  for (auto _ : st) {
    tp.push_back(pass(*plain, model::ScanMode::Plain));
    te.push_back(pass(*exact, model::ScanMode::Exact));
    ratio.push_back(te.back() / tp.back());
  }
  st.counters["plain_ms"] = bench::median(tp);
  st.counters["exact_ms"] = bench::median(te);
  st.counters["exact/plain"] = bench::median(ratio);
  st.counters["plain_tok_s"] = n * 1000.0 / bench::median(tp);
  st.SetItemsProcessed(st.iterations() * 2 * n);
}
BENCHMARK(BM_ModelPrefill)
    ->ArgNames({"n", "cell"})
    ->ArgsProduct({{512, 4096}, {8, 16}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Decode step time, exact vs plain, by batch and chunk position: bench_exact_overhead.cpp (the
// two modes interleaved, so that the ratio survives a noisy machine).

// Mixed workload: 8 requests, prompts of 64–512 tokens arriving together, 32 generated tokens each,
// token budget 512 so prefill chunks and decodes share passes.
void BM_EngineMixed(benchmark::State& st) {
  const auto& m = m130();
  const bool exact = st.range(0) == 1;
  int64_t total = 0;
  // The engine, and so its state cache, is built once outside the timed loop, as a server would:
  // zeroing exact mode's larger cache on first touch is start-up cost, not throughput.
  engine::EngineConfig cfg;
  cfg.mode = exact ? model::ScanMode::Exact : model::ScanMode::Plain;
  cfg.sched.max_num_seqs = 8;
  cfg.sched.max_num_batched_tokens = 512;
  engine::Engine e(m, cfg);
  for (auto _ : st) {
    for (int i = 0; i < 8; ++i) {
      engine::RequestSpec r;
      r.prompt = random_tokens(64 * (i + 1), 10 + i);
      r.sampling.max_tokens = 32;
      total += static_cast<int64_t>(r.prompt.size()) + 32;
      e.add_request(r);
    }
    e.run_to_completion();
  }
  st.SetItemsProcessed(total);
  st.SetLabel(exact ? "exact" : "plain");
}
BENCHMARK(BM_EngineMixed)->Arg(0)->Arg(1)->Iterations(2)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
