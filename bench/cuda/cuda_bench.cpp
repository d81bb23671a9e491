// GPU benchmarks (Google Benchmark, manual time from CUDA events). Run by scripts/test-gpu.sh on an
// H200; figures and ratios in docs/performance.md ("CUDA"). Shapes are the anchors: 32 heads
// × 64, state 128, bf16 inputs, fp32 state, 2048-token sequences; GEMMs at mamba2-2.7b's shapes.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend_cuda/backend.h"
#include "backend_cuda/decode_graphs.h"
#include "backend_cuda/step_profile.h"
#include "common/dtype.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/gemm_gemv.h"
#include "kernels_cuda/gemm_mma.h"
#include "kernels_cuda/gemm_skinny.h"
#include "kernels_cuda/gemm_swap_ab.h"
#include "kernels_cuda/gemm_wgmma.h"
#include "kernels_cuda/graph.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/pass_plan.h"
#include "kernels_cuda/persistent_decode.h"
#include "kernels_cuda/persistent_floor.h"
#include "kernels_cuda/ssd_prefill.h"
#include "kernels_cuda/ssd_tc.h"
#include "kernels_cuda/stream.h"
#include "kernels_cuda/stream_floor.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "bench_cache.h"
#include "big_model.h"
#include "kernel_timeline.h"
#include "step_shares.h"

