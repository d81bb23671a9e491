#pragma once
// Shared by the exact-vs-plain decode benchmarks: one decode token per sequence, slots positioned
// directly (state values do not change the work) and the two modes timed back to back in every
// iteration, taking turns at going first, so that load from other processes on a shared machine
// hits both alike.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <benchmark/benchmark.h>

#include "model/model.h"

namespace parity::bench {

struct DecodeRun {
  std::unique_ptr<cache::ModelCache> cache;
  model::ForwardBatch batch;
  model::ScanMode mode;
};

// `batch` slots (KV reserved for `kv_tokens` positions when the model has attention), with the
// given SSM state dtype and exact mode's default grid.
inline DecodeRun make_decode_run(const model::Model& m, bool exact, int batch, int64_t kv_tokens, DType dtype,
                                 int exact_cell = kernels::kDefaultExactCell) {
  cache::ModelCacheOptions o;
  o.mamba.exact = exact;
  o.mamba.grid.cell = exact_cell;
  o.mamba.ssm_dtype = dtype;
  o.mamba.num_slots = batch;
  if (m.cache_spec().num_attention_layers > 0)
    o.kv_num_blocks = static_cast<int>(batch * ((kv_tokens + o.kv_block_size - 1) / o.kv_block_size));
  DecodeRun r{std::make_unique<cache::ModelCache>(m.cache_spec(), o), {},
              exact ? model::ScanMode::Exact : model::ScanMode::Plain};
  for (int i = 0; i < batch; ++i) {
    const int slot = r.cache->allocate();
    r.cache->reserve(slot, kv_tokens);
    r.batch.seqs.push_back({slot, 0, 1});
    r.batch.tokens.push_back(100 + 7 * i);
    r.batch.logit_rows.push_back(i);
  }
  return r;
}

// One step at absolute position `start`, in milliseconds. The state values do not change the work;
// exact mode's ring holds whatever the earlier steps left.
// Milliseconds on the clock the timed benchmarks read: wall time, or with PARITY_BENCH_CLOCK=thread
// the calling thread's CPU time. On a machine shared with other work a preempted thread's wall
// time counts time it did not run; its CPU time does not. Meaningful only with OMP_NUM_THREADS=1,
// where the kernels run on the calling thread.
inline double now_ms() {
  static const bool thread_clock = [] {
    const char* v = std::getenv("PARITY_BENCH_CLOCK");
    return v != nullptr && std::strcmp(v, "thread") == 0;
  }();
  if (thread_clock) {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double time_decode_step(const model::Model& m, DecodeRun& r, int64_t start, float* logits) {
  for (auto& s : r.batch.seqs) {
    s.start = start;
    r.cache->set_position(s.slot, start);
  }
  const double t0 = now_ms();
  m.forward(r.batch, *r.cache, r.mode, logits);
  return now_ms() - t0;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The benchmark body: batch = range(0), chunk position = range(1), the step at absolute position
// chunk_size + chunk position, both modes with the state dtype range(2) (0 float32, 1 bfloat16). Counters: median plain and exact step times and the median
// per-iteration ratio exact/plain.
// Chunk position -1 measures the average over a chunk instead: the steps cycle through the chunk's
// rows with stride 37 (coprime to the chunk size, so 256 iterations visit every row once; register
// it with Iterations(chunk_size)), and the counters are MEAN step times and the ratio of the means.
// A median would hide the steps that fold, which are what an average over a chunk is about.
inline void interleaved_decode(benchmark::State& st, const model::Model& m,
                               int exact_cell = kernels::kDefaultExactCell) {
  const int batch = static_cast<int>(st.range(0));
  const int pos = static_cast<int>(st.range(1));
  const int cs = m.chunk_size();
  const DType dtype = st.range(2) ? DType::BF16 : DType::F32;
  DecodeRun plain = make_decode_run(m, false, batch, 2 * cs, dtype), exact = make_decode_run(m, true, batch, 2 * cs, dtype, exact_cell);
  std::vector<float> logits(static_cast<std::size_t>(batch) * m.vocab_size());
  std::vector<double> tp, te, ratio;
  int64_t step = 0;
  bool plain_first = true;
  for (auto _ : st) {
    const int64_t start = cs + (pos >= 0 ? pos : (step++ * 37) % cs);
    // The two modes take turns at going first, so that whatever one step leaves in the caches
    // helps or hurts each mode alike.
    double a, b;
    if (plain_first) {
      a = time_decode_step(m, plain, start, logits.data());
      b = time_decode_step(m, exact, start, logits.data());
    } else {
      b = time_decode_step(m, exact, start, logits.data());
      a = time_decode_step(m, plain, start, logits.data());
    }
    plain_first = !plain_first;
    tp.push_back(a);
    te.push_back(b);
    ratio.push_back(b / a);
  }
  if (pos < 0) {
    double sp = 0, se = 0;
    for (std::size_t i = 0; i < tp.size(); ++i) sp += tp[i], se += te[i];
    const double n = tp.empty() ? 1.0 : double(tp.size());
    st.counters["plain_ms"] = sp / n;
    st.counters["exact_ms"] = se / n;
    st.counters["exact/plain"] = sp > 0 ? se / sp : 0.0;
    st.counters["plain_tok_s"] = sp > 0 ? batch * 1000.0 * n / sp : 0.0;
    return;
  }
  st.counters["plain_ms"] = median(tp);
  st.counters["exact_ms"] = median(te);
  st.counters["exact/plain"] = median(ratio);
  st.counters["plain_tok_s"] = batch * 1000.0 / median(tp);
}

}  // namespace parity::bench
