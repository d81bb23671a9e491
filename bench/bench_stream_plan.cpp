// The stream plans of kernels/stream_plan.h side by side on this machine: every iteration runs
// the same work once under each plan, the plans taking turns at going first, so that load from
// other processes hits them alike. Counters: each plan's mean time (ms) and its time over the
// detected plan's ("<plan>/detected"); the label names the detected plan.
//
//   OMP_NUM_THREADS=1 build/parity_bench --benchmark_filter=StreamPlan --benchmark_min_time=2
//
// BM_StreamPlanDecode  one decode step of builtin:mamba2-130m (batch, exact, bf16 state), the
//                        position cycling through the chunk as BM_ExactOverheadChunkMean does.
// BM_StreamPlanGemm    one M = 1 GEMM on a mamba2-130m shape, bf16 weights (many copies, so that
//                        every call reads its weights from memory, as a decode step does).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_support.h"
#include "common/dtype.h"
#include "decode_timing.h"
#include "kernels/gemm.h"
#include "kernels/stream_plan.h"

using namespace parity;

namespace {

// Runs `work` under every plan in every iteration (rotating which goes first) and reports the means.
template <class Work>
void compare_plans(benchmark::State& st, Work&& work) {
  const auto ps = kernels::stream_plans();
  const std::string detected = kernels::detected_stream_plan().name;
  std::vector<double> sum(ps.size(), 0.0);
  std::size_t first = 0;
  int64_t iters = 0;
  for (auto _ : st) {
    for (std::size_t j = 0; j < ps.size(); ++j) {
      const std::size_t i = (first + j) % ps.size();
      kernels::set_stream_plan(ps[i]);
      sum[i] += work(iters);
    }
    first = (first + 1) % ps.size();
    ++iters;
  }
  kernels::clear_stream_plan();
  double base = 0.0;
  for (std::size_t i = 0; i < ps.size(); ++i)
    if (detected == ps[i].name) base = sum[i];
  for (std::size_t i = 0; i < ps.size(); ++i) {
    st.counters[std::string(ps[i].name) + "_ms"] = iters ? sum[i] / double(iters) : 0.0;
    if (base > 0) st.counters[std::string(ps[i].name) + "/detected"] = sum[i] / base;
  }
  st.SetLabel("detected " + detected);
}

void BM_StreamPlanDecode(benchmark::State& st) {
  const auto& m = bench::m130();
  const int batch = static_cast<int>(st.range(0));
  const bool exact = st.range(1) != 0;
  const DType dtype = st.range(2) ? DType::BF16 : DType::F32;
  const int cs = m.chunk_size();
  bench::DecodeRun run = bench::make_decode_run(m, exact, batch, 2 * cs, dtype);
  std::vector<float> logits(static_cast<std::size_t>(batch) * m.vocab_size());
  compare_plans(st, [&](int64_t it) {
    return bench::time_decode_step(m, run, cs + (it * 37) % cs, logits.data());
  });
}
BENCHMARK(BM_StreamPlanDecode)
    ->ArgNames({"batch", "exact", "bf16"})
    ->ArgsProduct({{1, 8}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_StreamPlanGemm(benchmark::State& st) {
  const int k = static_cast<int>(st.range(0)), n = static_cast<int>(st.range(1));
  std::vector<uint16_t> raw(static_cast<std::size_t>(n) * k);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (auto& w : raw) w = f32_to_bf16(nd(rng));
  // Enough copies to exceed the last-level cache several times over.
  const std::size_t bytes = raw.size() * 2, copies = std::max<std::size_t>(2, (512u << 20) / bytes);
  std::vector<kernels::PackedWeight> ws;
  for (std::size_t i = 0; i < copies; ++i) ws.push_back(kernels::pack_weight(raw.data(), DType::BF16, n, k));
  std::vector<float> a(static_cast<std::size_t>(k), 0.5f), c(static_cast<std::size_t>(n));
  std::size_t next = 0;
  compare_plans(st, [&](int64_t) {
    const double t0 = bench::now_ms();
    kernels::gemm(a.data(), 1, k, ws[next++ % ws.size()], nullptr, c.data(), n);
    benchmark::ClobberMemory();
    return bench::now_ms() - t0;
  });
}
BENCHMARK(BM_StreamPlanGemm)
    ->ArgNames({"K", "N"})
    ->Args({768, 3352})
    ->Args({1536, 768})
    ->Args({768, 50288})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
