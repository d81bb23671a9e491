// Hybrid (GraniteMoeHybrid) benchmarks on builtin:granite-h-bench: prefill tokens/s by mode, and the
// decode step exact vs plain measured interleaved (as bench_exact_overhead.cpp: each iteration times
// one plain step then one exact step of the same batch; the ratio is the median per-iteration ratio).
//
//   OMP_NUM_THREADS=1 build/parity_bench --benchmark_filter=Hybrid
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "model/checkpoint.h"
#include "model/mamba2_mixer.h"
#include "model/model.h"

using namespace parity;

namespace {

const model::Model& hybrid() {
  static std::unique_ptr<model::Model> m = model::load_model(model::open_checkpoint("builtin:granite-h-bench"));
  return *m;
}

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

std::unique_ptr<cache::ModelCache> make_cache(const model::Model& m, bool exact, int slots, int64_t tokens) {
  cache::ModelCacheOptions o;
  o.mamba.exact = exact;
  o.mamba.ssm_dtype = exact ? DType::F32 : DType::BF16;  // each mode's default
  o.mamba.num_slots = slots;
  o.kv_num_blocks = static_cast<int>(slots * ((tokens + o.kv_block_size - 1) / o.kv_block_size));
  return std::make_unique<cache::ModelCache>(m.cache_spec(), o);
}

void BM_HybridPrefill(benchmark::State& st) {
  const auto& m = hybrid();
  const bool exact = st.range(0) == 1;
  const int n = static_cast<int>(st.range(1));
  auto cache = make_cache(m, exact, 1, n);
  const auto toks = random_tokens(n, m.vocab_size(), 1);
  std::vector<float> logits(static_cast<std::size_t>(m.vocab_size()));
  for (auto _ : st) {
    const int slot = cache->allocate();
    cache->reserve(slot, n);
    model::ForwardBatch b;
    b.tokens = toks;
    b.seqs = {{slot, 0, n}};
    b.logit_rows = {n - 1};
    m.forward(b, *cache, exact ? model::ScanMode::Exact : model::ScanMode::Plain, logits.data());
    cache->release(slot);
  }
  st.SetItemsProcessed(st.iterations() * n);
  st.SetLabel(exact ? "exact" : "plain");
}
BENCHMARK(BM_HybridPrefill)
    ->ArgNames({"exact", "tokens"})
    ->ArgsProduct({{0, 1}, {512}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// One decode token per sequence at absolute position 256 + chunkpos (the attention layers read that
// many keys; chunkpos -1 cycles through the chunk's rows with stride 37).
void BM_HybridDecodeStep(benchmark::State& st) {
  const auto& m = hybrid();
  const int batch = static_cast<int>(st.range(0));
  const int pos = static_cast<int>(st.range(1));
  const int cs = m.chunk_size();
  const int layers = m.cache_spec().num_mamba_layers;
  struct Run {
    std::unique_ptr<cache::ModelCache> cache;
    model::ForwardBatch batch;
    model::ScanMode mode;
  };
  std::vector<Run> runs;
  for (bool exact : {false, true}) {
    Run r{make_cache(m, exact, batch, 2 * cs + 1), {}, exact ? model::ScanMode::Exact : model::ScanMode::Plain};
    for (int i = 0; i < batch; ++i) {
      const int slot = r.cache->allocate();
      r.cache->reserve(slot, 2 * cs);
      r.batch.seqs.push_back({slot, 0, 1});
      r.batch.tokens.push_back(100 + 7 * i);
      r.batch.logit_rows.push_back(i);
    }
    runs.push_back(std::move(r));
  }
  std::vector<float> logits(static_cast<std::size_t>(batch) * m.vocab_size());
  std::vector<double> tp, te, ratio;
  int64_t step = 0;
  auto timed = [&](Run& r, int64_t start) {
    // Slots are positioned directly (values do not change the work), with the running fold as far
    // along as a real decode would have taken it.
    const int t = static_cast<int>(start % cs);
    for (auto& s : r.batch.seqs) {
      s.start = start;
      r.cache->set_position(s.slot, start);
      if (r.mode == model::ScanMode::Exact)
        for (int l = 0; l < layers; ++l)
          r.cache->mamba()->running_rows(l, s.slot) = t / model::kDecodeFoldGroup * model::kDecodeFoldGroup;
    }
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(r.batch, *r.cache, r.mode, logits.data());
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  for (auto _ : st) {
    const int64_t start = cs + (pos >= 0 ? pos : (step++ * 37) % cs);
    const double a = timed(runs[0], start), b = timed(runs[1], start);
    tp.push_back(a);
    te.push_back(b);
    ratio.push_back(b / a);
  }
  st.counters["plain_ms"] = median(tp);
  st.counters["exact_ms"] = median(te);
  st.counters["exact/plain"] = median(ratio);
  st.counters["plain_tok_s"] = batch * 1000.0 / median(tp);
}
BENCHMARK(BM_HybridDecodeStep)
    ->ArgNames({"batch", "chunkpos"})
    ->ArgsProduct({{1, 8}, {1, 128, 255, -1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