namespace parity {
namespace {

constexpr int H = 32, P = 64, N = 128, GR = 1, I = H * P, LD = I + 2 * GR * N;

std::vector<float> rnd(std::size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

struct Timer {
  cudaEvent_t a, b;
  cudaStream_t s = nullptr;  // the stream the timed launches go to (the events and the busy kernel go there too)
  Timer() {
    cudaEventCreate(&a);
    cudaEventCreate(&b);
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  void start() { cudaEventRecord(a, s); }
  // The start event queued behind a 50 µs busy kernel: the launches that follow queue up while it
  // runs, so the events bracket device time only (a decode step's host launch cost is what CUDA
  // graphs remove in the models; here it would be most of a 1-sequence step's time).
  void start_device() {
    cuda::busy_wait(50, s);
    cudaEventRecord(a, s);
  }
  double stop_s() {
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms / 1000.0;
  }
};

// One layer's scan buffers for `seqs` sequences of `rows` rows each (`heads` heads of P × N, one group).
struct ScanBench {
  cuda::ScanGrid g;
  bool bf16;
  int seqs, rows, heads, ld;  // ld: a row of xbc (x of every head, then B and C)
  cuda::DeviceBuffer<float> xbc, dt, y, scratch, A, D, s32, rx, rdt, rb;
  cuda::DeviceBuffer<uint16_t> s16;
  cuda::DeviceBuffer<int32_t> ints;
  cuda::DeviceBuffer<int64_t> starts;
  cuda::SsdPrefill which = cuda::SsdPrefill::automatic;
  ScanBench(cuda::ScanGrid grid, bool b16, int nseq, int nrows, cuda::SsdPrefill w = cuda::SsdPrefill::automatic,
            int nheads = H)
      : g(grid), bf16(b16), seqs(nseq), rows(nrows), heads(nheads), ld(nheads * P + 2 * GR * N), which(w) {
    const std::size_t T = std::size_t(nseq) * nrows;
    const int hp = heads * P;
    xbc.upload(rnd(T * ld, 1, -1, 1));
    dt.upload(rnd(T * heads, 2, 0.001f, 0.1f));
    y.resize(T * hp);
    A.upload(rnd(heads, 3, -8, -1));
    D.upload(rnd(heads, 4, 0, 1));
    const std::size_t S = std::size_t(nseq) * heads * P * N;
    if (bf16) {
      s16.resize(S);
      s16.zero();
    } else {
      // One sequence's random state repeated: drawing 67 M values for a batch of 256 took most of
      // a benchmark's time, and the kernels' speed does not depend on the values.
      const std::vector<float> one = rnd(std::size_t(heads) * P * N, 5, -0.1f, 0.1f);
      std::vector<float> all(S);
      for (std::size_t i = 0; i < S; ++i) all[i] = one[i % one.size()];
      s32.upload(all);
    }
    const int cell = std::max(1, g.cell);
    rx.upload(rnd(std::size_t(nseq) * heads * cell * P, 6, -1, 1));
    rdt.upload(rnd(std::size_t(nseq) * heads * cell, 7, 0.001f, 0.1f));
    rb.upload(rnd(std::size_t(nseq) * GR * cell * N, 8, -1, 1));
  }
  cuda::PassSeqs ps;
  // The pass's metadata goes up once per forward (shared by every layer): not part of a layer's time.
  void prepare(int64_t start) {
    std::vector<cuda::SeqSpan> spans;
    for (int s = 0; s < seqs; ++s) spans.push_back({s, start, rows});
    const cuda::PassPlan plan(spans, g);
    ps = plan.upload(ints, starts);
    scratch.resize(std::max<std::size_t>(1, cuda::ssd_scratch_floats({heads, P, N, GR}, ps, g, which)));
  }
  void pass(int64_t start) {
    prepare(start);
    run();
  }
  void run() {
    cuda::SsdState st;
    st.state_f32 = bf16 ? nullptr : s32.data();
    st.state_bf16 = bf16 ? s16.data() : nullptr;
    st.ring_x = rx.data();
    st.ring_dt = rdt.data();
    st.ring_B = rb.data();
    cuda::ssd_scan({heads, P, N, GR}, g, ps, xbc.data(), ld, dt.data(), A.data(), D.data(), st,
                   scratch.data(), scratch.size(), y.data(), nullptr, which);
  }
};

bool have_gpu(benchmark::State& state) {
  if (cuda::device_count() > 0) return true;
  state.SkipWithError("no CUDA device: not run");
  return false;
}

// Where the span walk's time goes: its first block's clock cycles per span in each step (the step's
// own work of thread 0 and the barrier that ends it): wait (copies of the span landed), cum (cum,
// coefficients, w), delta, fold, out (thread 0's outputs), next (the end barrier and the next
// span's copies issued). arg2: 116 as in BM_CudaSsdPrefillTiles.
void BM_CudaSsdSpanProbe(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int batch = static_cast<int>(state.range(0)), cell = static_cast<int>(state.range(1));
  const int way = static_cast<int>(state.range(2));
  ScanBench b({true, cell, true}, false, batch, 2048, static_cast<cuda::SsdPrefill>(way));
  b.pass(0);
  cuda::DeviceBuffer<long long> probe(24);
  probe.upload(std::vector<long long>(24, 0));
  std::vector<long long> got(24, 0);
  Timer t;
  for (auto _ : state) {
    cuda::ssd_span_probe(probe.data());
    t.start_device();
    b.run();
    state.SetIterationTime(t.stop_s());
    cuda::ssd_span_probe(nullptr);
    got = probe.download(24);
  }
  const double spans = got[7] > 0 ? static_cast<double>(got[7]) : 1.0;
  const char* names[7] = {"wait", "cum", "delta", "fold", "out", "endbar", "issue"};
  double total = 0;
  for (int i = 0; i < 7; ++i) {
    state.counters[names[i]] = static_cast<double>(got[i]) / spans;
    total += static_cast<double>(got[i]);
  }
  state.counters["cyc_per_span"] = total / spans;
  // The outputs step of the fastest and the slowest warp.
  const int warps = 8;  // the warps that compute outputs
  (void)way;
  double lo = 1e30, hi = 0;
  for (int w = 0; w < warps; ++w) {
    lo = std::min(lo, static_cast<double>(got[8 + w]) / spans);
    hi = std::max(hi, static_cast<double>(got[8 + w]) / spans);
  }
  state.counters["out_min"] = lo;
  state.counters["out_max"] = hi;
}
BENCHMARK(BM_CudaSsdSpanProbe)->ArgsProduct({{1, 8}, {16, 64}, {116}})->UseManualTime()->Unit(benchmark::kMicrosecond);

// Where the lane walk's time goes (ssd_lanes.cu): thread 0 of its first block, clock cycles per cell
// in each step: wait (the cell's copies landed, the barrier), coef (C and B by quarter, cum, the
// coefficients, the barrier), issue (the next cell's copies), out (the outputs), fold (delta and
// fold); blocks_per_sm: how many of the kernel's blocks an SM holds. arg2: the shape (232, 264, 464, 316, 332).
void BM_CudaSsdLanesProbe(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int batch = static_cast<int>(state.range(0)), cell = static_cast<int>(state.range(1));
  const int way = static_cast<int>(state.range(2));
  ScanBench b({true, cell, true}, false, batch, 2048, static_cast<cuda::SsdPrefill>(way));
  b.pass(0);
  cuda::DeviceBuffer<long long> probe(6);
  probe.upload(std::vector<long long>(6, 0));
  std::vector<long long> got(6, 0);
  Timer t;
  for (auto _ : state) {
    cuda::ssd_lanes_probe(probe.data());
    t.start_device();
    b.run();
    state.SetIterationTime(t.stop_s());
    cuda::ssd_lanes_probe(nullptr);
    got = probe.download(6);
  }
  const double cells = got[5] > 0 ? static_cast<double>(got[5]) : 1.0;
  // The pipelined walk (564, 664, 674, 684) times its own steps: wait (copies landed, the barrier), issue (the
  // next copies; 674, 684: the next coefficient block's too), coef (the next cell's coefficients; none at
  // 674, 684),
  // sums (quarter sums and fold), finish (exchange, intra sums, outputs).
  const bool pipe = way == 564 || way == 664 || way == 674 || way == 684;
  const char* lane_names[5] = {"wait", "coef", "issue", "out", "fold"};
  const char* pipe_names[5] = {"wait", "issue", "coef", "sums", "finish"};
  const char* const* names = pipe ? pipe_names : lane_names;
  double total = 0;
  for (int i = 0; i < 5; ++i) {
    state.counters[names[i]] = static_cast<double>(got[i]) / cells;
    total += static_cast<double>(got[i]);
  }
  state.counters["cyc_per_cell"] = total / cells;
  state.counters["blocks_per_sm"] = cuda::ssd_lanes_resident(way, {H, P, N, GR});
}
BENCHMARK(BM_CudaSsdLanesProbe)
    ->ArgsProduct({{1, 8, 32}, {16}, {232, 264, 464, 316, 332, 564, 664, 674, 684}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// SSD prefill of batch × 2048 tokens, one call per sequence from position 0, fp32 state.
// arg1: the cell; arg2: 1 = exact (cells anchored at 0, staggered), 0 = plain (cells from the
// call's start, vLLM's chunked scan at chunk 256). vLLM's mamba_chunk_scan_combined on an H200:
// 51 µs (1×2048), 278 µs (8×2048), 1.26 ms (32×2048).
void BM_CudaSsdPrefill(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int batch = static_cast<int>(state.range(0)), cell = static_cast<int>(state.range(1));
  const bool exact = state.range(2) != 0;
  const cuda::ScanGrid g{exact, cell, exact};
  ScanBench b(g, false, batch, 2048);
  b.pass(0);
  Timer t;
  for (auto _ : state) {
    t.start();
    b.run();
    state.SetIterationTime(t.stop_s());
  }
  state.SetItemsProcessed(state.iterations() * batch * 2048);
}
BENCHMARK(BM_CudaSsdPrefill)
    ->ArgsProduct({{1, 8, 32}, {8, 16, 32, 64, 128, 256}, {1}})
    ->ArgsProduct({{1, 8, 32}, {64, 256}, {0}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The tensor-core cell walk (ssd_tc.cu: band, walk, ring; the model's with --scan-products) on
// BM_CudaSsdPrefill's inputs and timing, exact mode: compare with BM_CudaSsdPrefill/batch/16/1 of the
// same run. arg1: the cell (16 only). Each batch size's inputs are drawn once and kept for the next runs
// (never freed: a buffer freed after the runtime's exit would fail).
// The tc benchmarks' products argument: 0 bf16, 1 split.
cuda::ScanProducts tc_products(int64_t arg) {
  return arg == 0 ? cuda::ScanProducts::bfloat16 : cuda::ScanProducts::split;
}
// The stream of a tc pass: the legacy one, or for the programmatic way (and where `own` asks) a stream of its own, as
// the model's. Never destroyed, as the kept inputs are never freed.
cudaStream_t tc_stream(const cuda::SsdTcWay& way, bool own) {
  static auto* stream = new cuda::Stream();
  return way.programmatic > 0 || own ? stream->get() : nullptr;
}
// One exact-grid tc pass of batch × 2048 rows on grid `cell`, ready to run again and again (its inputs kept
// per size), on tc_stream(way, own_stream).
std::function<void()> tc_pass(int batch, int cell, cuda::SsdTcWay way, cuda::ScanProducts products,
                              bool own_stream = false) {
  const cuda::ScanGrid g{true, cell, true, products};
  static auto* kept = new std::map<std::pair<int, int>, std::unique_ptr<ScanBench>>();
  std::unique_ptr<ScanBench>& slot = (*kept)[{batch, cell}];
  if (!slot) slot = std::make_unique<ScanBench>(g, false, batch, 2048);
  ScanBench& b = *slot;
  b.prepare(0);
  const std::size_t need = cuda::ssd_tc_scratch_floats({H, P, N, GR}, b.ps, g);
  if (b.scratch.size() < need) b.scratch.resize(need);
  cuda::SsdState st;
  st.state_f32 = b.s32.data();
  st.ring_x = b.rx.data();
  st.ring_dt = b.rdt.data();
  st.ring_B = b.rb.data();
  cudaDeviceSynchronize();  // the inputs' copies (the legacy stream) landed before a pass on a stream of its own
  const cudaStream_t s = tc_stream(way, own_stream);
  return [&b, g, st, way, s] {
    cuda::ssd_tc_scan({H, P, N, GR}, g, b.ps, b.xbc.data(), LD, b.dt.data(), b.A.data(), b.D.data(), st,
                      b.scratch.data(), b.scratch.size(), b.y.data(), s, way);
  };
}
void tc_prefill(benchmark::State& state, cuda::SsdTcWay way, cuda::ScanProducts products, bool device_only = false,
                bool own_stream = false) {
  if (!have_gpu(state)) return;
  const int batch = static_cast<int>(state.range(0));
  const std::function<void()> run = tc_pass(batch, static_cast<int>(state.range(1)), way, products, own_stream);
  run();
  Timer t;
  t.s = tc_stream(way, own_stream);
  for (auto _ : state) {
    if (device_only) t.start_device();
    else t.start();
    run();
    state.SetIterationTime(t.stop_s());
  }
  state.SetItemsProcessed(state.iterations() * batch * 2048);
}
// The default way with one of its switches (a field of SsdTcWay) set to arg3, device time: the switches' benches
// below. arg2 the products (0 bf16, 1 split).
void tc_prefill_switch(benchmark::State& state, int cuda::SsdTcWay::*field, bool own_stream = false) {
  cuda::SsdTcWay w;
  w.*field = static_cast<int>(state.range(3));
  tc_prefill(state, w, tc_products(state.range(2)), true, own_stream);
}
// The default way: bf16 products, the block shape by batch size.
void BM_CudaSsdTcPrefill(benchmark::State& state) { tc_prefill(state, {}, cuda::ScanProducts::bfloat16); }
BENCHMARK(BM_CudaSsdTcPrefill)->ArgsProduct({{1, 8, 32}, {16}})->UseManualTime()->Unit(benchmark::kMicrosecond);
// The same, device time only (Timer::start_device: the launches queued behind a busy kernel, so the host's
// launch cost is left out): compare with BM_CudaSsdPrefillTiles/batch/16/0.
// arg2: the products (0 bf16, 1 split), each at its default way.
void BM_CudaSsdTcPrefillDevice(benchmark::State& state) { tc_prefill(state, {}, tc_products(state.range(2)), true); }
BENCHMARK(BM_CudaSsdTcPrefillDevice)
    ->ArgsProduct({{1, 2, 8, 32}, {16}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
// The same pass read kernel by kernel from CUPTI's records (kernel_timeline.h), the passes back to back: each
// kernel's share of the pass's path, its life and its lead (how early a programmatic launch began) go to
// stderr; pass_us is the traced pass, first start to last end. arg0 sequences, arg1 the products (0 bf16, 1 split),
// arg2 the programmatic level (SsdTcWay::programmatic 0-2; the leads show how early each launch began).
void BM_CudaSsdTcTimeline(benchmark::State& state) {
  if (!have_gpu(state)) return;
  constexpr int kTraced = 50;
  const int batch = static_cast<int>(state.range(0));
  cuda::SsdTcWay way;
  way.programmatic = static_cast<int>(state.range(2));
  const std::function<void()> run = tc_pass(batch, 16, way, tc_products(state.range(1)));
  run();
  for (auto _ : state) run();
  std::string why;
  if (!bench::kernel_timeline_start(&why)) return state.SetLabel("no timeline: " + why);
  for (int i = 0; i < kTraced; ++i) run();
  const bench::KernelTimeline t = bench::kernel_timeline_finish(kTraced, 1);
  if (!t.available) return state.SetLabel("no timeline: " + t.why);
  state.counters["pass_us"] = t.step_us;
  state.counters["kernels"] = t.kernels_per_step;
  std::fprintf(stderr, "tc-timeline-%dx2048-%s-programmatic%d (%d passes, %.1f us a pass)\n%s", batch,
               state.range(1) != 0 ? "split" : "bf16", way.programmatic, t.steps, t.step_us,
               bench::kernel_timeline_csv(t).c_str());
}
BENCHMARK(BM_CudaSsdTcTimeline)
    ->ArgsProduct({{1, 8}, {0, 1}, {0, 1, 2}})
    ->Iterations(20)
    ->Unit(benchmark::kMicrosecond);
// Its ways: arg2 warps over p (1, 2, 4: 16 columns each), arg3 warps over n (1, 2, 4), arg4 products
// (0 bf16, 1 split hi + lo). Device time, as BM_CudaSsdTcPrefillDevice.
void BM_CudaSsdTcPrefillWays(benchmark::State& state) {
  cuda::SsdTcWay w;
  w.warps_p = static_cast<int>(state.range(2));
  w.warps_n = static_cast<int>(state.range(3));
  tc_prefill(state, w, tc_products(state.range(4)), true);
}
// Every block shape at every size: the best one moves with what a cell's block holds (session 48: C and B
// copied as bf16 tiles, 42 KB of shared memory a 4 × 1 block where it was 68).
BENCHMARK(BM_CudaSsdTcPrefillWays)
    ->ArgsProduct({{1, 2, 8, 32}, {16}, {1, 2, 4}, {1, 2, 4}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The relay (ssd_tc_relay.cu) in place of the walk: arg2 its cell warps (1-4; 3 and 4 with bf16 products only),
// arg3 the products (0 bf16, 1 split), arg4 its chain warps (1, 2, 4).
void BM_CudaSsdTcPrefillRelay(benchmark::State& state) {
  cuda::SsdTcWay w;
  w.cell_warps = static_cast<int>(state.range(2));
  w.chain_warps = static_cast<int>(state.range(4));
  tc_prefill(state, w, tc_products(state.range(3)), true);
}
BENCHMARK(BM_CudaSsdTcPrefillRelay)
    ->ArgsProduct({{1, 2, 8, 32}, {16}, {1, 2, 3, 4}, {0}, {1, 2, 4}})
    ->ArgsProduct({{1, 2, 8, 32}, {16}, {1, 2}, {1}, {1, 2, 4}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The default way with its launches programmatic or ordinary (SsdTcWay::programmatic), in one run: arg2 the products
// (0 bf16, 1 split), arg3 the level (0 ordinary, 1 the table pass and the relay, 2 the band too). Device time, as
// BM_CudaSsdTcPrefillDevice; all on the same stream of their own, so they differ in their launches alone.
void BM_CudaSsdTcPrefillProgrammatic(benchmark::State& state) {
  tc_prefill_switch(state, &cuda::SsdTcWay::programmatic, true);
}
BENCHMARK(BM_CudaSsdTcPrefillProgrammatic)
    ->ArgsProduct({{1, 2, 8}, {16}, {0, 1}, {0, 1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The lean relay (arg3 1: SsdTcWay::lean, fewer instructions a round, ssd_tc_relay.cu's kLean) or the relay as it
// has run (0), each at the default way for its size (one sequence: the relay; the lean way needs the relay, so
// only arg0 1); arg2 the products (0 bf16, 1 split). Device time, as BM_CudaSsdTcPrefillDevice.
void BM_CudaSsdTcPrefillLean(benchmark::State& state) { tc_prefill_switch(state, &cuda::SsdTcWay::lean); }
BENCHMARK(BM_CudaSsdTcPrefillLean)
    ->ArgsProduct({{1}, {16}, {0, 1}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The band and the tables in one launch (arg3 1: SsdTcWay::tables, ssd_tc_cell_band.cu) or two (0: the band, then
// the table pass), each way otherwise the default for its size; arg2 the products (0 bf16, 1 split). Device time, as
// BM_CudaSsdTcPrefillDevice.
void BM_CudaSsdTcPrefillTables(benchmark::State& state) { tc_prefill_switch(state, &cuda::SsdTcWay::tables); }
BENCHMARK(BM_CudaSsdTcPrefillTables)
    ->ArgsProduct({{1, 2, 8}, {16}, {0, 1}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Device time of one layer's prefill of batch × 2048 tokens on grid g with `which`.
// Counter TFLOPs: the scan's main products, 2·2·P·N flops per row and head (C·S_start and the cell's
// sum), per second; the H200's fp32 FMA peak is about 67 TFLOP/s.
void time_prefill_device(benchmark::State& state, const cuda::ScanGrid& g, int batch, cuda::SsdPrefill which,
                         int heads = H) {
  ScanBench b(g, false, batch, 2048, which, heads);
  b.pass(0);
  Timer t;
  double total = 0;
  for (auto _ : state) {
    t.start_device();
    b.run();
    const double s = t.stop_s();
    total += s;
    state.SetIterationTime(s);
  }
  state.SetItemsProcessed(state.iterations() * batch * 2048);
  const double flops = 4.0 * P * N * heads * batch * 2048.0 * static_cast<double>(state.iterations());
  state.counters["TFLOPs"] = total > 0 ? flops / total / 1e12 : 0.0;
}
// The same prefill (exact mode) with the implementation named, device time only: arg2 0 = chosen
// by size, 1 = the fused walk with its tile chosen by size, 16 / 32 / 64 = the fused walk's tile of p,
// 116 = the span walk (ssd_span.cu), 232 / 264 = the lane walk (ssd_lanes.cu) with 32 / 64 columns of p
// per block and two per lane (464: 264 at two blocks an SM, more registers), 316 / 332 = 16 / 32 columns
// per block and one per lane, 564 / 664 = the pipelined lane walk (ssd_pipe.cu) at three / two blocks an SM,
// 674 = 664 with its coefficients from a table pass, 684 = 674 with C and B laid out by quarter before it
// (the passes' time included), -1 = the earlier three-phase kernels.
void BM_CudaSsdPrefillTiles(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int batch = static_cast<int>(state.range(0)), cell = static_cast<int>(state.range(1));
  time_prefill_device(state, {true, cell, true}, batch, static_cast<cuda::SsdPrefill>(state.range(2)));
}
// The same at mamba2-2.7b's 80 heads (arg1; 32 above), where one sequence's span walk takes three waves of
// blocks (arg2 as above: 0 automatic, 116 the span walk, 664 / 684 the pipelined walks).
void BM_CudaSsdPrefillHeads(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int batch = static_cast<int>(state.range(0)), heads = static_cast<int>(state.range(1));
  time_prefill_device(state, {true, 16, true}, batch, static_cast<cuda::SsdPrefill>(state.range(2)), heads);
}
BENCHMARK(BM_CudaSsdPrefillHeads)
    ->ArgsProduct({{1, 2}, {32, 48, 80}, {0, 116, 664, 684}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_CudaSsdPrefillTiles)
    ->ArgsProduct({{1, 8, 32}, {16, 64}, {0, 16, 32, 64, -1}})
    ->ArgsProduct({{1, 2, 3, 4, 8}, {16}, {1, 116}})
    ->ArgsProduct({{1, 2, 8}, {32, 64}, {1, 116}})
    ->ArgsProduct({{32}, {16}, {1, 116}})
    ->ArgsProduct({{2, 4}, {16}, {-1}})
    ->ArgsProduct({{1, 2, 3, 4, 8, 16, 32}, {16}, {232, 264, 464, 316, 332, 564, 664, 674, 684}})
    ->ArgsProduct({{16}, {16}, {1, 116}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Plain mode's prefill (cells of 256 from each call's start, vLLM's chunk_size) with the implementation
// named, device time only: arg1 0 = automatic (the chunk scan), 300 = the chunk scan, 1 = the fused walk,
// -1 = the three-phase kernels. Compare with BM_CudaSsdPrefillTiles/batch/16/0 (exact mode) and with
// mamba_ssm's chunk scan (bench/cuda/mamba_ssm_reference.py). Counter TFLOPs as BM_CudaSsdPrefillTiles.
void BM_CudaSsdPrefillPlain(benchmark::State& state) {
  if (!have_gpu(state)) return;
  time_prefill_device(state, {false, 256, false}, static_cast<int>(state.range(0)),
                      static_cast<cuda::SsdPrefill>(state.range(1)));
}
BENCHMARK(BM_CudaSsdPrefillPlain)
    ->ArgsProduct({{1, 8, 32}, {0, 1, -1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

double copy_bandwidth();

// One decode step's SSM part for `batch` sequences. arg1: 0 plain SSU, else exact cell; arg2: 1 = bf16
// state. Steps walk through consecutive positions, so every position of the cell is in the mean;
// the slowest position is reported as the counter max_us. Device time of the whole ssd_scan call
// (Timer::start_device). tile > 0 forces the decode kernels' p-tile (rows of p per block).
// Counters: state_GBps (the state's bytes, read once, per second); floor_us, the bytes the step
// must move at the device's copy rate (plain: the state read and written; exact: the state read,
// the folding heads' share (1/G) written, the replayed x rows read, the row's x into the ring);
// x_floor = mean / floor_us.
struct DecodeWay {
  int way = 0;        // ssd_force_decode_way (0: the default schedule)
  int pad = 0;        // ssd_force_decode_smem_pad bytes
  bool probe = false;  // after the timed steps, one cell of steps with the per-block probe
};
void decode_probe_counters(benchmark::State& state, ScanBench& b, int64_t& pos, int cell);
void decode_ssm(benchmark::State& state, int batch, int cell, bool bf16, int tile, int ahead = 0, DecodeWay way = {},
                cuda::ScanProducts products = cuda::ScanProducts::float32) {
  if (!have_gpu(state)) return;
  cuda::ssd_force_step_tile(tile);
  cuda::ssd_force_step_prefetch(ahead);
  cuda::ssd_force_decode_way(way.way);
  cuda::ssd_force_decode_smem_pad(way.pad);
  const cuda::ScanGrid g{cell != 0, cell != 0 ? cell : cuda::kMaxCell, cell != 0,
                        cell != 0 ? products : cuda::ScanProducts::float32};
  ScanBench b(g, bf16, batch, 1);
  int64_t pos = 1000;
  for (int i = 0; i < 8; ++i) b.pass(pos++);
  const int period = cell != 0 ? cell : 1;
  std::vector<double> per(static_cast<std::size_t>(period), 0.0);
  std::vector<int64_t> cnt(per.size(), 0);
  Timer t;
  for (auto _ : state) {
    b.prepare(pos);
    t.start_device();
    b.run();
    const double s = t.stop_s();
    state.SetIterationTime(s);
    const std::size_t k = static_cast<std::size_t>(pos % period);
    per[k] += s;
    cnt[k] += 1;
    ++pos;
  }
  if (way.probe) decode_probe_counters(state, b, pos, std::max(1, cell));
  cuda::ssd_force_step_tile(0);
  cuda::ssd_force_step_prefetch(0);
  cuda::ssd_force_decode_way(0);
  cuda::ssd_force_decode_smem_pad(0);
  double worst = 0, total = 0;
  for (std::size_t k = 0; k < per.size(); ++k) {
    if (cnt[k]) worst = std::max(worst, per[k] / cnt[k]);
    total += per[k];
  }
  state.counters["max_us"] = worst * 1e6;
  const double state_bytes = static_cast<double>(batch) * H * P * N * (bf16 ? 2 : 4);
  const double x_row_bytes = static_cast<double>(batch) * H * P * 4;
  const double moved = cell == 0 ? 2.0 * state_bytes
                                 : state_bytes * (1.0 + 1.0 / cell) + x_row_bytes * ((cell - 1) / 2.0 + 1.0);
  const double floor_s = moved / copy_bandwidth();
  state.counters["floor_us"] = floor_s * 1e6;
  if (total > 0) {
    const double mean = total / static_cast<double>(std::max<int64_t>(1, state.iterations()));
    state.counters["state_GBps"] = state_bytes / mean / 1e9;
    state.counters["x_floor"] = mean / floor_s;
  }
}
// A fixed number of steps (32 per position at G = 16), whatever --benchmark_min_time says: a step
// costs far more wall time (the pass's upload, the 50 µs queue-up wait) than device time, and a
// time-based count made the batch-1 cases run for minutes.
constexpr int kDecodeSteps = 512;
void BM_CudaDecodeSsm(benchmark::State& state) {
  decode_ssm(state, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), state.range(2) != 0, 0);
}
BENCHMARK(BM_CudaDecodeSsm)
    ->ArgsProduct({{1, 8, 64, 256}, {0, 8, 16, 32, 64, 256}, {0, 1}})
    ->Iterations(kDecodeSteps)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
// The exact decode on the tensor-core walk's steps (ssd_tc_decode.cu, the grid's products) beside the fp32 one in
// the same run, G = 16: arg0 batch, arg1 bf16 state, arg2 the products (0 float32, 1 bfloat16, 2 split).
void BM_CudaDecodeSsmTc(benchmark::State& state) {
  decode_ssm(state, static_cast<int>(state.range(0)), 16, state.range(1) != 0, 0, 0, {},
             static_cast<cuda::ScanProducts>(state.range(2)));
}
BENCHMARK(BM_CudaDecodeSsmTc)
    ->ArgsProduct({{1, 64, 256}, {0, 1}, {0, 1, 2}})
    ->Iterations(kDecodeSteps)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
// The exact decode with its L2 prefetch of later blocks' tiles (arg3: head slots ahead; 0 = none, the
// default; -1 = one resident set ahead, the launch's resident blocks over its sequence·tile columns: 9
// fp32 / 15 bf16 at batch 64, 3 / 4 at 256 on an H200, from 4 / 7 whole-head blocks an SM).
void BM_CudaDecodeSsmAhead(benchmark::State& state) {
  decode_ssm(state, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), state.range(2) != 0, 0,
             static_cast<int>(state.range(3)));
}
BENCHMARK(BM_CudaDecodeSsmAhead)
    ->ArgsProduct({{64, 256}, {16}, {0, 1}, {-1, 0, 1, 4, 16}})
    ->Iterations(kDecodeSteps)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
// The exact decode's schedules side by side in one run (arg3: ssd_force_decode_way; 0 = the default,
// 100 + flags: 100 session 9's schedule, 1644 the default since session 11; session 12 removed the 37
// other sets session 11 measured, docs/performance.md), arg4: extra shared memory per block in KB (fewer
// blocks an SM: how the time follows the blocks resident).
void BM_CudaDecodeSsmWay(benchmark::State& state) {
  decode_ssm(state, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), state.range(2) != 0, 0, 0,
             {static_cast<int>(state.range(3)), static_cast<int>(state.range(4)) * 1024, false});
}
BENCHMARK(BM_CudaDecodeSsmWay)
    ->ArgsProduct({{1, 64, 256}, {16}, {0, 1}, {100, 1644}, {0}})
    ->ArgsProduct({{64, 256}, {16}, {0, 1}, {0}, {4, 8, 16}})
    ->Iterations(kDecodeSteps)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
// The same with a per-block probe (after the timed steps, one cell of steps; decode_probe_counters).
void BM_CudaDecodeSsmProbe(benchmark::State& state) {
  decode_ssm(state, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), state.range(2) != 0, 0, 0,
             {static_cast<int>(state.range(3)), 0, true});
}
BENCHMARK(BM_CudaDecodeSsmProbe)
    ->ArgsProduct({{1, 64, 256}, {16}, {0, 1}, {100, 1644}})
    ->Iterations(kDecodeSteps)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
// Where an exact decode step's time goes, from the probe (ssd_decode_probe) over `cell` steps: span_us
// (first block's start to last block's end, globaltimer), life_us / life_fold_us (a block's start to
// its end, mean, non-folding / folding blocks), resident_per_sm (Σ lifetimes / span / SMs: the blocks
// an SM holds on average), last_start_us (when the last block started), and the non-folding blocks'
// steps as clock64 converted at the maximum clock (µs, mean): meta_us (index math and the metadata's
// round trip), replay_wait_us (the replay rows' copies), replay_us (cum, coefficients, intra sums),
// state_wait_us (what is left of the state's copy), dots_us (C·S and the outputs), tail_us (the rest:
// the fold for a folding block, fold_tail_us).
void decode_probe_counters(benchmark::State& state, ScanBench& b, int64_t& pos, int cell) {
  constexpr int kValues = 10;
  const std::size_t blocks = std::size_t(b.seqs) * H * 8;  // at most 8 p-tiles a head (tp >= 8)
  cuda::DeviceBuffer<unsigned long long> buf(blocks * kValues);
  std::vector<unsigned long long> v;
  int clock_khz = 0, sms = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const double us_per_cycle = 1e3 / std::max(1, clock_khz);
  double span = 0, life[2] = {0, 0}, n[2] = {0, 0}, steps[6] = {0, 0, 0, 0, 0, 0}, fold_tail = 0, resident = 0;
  double last_start = 0;
  cuda::ssd_decode_probe(buf.data());
  for (int k = 0; k < cell; ++k) {
    buf.zero();
    b.prepare(pos++);
    b.run();
    cudaDeviceSynchronize();
    v = buf.download(buf.size());
    unsigned long long t0 = ~0ull, t1 = 0, s1 = 0;
    double lives = 0;
    for (std::size_t i = 0; i < blocks; ++i) {
      const unsigned long long* o = v.data() + i * kValues;
      if (o[9] == 0) continue;  // no such block
      t0 = std::min(t0, o[0]);
      t1 = std::max(t1, o[1]);
      s1 = std::max(s1, o[0]);
      const int f = (o[8] >> 16 & 1) != 0 ? 1 : 0;
      life[f] += static_cast<double>(o[1] - o[0]) * 1e-3;
      lives += static_cast<double>(o[1] - o[0]) * 1e-3;
      n[f] += 1;
      if (f == 0) {
        unsigned long long prev = 0;
        for (int s = 0; s < 6; ++s) {
          steps[s] += static_cast<double>(o[2 + s] - prev) * us_per_cycle;
          prev = o[2 + s];
        }
      } else {
        fold_tail += static_cast<double>(o[7] - o[6]) * us_per_cycle;
      }
    }
    if (t1 > t0) {
      span += static_cast<double>(t1 - t0) * 1e-3;
      resident += lives / (static_cast<double>(t1 - t0) * 1e-3) / std::max(1, sms);
      last_start += static_cast<double>(s1 - t0) * 1e-3;
    }
  }
  cuda::ssd_decode_probe(nullptr);
  const double steps_n = std::max(1.0, n[0]);
  state.counters["span_us"] = span / cell;
  state.counters["life_us"] = life[0] / steps_n;
  state.counters["life_fold_us"] = life[1] / std::max(1.0, n[1]);
  state.counters["resident_per_sm"] = resident / cell;
  state.counters["last_start_us"] = last_start / cell;
  const char* names[6] = {"meta_us", "replay_wait_us", "replay_us", "state_wait_us", "dots_us", "tail_us"};
  for (int s = 0; s < 6; ++s) state.counters[names[s]] = steps[s] / steps_n;
  state.counters["fold_tail_us"] = fold_tail / std::max(1.0, n[1]);
}

// The same with the p-tile forced (arg2: rows of p per block; 64 = the whole head), arg3 = bf16:
// the figures the default tile choice (ssd_step_tile) is checked against.
void BM_CudaDecodeSsmTile(benchmark::State& state) {
  decode_ssm(state, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), state.range(3) != 0,
             static_cast<int>(state.range(2)));
}
BENCHMARK(BM_CudaDecodeSsmTile)
    ->ArgsProduct({{1, 64, 256}, {0, 16}, {8, 16, 32, 64}, {0, 1}})
    ->Iterations(kDecodeSteps)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The batch-invariant GEMM at mamba2-2.7b's shapes: arg1 0 = in_proj (10576 × 2560), 1 = out_proj
// (2560 × 5120), 2 = lm_head (50288 × 2560). One GEMM pass at such a shape, random inputs.
constexpr int kGemmShapes[3][2] = {{10576, 2560}, {2560, 5120}, {50288, 2560}};

// The weights of a shape, made once per process and shared by every benchmark on it: a random
// pattern of 2^20 bf16 values repeated over the matrix on the device (a GEMM's time does not depend
// on the values; filling 128 M values from a host generator took seconds per benchmark).
const uint16_t* shape_weights(int shape) {
  static cuda::DeviceBuffer<uint16_t> w[3];
  cuda::DeviceBuffer<uint16_t>& b = w[shape];
  if (b.size() == 0) {
    const std::size_t n = std::size_t(kGemmShapes[shape][0]) * kGemmShapes[shape][1], chunk = std::size_t(1) << 20;
    const std::vector<float> wf = rnd(chunk, 10, -0.05f, 0.05f);
    std::vector<uint16_t> w16(chunk);
    for (std::size_t i = 0; i < chunk; ++i) w16[i] = f32_to_bf16(wf[i]);
    b.resize(n);
    cudaMemcpy(b.data(), w16.data(), std::min(n, chunk) * 2, cudaMemcpyHostToDevice);
    for (std::size_t done = std::min(n, chunk); done < n;) {  // doubling device copies
      const std::size_t m = std::min(done, n - done);
      cudaMemcpy(b.data() + done, b.data(), m * 2, cudaMemcpyDeviceToDevice);
      done += m;
    }
  }
  return b.data();
}

struct GemmPass {
  int M, Nn, K;
  cuda::DeviceBuffer<float> a, c;
  const uint16_t* w;
  GemmPass(int m, int shape) : M(m), Nn(kGemmShapes[shape][0]), K(kGemmShapes[shape][1]), w(shape_weights(shape)) {
    c.resize(std::size_t(M) * Nn);
    a.upload(rnd(std::size_t(M) * K, 9, -1, 1));
  }
};

// The device's copy bandwidth: read + write bytes of a 1 GiB device-to-device copy over its time,
// best of 5, measured once per process (BM_CudaCopy's figure). A pass that reads each weight once
// cannot beat its weight bytes over this rate: the floor x_floor is measured against.
double copy_bandwidth() {
  static const double bw = [] {
    const std::size_t n = std::size_t(1) << 30;
    cuda::DeviceBuffer<uint8_t> a(n), b(n);
    a.zero();
    Timer t;
    double best = 1e30;
    for (int i = 0; i < 6; ++i) {
      t.start();
      cudaMemcpy(b.data(), a.data(), n, cudaMemcpyDeviceToDevice);
      const double s = t.stop_s();
      if (i > 0) best = std::min(best, s);  // the first is a warm-up
    }
    return 2.0 * static_cast<double>(n) / best;
  }();
  return bw;
}

// Evicts the weights from L2 (50 MiB on an H100/H200) by writing a larger buffer: a decode step's
// layers each read weights of their own, so the model never finds a GEMM's weights in L2, while
// back-to-back timing of one GEMM can (out_proj's 26 MB fit).
void flush_l2() {
  static cuda::DeviceBuffer<uint8_t> junk(std::size_t(256) << 20);
  static unsigned v = 0;
  cudaMemsetAsync(junk.data(), static_cast<int>(++v & 0xff), junk.size());
}

// Times `pass` on the device alone (Timer::start_device: the launches queue behind a busy kernel,
// so host launch cost, which CUDA graphs remove in the models, is not counted; cuBLAS's reference
// hides it by timing back-to-back launches) and reports TFLOPs, the weights' read rate GBps (bf16
// N × K bytes per pass) and x_floor: the mean time over the weight-read floor (weight bytes at
// copy_bandwidth()); 1.0 is the floor, the decode target is <= 1.3. cold: L2 flushed before each pass.
template <typename Pass>
void time_gemm(benchmark::State& state, const GemmPass& g, Pass&& pass, bool cold = false) {
  const double floor_s = 2.0 * g.Nn * g.K / copy_bandwidth();
  pass();  // warm-up (and any one-time set-up)
  Timer t;
  double total = 0;
  for (auto _ : state) {
    if (cold) flush_l2();
    t.start_device();
    pass();
    const double s = t.stop_s();
    state.SetIterationTime(s);
    total += s;
  }
  const double n = static_cast<double>(std::max<int64_t>(1, state.iterations())), mean = total / n;
  state.counters["TFLOPs"] = 2.0 * g.M * g.Nn * g.K / mean / 1e12;
  state.counters["GBps"] = 2.0 * g.Nn * g.K / mean / 1e9;
  state.counters["x_floor"] = mean / floor_s;
}

void BM_CudaGemm(benchmark::State& state) {
  if (!have_gpu(state)) return;
  GemmPass g(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  time_gemm(state, g, [&] {
    cuda::gemm(g.a.data(), g.M, g.K, g.K, g.w, cuda::WeightType::BF16, g.Nn, nullptr, g.c.data(), g.Nn, nullptr, g.Nn);
  });
}
BENCHMARK(BM_CudaGemm)
    ->ArgsProduct({{1, 8, 16, 64, 256, 512, 4096, 16384}, {0, 1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// A prefill pass's conv launch at mamba2-2.7b's shape (conv channels 5,376 read from in_proj's 10,576
// columns, K = 4, SiLU, dt of 80 heads in the same launch), then the state's advance: arg0 sequences of
// 2,048 rows, arg1 1 = row tiles (a thread a channel over 16 rows), 0 = a thread a row and channel.
// GBps / x_floor: the input's and the output's bytes (read once, written once) at the copy rate.
void BM_CudaConvPrefill(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int seqs = static_cast<int>(state.range(0)), n = 2048, rows = seqs * n;
  const int ch = 5376, ld = 10576, K = 4, H = 80, dt_col = ld - H;
  cuda::DeviceBuffer<float> in, w, bias, dt_bias, st(std::size_t(seqs) * (K - 1) * ch), out(std::size_t(rows) * ch),
      dt(std::size_t(rows) * H);
  in.upload(rnd(std::size_t(rows) * ld, 31, -1, 1));
  w.upload(rnd(std::size_t(ch) * K, 32, -1, 1));
  bias.upload(rnd(ch, 33, -1, 1));
  dt_bias.upload(rnd(H, 34, -1, 1));
  st.zero();
  std::vector<cuda::SeqSpan> spans;
  for (int s = 0; s < seqs; ++s) spans.push_back({s, 0, n});
  cuda::DeviceBuffer<int32_t> ints;
  cuda::DeviceBuffer<int64_t> starts;
  const cuda::PassSeqs p = cuda::PassPlan(spans, cuda::ScanGrid{}).upload(ints, starts);
  const cuda::DtJob job{in.data() + dt_col, ld, H, dt_bias.data(), 0.0f, 1e30f, dt.data()};
  cuda::set_conv_row_tiles(state.range(1) != 0);
  auto pass = [&] {
    cuda::conv1d(in.data(), ld, ch, w.data(), bias.data(), K, st.data(), p, true, out.data(), nullptr, &job);
  };
  pass();
  Timer t;
  double total = 0;
  for (auto _ : state) {
    flush_l2();
    t.start_device();
    pass();
    const double sec = t.stop_s();
    state.SetIterationTime(sec);
    total += sec;
  }
  cuda::set_conv_row_tiles(true);
  const double mean = total / static_cast<double>(std::max<int64_t>(1, state.iterations()));
  const double bytes = 2.0 * rows * ch * sizeof(float);
  state.counters["GBps"] = bytes / mean / 1e9;
  state.counters["x_floor"] = mean / (bytes / copy_bandwidth());
}
BENCHMARK(BM_CudaConvPrefill)->ArgsProduct({{1, 8}, {0, 1}})->UseManualTime()->Unit(benchmark::kMicrosecond);

// Replays graph g on s once to warm up, then once per iteration behind a busy kernel (the launch queues
// behind it: device time only, CUDA events); each iteration's time is the state's. Returns the mean, s.
double time_graph(benchmark::State& state, const cuda::GraphExec& g, cudaStream_t s) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  g.launch(s);  // warm-up
  double total = 0;
  for (auto _ : state) {
    cuda::busy_wait(50, s);
    cudaEventRecord(a, s);
    g.launch(s);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    state.SetIterationTime(ms / 1000.0);
    total += ms / 1000.0;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return total / static_cast<double>(std::max<int64_t>(1, state.iterations()));
}

// A decode step's pattern, norm then GEMM, eight times over (arg0 M, arg1 shape, arg2 the GEMMs'
// early-start flags, ops.h's GemmEarly: 0 = main's ordinary launches): add_rmsnorm writes the bf16 copy
// the next GEMM reads (gemm_rounded, as the mixer calls in_proj and out_proj), each GEMM with weights of
// its own (eight copies, so none is found in L2), the whole chain one CUDA graph with programmatic
// launches on. Reports the time per norm + GEMM pair (us_per_pair) and its x_floor (the pair's time over
// the GEMM's weight-read floor): what the early start saves per GEMM, without the rest of a step.
void BM_CudaGemmChain(benchmark::State& state) {
  if (!have_gpu(state)) return;
  constexpr int kPairs = 8;
  const int M = static_cast<int>(state.range(0)), shape = static_cast<int>(state.range(1));
  const unsigned flags = static_cast<unsigned>(state.range(2));
  const int Nn = kGemmShapes[shape][0], K = kGemmShapes[shape][1];
  const std::size_t wn = std::size_t(Nn) * K;
  cuda::DeviceBuffer<uint16_t> w(wn * kPairs);
  for (int i = 0; i < kPairs; ++i) cudaMemcpy(w.data() + i * wn, shape_weights(shape), wn * 2, cudaMemcpyDeviceToDevice);
  cuda::DeviceBuffer<float> x, normw, out(std::size_t(M) * K), c(std::size_t(M) * Nn);
  cuda::DeviceBuffer<uint16_t> out16(std::size_t(M) * K);
  x.upload(rnd(std::size_t(M) * K, 11, -1, 1));
  normw.upload(rnd(std::size_t(K), 12, 0.5f, 1.5f));
  cuda::set_programmatic_launch(true);
  cuda::set_gemm_early(flags);
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  {
    const cuda::GraphExec g = cuda::capture_graph(s, [&] {
      for (int i = 0; i < kPairs; ++i) {
        cuda::add_rmsnorm(x.data(), {}, M, K, normw.data(), 1e-5f, out.data(), out16.data(), s);
        cuda::gemm_rounded(out.data(), out16.data(), M, K, K, w.data() + i * wn, cuda::WeightType::BF16, Nn, nullptr,
                           c.data(), Nn, s, Nn);
      }
    });
    const double pair = time_graph(state, g, s) / kPairs;
    state.counters["us_per_pair"] = pair * 1e6;
    state.counters["x_floor"] = pair / (2.0 * static_cast<double>(wn) / copy_bandwidth());
  }
  cudaStreamDestroy(s);
  cuda::set_gemm_early(cuda::kGemmEarlyDefault);
}
BENCHMARK(BM_CudaGemmChain)
    ->ArgsProduct({{1, 64}, {0, 1}, {0, 3, 7, 67}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// mamba2-2.7b's decode weights as the floors read them: per layer in_proj then out_proj, then lm_head
// (5.4 GB, allocated once per process; the contents do not matter).
constexpr int kFloorLayers = 64;
std::size_t floor_bytes(int shape) { return 2 * std::size_t(kGemmShapes[shape][0]) * kGemmShapes[shape][1]; }
const uint8_t* floor_weights() {
  static cuda::DeviceBuffer<uint8_t> weights(kFloorLayers * (floor_bytes(0) + floor_bytes(1)) + floor_bytes(2));
  return weights.data();
}

// A batch-1 decode step of mamba2-2.7b with the work taken out (stream_floor.h: issue 11's decode target
// against what the launch structure alone costs): per layer `small` empty launches (1: the norm before
// in_proj; 4: the norm, and the conv, the SSM step and the gated norm between the GEMMs, as a plain step
// launches them) and the two GEMMs' weight reads (in_proj 54 MB, out_proj 26 MB, each layer its own
// bytes), then the final norm and lm_head's 257 MB: one CUDA graph, every launch programmatic. arg0
// small (0, 1, 4), arg1 early (1: the reads start before the wait, as the GEMMs' rings do). x_floor: the
// step over its bytes at copy_bandwidth(), the floor BM_CudaModelDecode's decode target is measured
// against (1.3 the target).
void BM_CudaStreamFloor(benchmark::State& state) {
  if (!have_gpu(state)) return;
  constexpr int kLayers = kFloorLayers;
  const int small = static_cast<int>(state.range(0));
  const bool early = state.range(1) != 0;
  const std::size_t in_b = floor_bytes(0), out_b = floor_bytes(1), head_b = floor_bytes(2);
  const std::size_t total = kLayers * (in_b + out_b) + head_b;
  cuda::DeviceBuffer<unsigned> sink(1);
  const uint8_t* weights = floor_weights();  // allocated on first use: not inside the capture
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  {
    const cuda::GraphExec g = cuda::capture_graph(s, [&] {
      const uint8_t* w = weights;
      for (int l = 0; l < kLayers; ++l) {
        if (small >= 1) cuda::empty_step(s);
        cuda::stream_read(w, in_b, early, sink.data(), s);
        w += in_b;
        for (int i = 1; i < small; ++i) cuda::empty_step(s);
        cuda::stream_read(w, out_b, early, sink.data(), s);
        w += out_b;
      }
      if (small >= 1) cuda::empty_step(s);
      cuda::stream_read(w, head_b, early, sink.data(), s);
    });
    const double step = time_graph(state, g, s);
    state.counters["x_floor"] = step / (static_cast<double>(total) / copy_bandwidth());
    state.counters["TBps"] = static_cast<double>(total) / step / 1e12;
  }
  cudaStreamDestroy(s);
}
BENCHMARK(BM_CudaStreamFloor)
    ->ArgsProduct({{0, 1, 4}, {0, 1}})
    ->ArgNames({"small", "early"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// The same weights read by one persistent kernel (persistent_floor.h): arg0 the small work's latency
// on the critical path (0 none; 1 the estimates below; 2 twice them, out_proj's chain staying 3.9),
// arg1 out_proj's weights copied into shared memory ahead of its phase, arg2 MB of the next in_proj
// asked of L2 during out_proj's phase. The estimates, µs a layer at batch 1: the SSM step 1.5 (the
// SSU kernel alone is ~3 with its launch), the gated norm 1.0 and the layer norm 0.7 (each block
// normalising the whole row itself), out_proj's chain of 320 dependent tensor-core steps 3.9
// (BM_CudaMmaChain) once its weights are on chip; without the copy out_proj's time is its read.
// x_floor as BM_CudaStreamFloor's.
void BM_CudaPersistentFloor(benchmark::State& state) {
  if (!have_gpu(state)) return;
  cuda::PersistentFloorStep st;
  st.in_bytes = floor_bytes(0);
  st.out_bytes = floor_bytes(1);
  st.head_bytes = floor_bytes(2);
  st.layers = kFloorLayers;
  const float scale = static_cast<float>(state.range(0));
  st.ssm_us = 1.5f * scale;
  st.gated_norm_us = 1.0f * scale;
  st.norm_us = 0.7f * scale;
  st.out_in_smem = state.range(1) != 0;
  st.out_chain_us = st.out_in_smem && scale > 0 ? 3.9f : 0.f;
  st.next_l2_bytes = static_cast<std::size_t>(state.range(2)) << 20;
  const std::size_t total = kFloorLayers * (st.in_bytes + st.out_bytes) + st.head_bytes;
  const uint8_t* w = floor_weights();
  cuda::DeviceBuffer<unsigned> scratch(2);
  if (!cuda::persistent_floor_step(w, st, scratch.data(), scratch.data() + 1, nullptr)) {  // warm-up
    state.SkipWithError("the device cannot hold one such block on every SM");
    return;
  }
  Timer t;
  double sum = 0;
  for (auto _ : state) {
    t.start_device();  // the step's time includes zeroing the barrier count (one memset node)
    cuda::persistent_floor_step(w, st, scratch.data(), scratch.data() + 1, nullptr);
    const double s = t.stop_s();
    state.SetIterationTime(s);
    sum += s;
  }
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    state.SkipWithError(cudaGetErrorString(err));
    return;
  }
  const double step = sum / static_cast<double>(std::max<int64_t>(1, state.iterations()));
  state.counters["x_floor"] = step / (static_cast<double>(total) / copy_bandwidth());
  state.counters["TBps"] = static_cast<double>(total) / step / 1e12;
}
BENCHMARK(BM_CudaPersistentFloor)
    ->Args({0, 0, 0})
    ->Args({1, 0, 0})
    ->Args({1, 1, 0})
    ->Args({1, 1, 16})
    ->Args({1, 1, 24})
    ->Args({0, 1, 24})
    ->Args({2, 0, 0})
    ->Args({2, 1, 24})
    ->ArgNames({"work", "out_smem", "next_l2_mb"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// The few-rows kernel's variants side by side (arg0 M, arg1 shape, arg2 variant of
// gemm_skinny_variants(), the label names it; arg3 1 = L2 flushed before each pass, as in a decode
// step, 0 = warm, as cuBLAS's back-to-back reference). Variant 0 is what gemm() takes for M <= 16;
// M = 64 only for the variant that takes 64 rows.
bool skinny_args(benchmark::State& state, int variant) {
  if (!have_gpu(state)) return false;
  if (variant >= cuda::gemm_skinny_variants() || state.range(0) > cuda::gemm_skinny_variant_rows(variant)) {
    state.SkipWithError("no such variant, or more rows than it takes");
    return false;
  }
  state.SetLabel(cuda::gemm_skinny_variant_name(variant));
  return true;
}
void BM_CudaGemmSkinny(benchmark::State& state) {
  const int variant = static_cast<int>(state.range(2));
  if (!skinny_args(state, variant)) return;
  GemmPass g(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  time_gemm(
      state, g,
      [&] { cuda::gemm_bf16_skinny(g.a.data(), g.M, g.K, g.K, g.w, g.Nn, nullptr, g.c.data(), g.Nn, nullptr, variant); },
      state.range(3) != 0);
}
BENCHMARK(BM_CudaGemmSkinny)
    ->ArgsProduct({{1, 8, 16, 64}, {0, 1, 2}, {0, 1, 2, 3, 4, 5, 6}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// What limits a variant: the same launch with one side alone (arg3 1 = the loads only, the
// consumers wait for and release each stage; 2 = the tensor cores only, on whatever the ring holds),
// warm. The side whose time is near BM_CudaGemmSkinny's is the limit; if neither is, their overlap.
void BM_CudaGemmSkinnyProbe(benchmark::State& state) {
  const int variant = static_cast<int>(state.range(2));
  if (!skinny_args(state, variant)) return;
  GemmPass g(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  const int probe = static_cast<int>(state.range(3));
  time_gemm(state, g, [&] {
    cuda::gemm_bf16_skinny_probe(probe, g.a.data(), g.M, g.K, g.K, g.w, g.Nn, g.c.data(), g.Nn, nullptr, variant);
  });
}
BENCHMARK(BM_CudaGemmSkinnyProbe)
    ->ArgsProduct({{1, 16}, {0, 1, 2}, {0, 1, 2, 3, 4, 5, 6}, {1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Decode-sized passes on every path side by side (arg0 M, arg1 shape, arg3 1 = L2 flushed before
// each pass, as in a decode step; 0 = warm). arg2: 0..15 the swap-AB kernel's variants
// (gemm_swap_ab_variants(); -1 its default), 16 the few-rows mma.sync kernel (its default up to 16
// rows, its 64-row variant up to 64), 17 the mma tiles (gemm_bf16_mma's choice). The label names
// the path.
// Every path includes its bf16 pre-pass where it has one.
void BM_CudaGemmSwapAb(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int M = static_cast<int>(state.range(0)), path = static_cast<int>(state.range(2));
  GemmPass g(M, static_cast<int>(state.range(1)));
  std::function<void()> pass;
  if (path < 16) {
    if (path >= cuda::gemm_swap_ab_variants()) return state.SkipWithError("no such variant");
    state.SetLabel(std::string("swap-ab ") + (path < 0 ? "default" : cuda::gemm_swap_ab_variant_name(path)));
    pass = [&, path] {
      cuda::gemm_bf16_swap_ab(g.a.data(), g.M, g.K, g.K, g.w, g.Nn, nullptr, g.c.data(), g.Nn, nullptr, path);
    };
  } else if (path == 16) {
    const int variant = M <= 16 ? 0 : cuda::gemm_skinny_variants() - 1;
    if (M > cuda::gemm_skinny_variant_rows(variant)) return state.SkipWithError("more rows than the few-rows kernel takes");
    state.SetLabel(std::string("few-rows ") + cuda::gemm_skinny_variant_name(variant));
    pass = [&, variant] {
      cuda::gemm_bf16_skinny(g.a.data(), g.M, g.K, g.K, g.w, g.Nn, nullptr, g.c.data(), g.Nn, nullptr, variant);
    };
  } else {
    state.SetLabel("mma tiles");
    pass = [&] { cuda::gemm_bf16_mma(g.a.data(), g.M, g.K, g.K, g.w, g.Nn, g.Nn, nullptr, g.c.data(), g.Nn, nullptr); };
  }
  time_gemm(state, g, pass, state.range(3) != 0);
}
BENCHMARK(BM_CudaGemmSwapAb)
    ->ArgsProduct({{1, 8, 16, 64, 256}, {0, 1, 2}, {-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 16, 17}, {0, 1}})
    // Session 38: 17-32 rows on out_proj, c64-2blk against the mma.sync variants (10 the default since).
    ->ArgsProduct({{24, 32}, {1}, {1, 10, 11, 12}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The swap-AB kernel's row tiles (session 38): arg0 M, arg1 shape, arg2 variant (-1 the default), arg3 the
// rows a block computes (0: gemm()'s choice under the early flags, gemm_swap_ab.cu's row_tile_for; 8..256:
// that tile), L2 flushed before each pass. The label names the variant and the tile.
void BM_CudaGemmSwapAbRows(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int M = static_cast<int>(state.range(0)), variant = static_cast<int>(state.range(2));
  const int tile = static_cast<int>(state.range(3));
  if (variant >= cuda::gemm_swap_ab_variants()) return state.SkipWithError("no such variant");
  if (tile > 0 && (tile >= 2 * M || (variant >= 4 && tile > 32)))
    return state.SkipWithError("a tile past M's, or past the mma.sync kernel's 32 rows");
  GemmPass g(M, static_cast<int>(state.range(1)));
  state.SetLabel(std::string(variant < 0 ? "default" : cuda::gemm_swap_ab_variant_name(variant)) + " rows " +
                 (tile == 0 ? std::string("auto") : std::to_string(tile)));
  time_gemm(
      state, g,
      [&] {
        cuda::gemm_bf16_swap_ab(g.a.data(), g.M, g.K, g.K, g.w, g.Nn, nullptr, g.c.data(), g.Nn, nullptr, variant, -1,
                                tile);
      },
      true);
}
BENCHMARK(BM_CudaGemmSwapAbRows)
    ->ArgsProduct({{32, 64, 128, 256}, {0, 1, 2}, {-1, 1, 2, 10, 12, 13}, {0, 8, 16, 32, 64, 128, 256}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// gemm() as a decode step calls it (session 39): the norm before it has written A's bf16 copy, so
// gemm_rounded reads that and launches no pre-pass, as cuBLAS's bf16 A needs none; one launch, L2
// flushed, device time. cublas_reference.py's cold rows are its baseline (the other GEMM benchmarks
// include the pre-pass's launch). arg0 M, arg1 shape, arg2 the set_gemm_early word (35 the default; with
// gemm_swap_ab.h's kGemmWgmmaFrom17Rows, kGemmMmaTo64Rows, kGemmMmaTo64RowsIn16 or kGemmWgmmaFrom33Rows:
// out_proj's 17-64 rows as before sessions 38 and 39; kGemmRowWarpsTo128Rows: its 65-128 rows on row warps).
void BM_CudaGemmRounded(benchmark::State& state) {
  if (!have_gpu(state)) return;
  GemmPass g(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  std::vector<float> a = rnd(std::size_t(g.M) * g.K, 9, -1, 1);  // GemmPass's A, whose copy this rounds
  std::vector<uint16_t> a16(a.size());
  std::transform(a.begin(), a.end(), a16.begin(), f32_to_bf16);
  cuda::DeviceBuffer<uint16_t> rounded;
  rounded.upload(a16);
  cuda::set_gemm_early(static_cast<unsigned>(state.range(2)));
  time_gemm(
      state, g,
      [&] {
        cuda::gemm_rounded(g.a.data(), rounded.data(), g.M, g.K, g.K, g.w, cuda::WeightType::BF16, g.Nn, nullptr,
                           g.c.data(), g.Nn, nullptr, g.Nn);
      },
      true);
  cuda::set_gemm_early(cuda::kGemmEarlyDefault);
}
BENCHMARK(BM_CudaGemmRounded)
    ->ArgsProduct({{1, 8, 16, 32, 48, 64, 128, 256}, {0, 1, 2}, {cuda::kGemmEarlyDefault}})
    ->ArgsProduct({{24, 32, 48, 64},
                   {1},
                   {cuda::kGemmEarlyDefault | cuda::kGemmWgmmaFrom17Rows, cuda::kGemmEarlyDefault | cuda::kGemmMmaTo64Rows,
                    cuda::kGemmEarlyDefault | cuda::kGemmMmaTo64RowsIn16,
                    cuda::kGemmEarlyDefault | cuda::kGemmWgmmaFrom33Rows}})
    ->ArgsProduct({{96, 128}, {1}, {cuda::kGemmEarlyDefault, cuda::kGemmEarlyDefault | cuda::kGemmRowWarpsTo128Rows}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The decode kernel (gemm_gemv.cu) beside the path gemm() took for up to 16 rows before it (arg0 M,
// arg1 shape, arg3 1 = L2 flushed before each pass, as in a decode step; 0 = warm, as cuBLAS's
// back-to-back reference). arg2: 0..2 the decode kernel's variants (gemm_gemv_variants(); -1 its
// default), 6 / 7 its default's probes (the loads alone / the tensor cores alone: gemm_bf16_gemv_probe),
// 8 the swap-AB kernel's default (pre-pass included), 9 gemm() itself. The label names it.
void BM_CudaGemmGemv(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int M = static_cast<int>(state.range(0)), path = static_cast<int>(state.range(2));
  GemmPass g(M, static_cast<int>(state.range(1)));
  std::function<void()> pass;
  if (path < 8 && !cuda::gemm_gemv_takes(M, g.K)) return state.SkipWithError("more rows than the decode kernel takes");
  if (path == 6 || path == 7) {
    state.SetLabel(path == 6 ? "gemv probe: loads only" : "gemv probe: tensor cores only");
    pass = [&, path] {
      cuda::gemm_bf16_gemv_probe(path - 5, g.a.data(), g.M, g.K, g.K, g.w, g.Nn, g.c.data(), g.Nn, nullptr);
    };
  } else if (path < 8) {
    if (path >= cuda::gemm_gemv_variants()) return state.SkipWithError("no such variant");
    state.SetLabel(std::string("gemv ") + (path < 0 ? "default" : cuda::gemm_gemv_variant_name(path)));
    pass = [&, path] {
      cuda::gemm_bf16_gemv(g.a.data(), g.M, g.K, g.K, g.w, g.Nn, nullptr, g.c.data(), g.Nn, nullptr, path);
    };
  } else if (path == 8) {
    state.SetLabel("swap-ab default");
    pass = [&] { cuda::gemm_bf16_swap_ab(g.a.data(), g.M, g.K, g.K, g.w, g.Nn, nullptr, g.c.data(), g.Nn, nullptr); };
  } else {
    state.SetLabel("gemm()");
    pass = [&] {
      cuda::gemm(g.a.data(), g.M, g.K, g.K, g.w, cuda::WeightType::BF16, g.Nn, nullptr, g.c.data(), g.Nn, nullptr, g.Nn);
    };
  }
  time_gemm(state, g, pass, state.range(3) != 0);
}
BENCHMARK(BM_CudaGemmGemv)
    ->ArgsProduct({{1, 2, 4, 8, 16}, {0, 1, 2}, {-1, 0, 1, 2, 6, 7, 8, 9}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Each tile of the many-rows kernel forced on the same passes (arg0 M, arg1 shape, arg2 tile, 0 =
// largest): the figures the tile choice in gemm_mma.cu is checked against. Pre-pass included.
void BM_CudaGemmMmaTile(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int tile = static_cast<int>(state.range(2));
  GemmPass g(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  time_gemm(state, g, [&] {
    cuda::gemm_bf16_mma_tile(tile, g.a.data(), g.M, g.K, g.K, g.w, g.Nn, g.Nn, nullptr, g.c.data(), g.Nn, nullptr);
  });
}
BENCHMARK(BM_CudaGemmMmaTile)
    ->ArgsProduct({{64, 128, 512, 4096}, {0, 1, 2}, {0, 1, 2, 3}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The wgmma/TMA many-rows kernel's tiles forced on the same passes (arg0 M, arg1 shape, arg2 tile,
// the label names it; pre-pass included), beside BM_CudaGemmMmaTile's mma.sync tiles: one filter
// ('BM_CudaGemm(Wgmma|MmaTile)/(128|512|4096)/') times both.
void BM_CudaGemmWgmma(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int tile = static_cast<int>(state.range(2));
  if (tile >= cuda::gemm_wgmma_tile_count()) {
    state.SkipWithError("no such tile");
    return;
  }
  state.SetLabel(cuda::gemm_wgmma_tile_name(tile));
  GemmPass g(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  time_gemm(state, g, [&] {
    cuda::gemm_bf16_wgmma_tile(tile, g.a.data(), g.M, g.K, g.K, g.w, g.Nn, nullptr, g.c.data(), g.Nn, nullptr);
  });
}
BENCHMARK(BM_CudaGemmWgmma)
    ->ArgsProduct({{128, 512, 4096, 16384}, {0, 1, 2}, benchmark::CreateDenseRange(0, 4, 1)})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The many-rows GEMM as gemm() plans it (its tiles and any row cut), with each way's tiles side by
// side (arg0 M, arg1 shape, arg2 way: 0 session 9's tiles, 1 gemm()'s since session 11 (way 2 before
// session 12); the label names it and marks gemm()'s default), so a ratio comes from one run.
// arg3 1: A's bf16 copy is made once before the timing (gemm_rounded's way in, as the model's fused
// norms hand it over), so the time is the GEMM's alone, as cuBLAS's bf16 reference is; 0: the pre-pass
// is timed too.
void BM_CudaGemmWay(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int way = static_cast<int>(state.range(2));
  if (way >= cuda::gemm_wgmma_way_count()) {
    state.SkipWithError("no such way");
    return;
  }
  const bool is_default = way == cuda::gemm_wgmma_default_way();
  state.SetLabel(std::string(cuda::gemm_wgmma_way_name(way)) + (is_default ? " (default)" : "") +
                 (state.range(3) ? ", A bf16 before" : ", pre-pass timed"));
  GemmPass g(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  cuda::DeviceBuffer<uint16_t> a16;
  if (state.range(3)) {  // rounded to nearest even on the host, as the pre-pass and the fused norms round
    const std::vector<float> a = g.a.download(std::size_t(g.M) * g.K);
    std::vector<uint16_t> h(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) h[i] = f32_to_bf16(a[i]);
    a16.upload(h);
  }
  time_gemm(state, g, [&] {
    auto pass = [&] {
      cuda::gemm_bf16_wgmma_way(way, g.a.data(), g.M, g.K, g.K, g.w, g.Nn, nullptr, g.c.data(), g.Nn, nullptr);
    };
    if (state.range(3)) cuda::with_rounded_rows(g.a.data(), g.M, g.K, a16.data(), pass);
    else pass();
  });
}
BENCHMARK(BM_CudaGemmWay)
    ->ArgsProduct({{4096, 16384}, {0, 1, 2}, {0, 1}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Device-to-device copy: the bandwidth the weight-read floor is measured against.
void BM_CudaCopy(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const std::size_t n = std::size_t(1) << 30;
  cuda::DeviceBuffer<uint8_t> a(n), b(n);
  a.zero();
  Timer t;
  for (auto _ : state) {
    t.start();
    cudaMemcpy(b.data(), a.data(), n, cudaMemcpyDeviceToDevice);
    state.SetIterationTime(t.stop_s());
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(n));  // read + write
}
BENCHMARK(BM_CudaCopy)->UseManualTime()->Unit(benchmark::kMicrosecond);

// End to end on builtin:mamba2-2.7b (loaded once): arg0 batch, arg1 0 = plain, 1 = exact, arg2 1 =
// CUDA graphs (the default), 0 = eager (--enforce-eager), arg3 1 = the fused launches (the default),
// 0 = every step in its own launch (set_fuse_kernels), arg4 1 = programmatic launches of the small
// kernels (the default; exact mode's one-row decode among them up to 16 sequences), 0 = ordinary
// launches (set_programmatic_launch), 2..4 = exact mode's one-row decode as
// set_programmatic_exact_decode_mode(arg4 − 1): 2 programmatic with its L2 requests before the wait, 3
// without, 4 by batch (the default, as 1); the same bits every way.
// A decode step of `batch` sequences (after a 16-token prefill each), wall time of Model::forward
// (its logits copy synchronises), CPU launch overhead included: what graphs remove. The first decode
// step (the graph's capture) is not timed.
model::Model& big_model() { return bench::mamba2_2p7b(); }

void BM_CudaModelDecode(benchmark::State& state) {
  if (!have_gpu(state)) return;
  model::Model& m = big_model();
  const int batch = static_cast<int>(state.range(0));
  const bool exact = state.range(1) != 0, graphs = state.range(2) != 0;
  backend_cuda::set_enforce_eager(m, !graphs);
  backend_cuda::set_fuse_kernels(m, state.range(3) != 0);
  cuda::set_programmatic_launch(state.range(4) != 0);
  cuda::set_gemm_early(static_cast<unsigned>(state.range(5)));
  cuda::set_programmatic_exact_decode_mode(state.range(4) >= 2 ? static_cast<int>(state.range(4)) - 1
                                                                : state.range(4) == 1 ? cuda::kProgrammaticDecodeAuto : 0);
  bench::DecodeRun run = bench::prepare_decode(m, exact, batch);
  cache::ModelCache& mc = run.mc;
  model::ForwardBatch& d = run.d;
  float* const logits = run.logits.get();
  const model::ScanMode mode = run.mode;
  int64_t& pos = run.pos;
  const int64_t replays0 = backend_cuda::cuda_graph_stats(m).replays;
  bench::time_decode_steps(state, m, run);
  state.SetItemsProcessed(state.iterations() * batch);  // tokens
  // The share of timed steps that replayed a graph (1 with graphs on, 0 eager): the path is the one asked for.
  state.counters["graph"] = static_cast<double>(backend_cuda::cuda_graph_stats(m).replays - replays0) /
                            static_cast<double>(std::max<int64_t>(1, state.iterations()));
  // Then a few eager steps with a StepProfile: the mixer's GEMM / conv / SSD / norm shares of a step
  // (mamba_gemm_pct, mamba_conv_pct, mamba_ssd_pct, mamba_norm_pct; other_pct: embedding, norms, lm_head).
  backend_cuda::StepProfile prof;
  backend_cuda::set_step_profile(m, &prof);
  for (int k = 0; k < 5; ++k, ++pos) {
    for (auto& q : d.seqs) q.start = pos;
    m.forward(d, mc, mode, logits);
  }
  backend_cuda::set_step_profile(m, nullptr);
  bench::report_step_shares(state, prof);
  backend_cuda::set_enforce_eager(m, false);
  backend_cuda::set_fuse_kernels(m, true);
  cuda::set_programmatic_launch(true);
  cuda::set_gemm_early(cuda::kGemmEarlyDefault);
  cuda::set_programmatic_exact_decode_mode(cuda::kProgrammaticDecodeAuto);
}
// gemm: the decode GEMMs' early-start flags (ops.h's GemmEarly; 35 = weights + release + conv state, the
// default).
// (Batches 1 and 64 with graphs: the early-start registration below.)
BENCHMARK(BM_CudaModelDecode)
    ->ArgsProduct({{256}, {0, 1}, {0, 1}, {1}, {1}, {cuda::kGemmEarlyDefault}})
    ->ArgsProduct({{1, 64}, {0, 1}, {0}, {1}, {1}, {cuda::kGemmEarlyDefault}})
    ->ArgNames({"batch", "exact", "graphs", "fused", "pdl", "gemm"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
// The exact decode kernel launched programmatically at every batch (pdl:2, pdl:3 without its L2
// requests), graphs on; pdl:1 (the default) is in the registrations above and below.
BENCHMARK(BM_CudaModelDecode)
    ->ArgsProduct({{1, 64, 256}, {1}, {1}, {1}, {2, 3}, {cuda::kGemmEarlyDefault}})
    ->ArgNames({"batch", "exact", "graphs", "fused", "pdl", "gemm"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
// The persistent decode step (persistent_decode.h) against the launches it replaces, batch 1, graphs on,
// plain or exact mode, fp32 / bf16 state: arg persistent = cuda::PersistentMode (0 the launches, 1 the
// step, 2 the step with its L2 requests: out_proj's weights past the ring, the next in_proj's first
// ring). x_floor: the step over the weights' read time (BM_CudaStreamFloor's bytes at copy_bandwidth());
// persistent: the share of timed steps that took it (0 where the device cannot run it).
void BM_CudaPersistentDecode(benchmark::State& state) {
  if (!have_gpu(state)) return;
  model::Model& m = big_model();
  const bool exact = state.range(1) != 0;
  const DType dt = state.range(2) != 0 ? DType::BF16 : DType::F32;
  const bool trace = state.range(3) != 0;
  cuda::set_persistent_decode(static_cast<int>(state.range(0)) | (trace ? cuda::kPersistentTrace : 0));
  backend_cuda::set_enforce_eager(m, false);
  bench::DecodeRun run = bench::prepare_decode(m, exact, 1, dt);
  const int64_t taken0 = backend_cuda::cuda_graph_stats(m).persistent_replays;
  const double step = bench::time_decode_steps(state, m, run);
  const double iters = static_cast<double>(std::max<int64_t>(1, state.iterations()));
  const std::size_t bytes = kFloorLayers * (floor_bytes(0) + floor_bytes(1)) + floor_bytes(2);
  state.counters["x_floor"] = step / (static_cast<double>(bytes) / copy_bandwidth());
  state.counters["persistent"] = static_cast<double>(backend_cuda::cuda_graph_stats(m).persistent_replays - taken0) /
                                 iters;
  if (trace) {  // µs a layer: each phase's mean over the blocks, and its span (first block in, last out)
    const cuda::PersistentTrace tr = cuda::persistent_trace_read(m.cache_spec().num_mamba_layers);
    const char* names[] = {"norm", "in_proj", "bar1", "ssm", "bar2", "gnorm", "out_proj", "bar3"};
    for (int p = 0; p + 1 < cuda::kTracePoints; ++p) {
      state.counters[names[p]] = tr.mean_us[p];
      state.counters[std::string("span_") + names[p]] = tr.slowest_us[p];
    }
  }
  cuda::set_persistent_decode(cuda::kPersistentDecodeDefault);
}
BENCHMARK(BM_CudaPersistentDecode)
    ->ArgsProduct({{0, 1, 2}, {0, 1}, {0, 1}, {0}})
    ->ArgsProduct({{1, 2}, {0, 1}, {1}, {1}})  // where the step's time goes (the trace's clock reads)
    // with kPersistentSmallL2 (16) on ring, and 16, kPersistentEvictFirst (32), both (48) on next-l2
    ->ArgsProduct({{1 | 16, 2 | 16, 2 | 32, 2 | 48}, {0, 1}, {1}, {0, 1}})
    ->ArgNames({"persistent", "exact", "bf16", "trace"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// What the fused and the programmatic launches each save (issue 11): graphs on, one or both off (and
// with them the GEMMs' early start, which needs programmatic launches).
BENCHMARK(BM_CudaModelDecode)
    ->Args({1, 0, 1, 1, 0, 0})->Args({1, 1, 1, 1, 0, 0})->Args({64, 0, 1, 1, 0, 0})->Args({64, 1, 1, 1, 0, 0})
    ->Args({1, 0, 1, 0, 0, 0})->Args({1, 1, 1, 0, 0, 0})->Args({64, 0, 1, 0, 0, 0})->Args({64, 1, 1, 0, 0, 0})
    ->ArgNames({"batch", "exact", "graphs", "fused", "pdl", "gemm"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
// The GEMMs' early start against main's launches in one run (issue 11): gemm 0 = main's ordinary GEMM
// launches; 1 weights before the wait; 3 + the early release; 7 + the L2 prefetch of the next ring;
// 11 = 3 + the norms' release before their wait; 19 = 3 + in_proj's tail prefetching out_proj's weights
// into L2; 35 = 3 + the conv's state read before its wait (the default); 67 = 3 + the lagged mma.sync
// consumer up to 16 rows; 99 = 35 + lag; 103 = 99 + the L2 prefetch of the next ring; 107 = 99 + L2 +
// norms. Graphs, fused and programmatic launches on. (Session 11's first runs at batch 1: 11 = 3 + norms
// and 19 = 3 + next were slower than 3.)
BENCHMARK(BM_CudaModelDecode)
    ->ArgsProduct({{1, 64}, {0, 1}, {1}, {1}, {1}, {0, 3, 35, 67, 99, 103, 107}})
    ->ArgsProduct({{256}, {0, 1}, {1}, {1}, {1}, {0}})  // against the default's b256 rows above (session 11
                                                        // compared the early start at b1 and b64 only)
    ->ArgNames({"batch", "exact", "graphs", "fused", "pdl", "gemm"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
// Session 13: 1059 = 35 + kGemmMmaBoxByBox (gemm_swap_ab.h): the decode GEMMs up to 16 rows on session 12's
// box-by-box mma.sync consumer instead of the grouped one (the default's rows above: gemm:35).
BENCHMARK(BM_CudaModelDecode)
    ->ArgsProduct({{1}, {0, 1}, {1}, {1}, {1}, {cuda::kGemmEarlyDefault | cuda::kGemmMmaBoxByBox}})
    ->ArgNames({"batch", "exact", "graphs", "fused", "pdl", "gemm"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
// Session 38: 16777251 = 35 + kGemmRowTileSplit (gemm_swap_ab.h): a decode GEMM's rows split into row tiles
// while its grid has fewer blocks than the SMs (out_proj's 40 blocks at 64 and 256 rows), against gemm:35.
BENCHMARK(BM_CudaModelDecode)
    ->ArgsProduct({{32, 64, 256}, {0, 1}, {1}, {1}, {1}, {cuda::kGemmEarlyDefault | cuda::kGemmRowTileSplit}})
    ->ArgsProduct({{24, 32}, {0, 1}, {1}, {1}, {1}, {cuda::kGemmEarlyDefault}})
    // 33554467 = 35 + kGemmWgmmaFrom17Rows: out_proj from 17 to 32 rows on c64-2blk (before session 38).
    ->ArgsProduct({{24, 32}, {0, 1}, {1}, {1}, {1}, {cuda::kGemmEarlyDefault | cuda::kGemmWgmmaFrom17Rows}})
    // 67108899 = 35 + kGemmMmaTo64Rows: out_proj from 33 to 64 rows on it too, two row tiles of 32.
    ->ArgsProduct(
        {{48, 64}, {0, 1}, {1}, {1}, {1}, {cuda::kGemmEarlyDefault, cuda::kGemmEarlyDefault | cuda::kGemmMmaTo64Rows}})
    // 134217763 = 35 + kGemmMmaTo64RowsIn16 (session 39): from 33 to 64 rows in row tiles of 16.
    ->ArgsProduct({{48, 64}, {0, 1}, {1}, {1}, {1}, {cuda::kGemmEarlyDefault | cuda::kGemmMmaTo64RowsIn16}})
    // 268435491 = 35 + kGemmWgmmaFrom33Rows: c64-2blk from 33 to 64 rows (before session 39; the default
    // since: row tiles of 32 as two row warps of 16).
    ->ArgsProduct({{48, 64}, {0, 1}, {1}, {1}, {1}, {cuda::kGemmEarlyDefault | cuda::kGemmWgmmaFrom33Rows}})
    // 536870947 = 35 + kGemmRowWarpsTo128Rows (session 39): 65-128 rows on the row warps too.
    ->ArgsProduct({{96, 128},
                   {0, 1},
                   {1},
                   {1},
                   {1},
                   {cuda::kGemmEarlyDefault, cuda::kGemmEarlyDefault | cuda::kGemmRowWarpsTo128Rows}})
    ->ArgNames({"batch", "exact", "graphs", "fused", "pdl", "gemm"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// One decode step of run's batch a iteration, wall time of Model::forward (as BM_CudaModelDecode times it).
void time_decode_steps(benchmark::State& state, model::Model& m, bench::DecodeRun& run, int batch) {
  bench::time_decode_steps(state, m, run);
  state.SetItemsProcessed(state.iterations() * batch);  // tokens
}

// Exact decode steps with the scan's products on tensor cores (--scan-products) beside the fp32 walk's, same run:
// arg0 batch, arg1 the products (0 float32, 1 bfloat16, 2 split), arg2 the one-row decode kernels' launch
// (set_programmatic_exact_decode_mode: 0 ordinary, 1 programmatic at every batch, 3 by batch, the default).
// Exact mode's default fp32 state; graphs on; wall time of Model::forward as BM_CudaModelDecode.
void BM_CudaModelDecodeProducts(benchmark::State& state) {
  if (!have_gpu(state)) return;
  model::Model& m = big_model();
  const int batch = static_cast<int>(state.range(0));
  cuda::set_programmatic_exact_decode_mode(static_cast<int>(state.range(2)));
  bench::DecodeRun run =
      bench::prepare_decode(m, true, batch, std::nullopt, true, static_cast<cuda::ScanProducts>(state.range(1)));
  time_decode_steps(state, m, run, batch);
  cuda::set_programmatic_exact_decode_mode(cuda::kProgrammaticDecodeAuto);
}
BENCHMARK(BM_CudaModelDecodeProducts)
    ->ArgsProduct({{1, 64, 256}, {0, 1, 2}, {cuda::kProgrammaticDecodeAuto}})
    ->ArgsProduct({{1}, {1, 2}, {0}})  // session 45: what the tensor-core decode's programmatic launch is worth
    ->ArgsProduct({{64, 256}, {0, 1, 2}, {1}})
    ->ArgNames({"batch", "products", "pdl"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Exact against plain at the same state dtype (issue 10's comparison; BM_CudaModelDecode runs each mode's
// default: plain bf16, exact fp32): arg0 batch, arg1 0 plain / 1 exact, arg2 0 fp32 / 1 bf16 state. Default
// launches, graphs on; wall time of Model::forward as BM_CudaModelDecode.
void BM_CudaModelDecodeStateDtype(benchmark::State& state) {
  if (!have_gpu(state)) return;
  model::Model& m = big_model();
  const int batch = static_cast<int>(state.range(0));
  bench::DecodeRun run =
      bench::prepare_decode(m, state.range(1) != 0, batch, state.range(2) != 0 ? DType::BF16 : DType::F32);
  time_decode_steps(state, m, run, batch);
}
BENCHMARK(BM_CudaModelDecodeStateDtype)
    ->ArgsProduct({{1, 64, 256}, {0, 1}, {0, 1}})
    ->ArgNames({"batch", "exact", "bf16"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Session 24: the logits' copy to the host, into the model's page-locked memory (Model::host_floats, what
// the engine and the benchmarks above use) or ordinary pre-faulted memory (before): arg0 batch, arg1 0
// plain / 1 exact, arg2 1 page-locked / 0 pageable. Default launches, graphs on; wall time of forward().
void BM_CudaModelDecodeLogits(benchmark::State& state) {
  if (!have_gpu(state)) return;
  model::Model& m = big_model();
  const int batch = static_cast<int>(state.range(0));
  bench::DecodeRun run = bench::prepare_decode(m, state.range(1) != 0, batch, std::nullopt, state.range(2) != 0);
  time_decode_steps(state, m, run, batch);
}
BENCHMARK(BM_CudaModelDecodeLogits)
    ->ArgsProduct({{1, 64, 256}, {0, 1}, {0, 1}})
    ->ArgNames({"batch", "exact", "pinned"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Prefill of 8 × 2048 tokens on builtin:mamba2-2.7b (arg: 0 plain, 1 exact), last-row logits only.
void BM_CudaModelPrefill(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const model::Model& m = big_model();
  const bool exact = state.range(0) != 0;
  const int batch = 8, len = 2048;
  cache::ModelCache mc =
      bench::bench_cache(m, exact, batch, 0, std::nullopt, static_cast<cuda::ScanProducts>(state.range(4)));
  model::ForwardBatch b;
  for (int s = 0; s < batch; ++s) {
    mc.allocate();
    for (int i = 0; i < len; ++i) b.tokens.push_back((s * 131 + i * 17) % 50000);
    b.seqs.push_back({s, 0, len});
    b.logit_rows.push_back(s * len + len - 1);
  }
  std::vector<float> logits(std::size_t(batch) * m.vocab_size());
  const model::ScanMode mode = exact ? model::ScanMode::Exact : model::ScanMode::Plain;
  cuda::set_conv_row_tiles(state.range(1) != 0);
  cuda::set_copy_only_norms(state.range(2) != 0);
  cuda::set_ssd_pipe_auto(static_cast<cuda::SsdPrefill>(state.range(3)));
  for (auto _ : state) {
    for (int s = 0; s < batch; ++s) mc.set_position(s, 0);
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(b, mc, mode, logits.data());
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.SetItemsProcessed(state.iterations() * batch * len);
  // One more pass with a StepProfile: the GEMM / conv / SSD / norm shares of a prefill pass.
  backend_cuda::StepProfile prof;
  backend_cuda::set_step_profile(big_model(), &prof);
  for (int s = 0; s < batch; ++s) mc.set_position(s, 0);
  m.forward(b, mc, mode, logits.data());
  backend_cuda::set_step_profile(big_model(), nullptr);
  cuda::set_conv_row_tiles(true);
  cuda::set_copy_only_norms(true);
  cuda::set_ssd_pipe_auto(cuda::kSsdPipeDefault);
  bench::report_step_shares(state, prof);
}
// arg0 exact, arg1 the conv in row tiles (1, the default) or a thread a row and channel (0), arg2 the
// norms before the GEMMs write only the bf16 copy the GEMMs read (1, the default) or their fp32 output too,
// arg3 exact mode's pipelined scan walk (ssd_prefill.h: 664, 674 its coefficients from a table pass, 684 also
// C and B laid out by quarter before it; cuda::kSsdPipeDefault is the default), arg4 the scan's products on
// tensor cores instead of the fp32 walk (--scan-products: 0 float32, 1 bfloat16, 2 split; exact only).
BENCHMARK(BM_CudaModelPrefill)
    ->ArgsProduct({{0, 1}, {1}, {1}, {664}, {0}})
    ->ArgsProduct({{1}, {1}, {1}, {674, 684}, {0}})
    ->ArgsProduct({{1}, {1}, {1}, {684}, {1, 2}})
    ->ArgsProduct({{0, 1}, {1}, {0}, {664}, {0}})
    ->ArgsProduct({{0, 1}, {0}, {0}, {664}, {0}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace parity

BENCHMARK_MAIN();

namespace parity {
namespace {

// T tokens each routed to k of E experts at random (seed 3): the experts' row offsets [E + 1] in
// expert order, as the MoE's grouping leaves them, and the most rows any expert got.
struct RandomRouting {
  std::vector<int32_t> offsets;
  int max_rows = 0;
};
RandomRouting random_routing(int T, int E, int k) {
  std::mt19937_64 g(3);
  std::vector<int> count(E, 0);
  for (int t = 0; t < T; ++t) {
    std::vector<int> ids(E);
    for (int e = 0; e < E; ++e) ids[e] = e;
    std::shuffle(ids.begin(), ids.end(), g);
    for (int j = 0; j < k; ++j) ++count[ids[j]];
  }
  RandomRouting r;
  r.offsets.assign(E + 1, 0);
  for (int e = 0; e < E; ++e) {
    r.offsets[e + 1] = r.offsets[e] + count[e];
    r.max_rows = std::max(r.max_rows, count[e]);
  }
  return r;
}

// The operands of an expert GEMM benchmark: E experts' [N][K] bf16 weights (zeros: the time does not
// depend on them), the routed rows of A, C, and the routing's offsets on the device.
struct ExpertGemm {
  ExpertGemm(int T, int E, int k, int K, int N) {
    const RandomRouting route = random_routing(T, E, k);
    max_rows = route.max_rows;
    rows = route.offsets[E];
    stride = int64_t(N) * K;
    a.upload(rnd(std::size_t(rows) * K, 4, -1, 1));
    c.resize(std::size_t(rows) * N);
    w.resize(std::size_t(E) * N * K);
    w.zero();
    offsets.upload(route.offsets);
  }
  int max_rows = 0, rows = 0;
  int64_t stride = 0;
  cuda::DeviceBuffer<float> a, c;
  cuda::DeviceBuffer<uint16_t> w;
  cuda::DeviceBuffer<int32_t> offsets;
};

// The MoE's expert GEMMs at decode size (granite-h-tiny: 64 experts, top-6, hidden 1536, width 512; 64
// tokens routed at random, so ~6 rows per expert): arg0 0 = the up projection (K 1536, N 1024), 1 = the
// down projection (K 512, N 1536); arg1 the path: 0..5 the few-rows kernel's grouped variants, -1 the mma
// grouped tiles, -2 the WMMA grouped tiles (all give the same bits; gemm_grouped takes the few-rows
// kernel's default here).
void BM_CudaMoeGroupedGemm(benchmark::State& state) {
  if (cuda::device_count() == 0) {
    state.SkipWithError("no CUDA device: GPU benchmark not run");
    return;
  }
  const int K = state.range(0) == 0 ? 1536 : 512, N = state.range(0) == 0 ? 1024 : 1536, path = state.range(1);
  const int E = 64, T = 64, k = 6;
  ExpertGemm x(T, E, k, K, N);
  auto pass = [&] {
    if (path >= 0)
      cuda::gemm_grouped_bf16_skinny(x.a.data(), K, x.offsets.data(), E, x.max_rows, K, x.w.data(), x.stride, N,
                                     x.c.data(), N, nullptr, path);
    else  // max_rows is only a bound: 65 sends gemm_grouped past its few-rows path
      cuda::gemm_grouped(x.a.data(), K, x.offsets.data(), E, 65, K, x.w.data(), cuda::WeightType::BF16, x.stride, N,
                         x.c.data(), N, nullptr, path == -1 ? x.rows : 0);
  };
  pass();
  Timer t;
  for (auto _ : state) {
    t.start_device();
    pass();
    state.SetIterationTime(t.stop_s());
  }
  state.SetLabel(path >= 0 ? "few-rows variant" : path == -1 ? "mma grouped tiles" : "wmma grouped tiles");
}
BENCHMARK(BM_CudaMoeGroupedGemm)
    ->ArgsProduct({{0, 1}, {-2, -1, 0, 1, 2, 3, 4, 5}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The same expert GEMMs at prefill size: 4096 tokens routed at random (~384 rows per expert). arg0 the
// projection as above; arg1 -1 the mma grouped tiles, t >= 0 the wgmma kernel's tile t (label: its
// name). Pre-pass included where the path has one. Reports TFLOPs over the routed rows.
void BM_CudaMoePrefillGemm(benchmark::State& state) {
  if (cuda::device_count() == 0) {
    state.SkipWithError("no CUDA device: GPU benchmark not run");
    return;
  }
  const int K = state.range(0) == 0 ? 1536 : 512, N = state.range(0) == 0 ? 1024 : 1536;
  const int path = static_cast<int>(state.range(1));
  if (path >= cuda::gemm_wgmma_tile_count()) {
    state.SkipWithError("no such tile");
    return;
  }
  const int E = 64, T = 4096, k = 6;
  ExpertGemm x(T, E, k, K, N);
  auto pass = [&] {
    if (path < 0)
      cuda::gemm_grouped_bf16_mma(x.a.data(), K, x.offsets.data(), E, x.max_rows, x.rows, K, x.w.data(), x.stride, N,
                                  x.c.data(), N, nullptr);
    else
      cuda::gemm_grouped_bf16_wgmma_tile(path, x.a.data(), K, x.offsets.data(), E, x.rows, K, x.w.data(), x.stride,
                                         N, x.c.data(), N, nullptr);
  };
  pass();
  Timer t;
  double total = 0;
  for (auto _ : state) {
    t.start_device();
    pass();
    const double sec = t.stop_s();
    state.SetIterationTime(sec);
    total += sec;
  }
  state.counters["TFLOPs"] = 2.0 * x.rows * N * K / (total / std::max<int64_t>(1, state.iterations())) / 1e12;
  state.SetLabel(path < 0 ? "mma grouped tiles" : cuda::gemm_wgmma_tile_name(path));
}
BENCHMARK(BM_CudaMoePrefillGemm)
    ->ArgsProduct({{0, 1}, {-1, 0, 1, 2, 3, 4}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace parity
