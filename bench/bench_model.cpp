// Model-level benchmarks on builtin:mamba2-130m: prefill and decode tokens/s, exact vs plain decode
// step time by batch and chunk position, and engine throughput on a mixed workload.
//
//   build/parity_bench --benchmark_filter='Model|Engine' --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <memory>
#include <random>

#include "engine/engine.h"
#include "kernels/isa.h"
#include "model/checkpoint.h"
#include "model/model.h"

using namespace parity;

namespace {

const model::Model& m130() {
  static std::unique_ptr<model::Model> m = model::load_model(model::open_checkpoint("builtin:mamba2-130m"));
  return *m;
}

std::vector<int32_t> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 50000);
  return t;
}

void BM_ModelPrefill(benchmark::State& st) {
  const auto& m = m130();
  const int n = static_cast<int>(st.range(0));
  auto toks = tokens(n, 1);
  cache::ModelCacheOptions o;
  o.mamba.exact = true;
  cache::ModelCache c(m.cache_spec(), o);
  std::vector<float> logits(m.vocab_size());
  for (auto _ : st) {
    int slot = c.allocate();
    model::ForwardBatch b;
    b.tokens = toks;
    b.seqs = {{slot, 0, n}};
    b.logit_rows = {n - 1};
    m.forward(b, c, model::ScanMode::Exact, logits.data());
    c.release(slot);
  }
  st.SetItemsProcessed(st.iterations() * n);
}
BENCHMARK(BM_ModelPrefill)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

// One decode step of `batch` sequences whose new token sits at `pos` inside its chunk (after one
// full chunk). State values do not change the work, so the slots are positioned directly instead
// of prefilled; each iteration rewinds them.
void BM_ModelDecodeStep(benchmark::State& st) {
  const auto& m = m130();
  const bool exact = st.range(0) == 1;
  const int batch = static_cast<int>(st.range(1));
  const int pos = static_cast<int>(st.range(2));
  cache::ModelCacheOptions o;
  o.mamba.exact = exact;
  o.mamba.ssm_dtype = exact ? DType::F32 : DType::BF16;
  o.mamba.num_slots = batch;
  cache::ModelCache c(m.cache_spec(), o);
  model::ForwardBatch b;
  const int64_t start = m.chunk_size() + pos;
  for (int i = 0; i < batch; ++i) {
    int s = c.allocate();
    b.seqs.push_back({s, start, 1});
    b.tokens.push_back(100 + i);
    b.logit_rows.push_back(i);
  }
  std::vector<float> logits(std::size_t(batch) * m.vocab_size());
  for (auto _ : st) {
    for (auto& s : b.seqs) c.set_position(s.slot, start);
    m.forward(b, c, exact ? model::ScanMode::Exact : model::ScanMode::Plain, logits.data());
  }
  st.SetItemsProcessed(st.iterations() * batch);
  st.SetLabel(exact ? "exact" : "plain");
}
BENCHMARK(BM_ModelDecodeStep)
    ->ArgNames({"exact", "batch", "chunkpos"})
    ->ArgsProduct({{0, 1}, {1, 8, 32}, {1, 64, 128, 255}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Mixed workload: 8 requests, prompts of 64–512 tokens arriving together, 32 generated tokens each,
// token budget 512 so prefill chunks and decodes share passes.
void BM_EngineMixed(benchmark::State& st) {
  const auto& m = m130();
  const bool exact = st.range(0) == 1;
  int64_t total = 0;
  for (auto _ : st) {
    engine::EngineConfig cfg;
    cfg.mode = exact ? model::ScanMode::Exact : model::ScanMode::Plain;
    cfg.sched.max_num_seqs = 8;
    cfg.sched.max_num_batched_tokens = 512;
    engine::Engine e(m, cfg);
    for (int i = 0; i < 8; ++i) {
      engine::RequestSpec r;
      r.prompt = tokens(64 * (i + 1), 10 + i);
      r.sampling.max_tokens = 32;
      total += static_cast<int64_t>(r.prompt.size()) + 32;
      e.add_request(r);
    }
    e.run_to_completion();
  }
  st.SetItemsProcessed(total);
  st.SetLabel(exact ? "exact" : "plain");
}
BENCHMARK(BM_EngineMixed)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
