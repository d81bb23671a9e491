// Hybrid (GraniteMoeHybrid) benchmarks on builtin:granite-h-bench: prefill tokens/s by mode, and the
// decode step exact vs plain measured interleaved (as bench_exact_overhead.cpp: each iteration times
// one plain step then one exact step of the same batch; the ratio is the median per-iteration ratio).
//
//   OMP_NUM_THREADS=1 build/parity_bench --benchmark_filter=Hybrid
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "bench_support.h"
#include "decode_timing.h"
#include "model/checkpoint.h"
#include "model/model.h"

using namespace parity;

namespace {

const model::Model& hybrid() { return bench::builtin_model("builtin:granite-h-bench"); }

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

// Decode at absolute position 256 + chunkpos: the attention layers read that many keys.
void BM_HybridDecodeStep(benchmark::State& st) { bench::interleaved_decode(st, hybrid()); }
BENCHMARK(BM_HybridDecodeStep)
    ->ArgNames({"batch", "chunkpos", "bf16"})
    ->ArgsProduct({{1, 8}, {1, 128, 255}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// The average over a chunk: every row of it once (decode_timing.h).
BENCHMARK(BM_HybridDecodeStep)
    ->Name("BM_HybridDecodeChunkMean")
    ->ArgNames({"batch", "chunkpos", "bf16"})
    ->ArgsProduct({{1, 8}, {-1}, {0, 1}})
    ->Iterations(256)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
