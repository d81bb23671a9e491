// Paged attention on a GraniteMoeHybrid-like attention layer (12 query heads, 4 kv heads,
// head_dim 128, paged blocks of 16): one decode token at context 256 / 1024 / 4096, and a 512-token
// prefill from position 0. items_per_second counts query tokens of one layer; B/s for decode is
// the K and V bytes read (decode is bound by them).
//
//   ./parity_bench --benchmark_filter=Attention
#include <benchmark/benchmark.h>
#include <omp.h>

#include <numeric>
#include <random>
#include <vector>

#include "bench_support.h"
#include "kernels/attention.h"
#include "kernels/isa.h"

namespace {

using parity::bench::ThreadScope;
using parity::bench::threads_arg;

using namespace parity::kernels;

constexpr int kHeads = 12, kKvHeads = 4, kHeadDim = 128, kBlock = 16;

struct Setup {
  KvLayout L{kKvHeads, kHeadDim, kBlock};
  std::vector<int> table;
  std::vector<float> k_cache, v_cache, q, out;
};

// A cache holding `ctx` tokens in shuffled physical blocks, and `rows` query rows.
Setup make_setup(int ctx, int rows) {
  Setup s;
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int blocks = (ctx + kBlock - 1) / kBlock;
  s.table.resize(blocks);
  std::iota(s.table.begin(), s.table.end(), 0);
  std::shuffle(s.table.begin(), s.table.end(), rng);
  s.k_cache.resize(size_t(blocks) * s.L.block_floats());
  s.v_cache.resize(s.k_cache.size());
  std::vector<float> k(size_t(ctx) * kKvHeads * kHeadDim), v(k.size());
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  kv_write(s.L, s.k_cache.data(), s.v_cache.data(), s.table.data(), 0, ctx, k.data(), v.data());
  s.q.resize(size_t(rows) * kHeads * kHeadDim);
  for (auto& x : s.q) x = nd(rng);
  s.out.resize(s.q.size());
  return s;
}

const float kScale = 0.08838834764831845f;  // 1 / sqrt(128)

// The token at position ctx - 1 attends to the whole context.
void BM_AttentionDecode(benchmark::State& state) {
  const int ctx = static_cast<int>(state.range(0));
  ThreadScope threads(threads_arg(state));
  Setup s = make_setup(ctx, 1);
  for (auto _ : state) {
    attention(s.L, kHeads, kScale, s.q.data(), 1, ctx - 1, s.k_cache.data(), s.v_cache.data(), s.table.data(),
              s.out.data());
    benchmark::DoNotOptimize(s.out.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["B/s"] = benchmark::Counter(2.0 * ctx * kKvHeads * kHeadDim * sizeof(float),
                                             benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = num_threads();
}
BENCHMARK(BM_AttentionDecode)->ArgNames({"ctx", "threads"})
    ->Args({256, 1})->Args({1024, 1})->Args({4096, 1})
    ->Args({256, 0})->Args({1024, 0})->Args({4096, 0})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_AttentionPrefill(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  ThreadScope threads(threads_arg(state));
  Setup s = make_setup(n, n);
  for (auto _ : state) {
    attention(s.L, kHeads, kScale, s.q.data(), n, 0, s.k_cache.data(), s.v_cache.data(), s.table.data(),
              s.out.data());
    benchmark::DoNotOptimize(s.out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["threads"] = num_threads();
}
BENCHMARK(BM_AttentionPrefill)->ArgNames({"n", "threads"})->Args({512, 1})->Args({512, 0})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
