// Exact vs plain decode step on builtin:mamba2-130m, measured INTERLEAVED: every iteration times
// one plain step and then one exact step over the same batch, and the reported ratio is the median
// of the per-iteration ratios. On a shared machine, load from other processes then hits both
// modes alike, which separate benchmark runs minutes apart do not guarantee.
//
//   OMP_NUM_THREADS=1 build/parity_bench --benchmark_filter=ExactOverhead
//
// chunkpos -1: the step's position cycles through every row of the chunk (0..255), so the ratio
// is the average cost over a whole chunk, boundary steps included.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "model/checkpoint.h"
#include "model/mamba2_mixer.h"
#include "model/model.h"

using namespace parity;

namespace {

const model::Model& model_130m() {
  static std::unique_ptr<model::Model> m = model::load_model(model::open_checkpoint("builtin:mamba2-130m"));
  return *m;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct ModeRun {
  std::unique_ptr<cache::ModelCache> cache;
  model::ForwardBatch batch;
  model::ScanMode mode;
};

ModeRun make_run(const model::Model& m, bool exact, int batch) {
  cache::ModelCacheOptions o;
  o.mamba.exact = exact;
  o.mamba.ssm_dtype = exact ? DType::F32 : DType::BF16;  // each mode's default
  o.mamba.num_slots = batch;
  ModeRun r{std::make_unique<cache::ModelCache>(m.cache_spec(), o), {},
            exact ? model::ScanMode::Exact : model::ScanMode::Plain};
  for (int i = 0; i < batch; ++i) {
    r.batch.seqs.push_back({r.cache->allocate(), 0, 1});
    r.batch.tokens.push_back(100 + 7 * i);
    r.batch.logit_rows.push_back(i);
  }
  return r;
}

void BM_ExactOverhead(benchmark::State& st) {
  const auto& m = model_130m();
  const int batch = static_cast<int>(st.range(0));
  const int pos = static_cast<int>(st.range(1));
  const int cs = m.chunk_size();
  const int layers = m.cache_spec().num_mamba_layers;
  ModeRun plain = make_run(m, false, batch), exact = make_run(m, true, batch);
  std::vector<float> logits(std::size_t(batch) * m.vocab_size());
  std::vector<double> ratios, tp, te;
  int64_t step = 0;
  auto timed = [&](ModeRun& r, int64_t start) {
    // Slots are positioned directly (state values do not change the work), with the running
    // fold as far along as a real decode would have taken it.
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
    const int64_t start = cs + (pos >= 0 ? pos : (step++ * 37) % cs);  // 37 is coprime to 256: spread rows
    const double a = timed(plain, start), b = timed(exact, start);
    tp.push_back(a);
    te.push_back(b);
    ratios.push_back(b / a);
  }
  st.counters["plain_ms"] = median(tp);
  st.counters["exact_ms"] = median(te);
  st.counters["exact/plain"] = median(ratios);
}
BENCHMARK(BM_ExactOverhead)
    ->ArgNames({"batch", "chunkpos"})
    ->ArgsProduct({{1, 8, 32}, {1, 64, 128, 255, -1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
