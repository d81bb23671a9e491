// SSD scan and SSU step on the mamba2-130m mixer shape (24 heads × 64, d_state 128, 1 group,
// chunk 256): prefill; the chunk-anchored replay decode (the row routine over the re-fed rows of
// the chunk, the whole chunk folded in the completing call) at several positions inside the chunk,
// and the plain-mode SSU step it is compared with (the exact grid's decode: bench_exact_overhead.cpp). items_per_second counts tokens of one
// layer.
//
//   ./parity_bench --benchmark_filter='Ssd|Ssu'
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "bench_support.h"
#include "kernels/isa.h"
#include "kernels/math.h"
#include "kernels/ssd.h"
#include "kernels/ssd_grid.h"

namespace {

using parity::bench::ThreadScope;
using parity::bench::threads_arg;

using namespace parity::kernels;

const SsdShape kShape130m{24, 64, 1, 128, 256};

struct Inputs {
  SsdShape shape;
  int n;
  std::vector<float> x, dt, A, B, C, D, s0;
};

// Mamba2-like statistics (A in [-16, -1], softplus(dt_bias) in [1e-3, 1e-1]); the timing does
// not depend on the values, but denormals or infinities would, and these produce neither.
Inputs make_inputs(const SsdShape& sh, int n) {
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  Inputs in{sh, n, {}, {}, {}, {}, {}, {}, {}};
  const int H = sh.nheads;
  in.A.resize(H);
  in.D.assign(H, 1.0f);
  std::vector<float> bias(H);
  for (int h = 0; h < H; ++h) {
    in.A[h] = -(1.0f + 15.0f * ud(rng));
    bias[h] = static_cast<float>(std::log(std::expm1(std::pow(10.0, -3.0 + 2.0 * ud(rng)))));
  }
  in.dt.resize(size_t(n) * H);
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < H; ++h) in.dt[size_t(t) * H + h] = softplus_f(bias[h] + 0.5f * nd(rng));
  auto fill = [&](std::vector<float>& v, size_t count) {
    v.resize(count);
    for (auto& e : v) e = nd(rng);
  };
  fill(in.x, size_t(n) * H * sh.headdim);
  fill(in.B, size_t(n) * sh.ngroups * sh.dstate);
  fill(in.C, size_t(n) * sh.ngroups * sh.dstate);
  fill(in.s0, size_t(sh.state_elems()));
  return in;
}

// Exact-mode prefill: all rows produce output; the chunk states and the final state are kept,
// as the cache needs the last boundary state and the partial-chunk state.
void BM_SsdPrefill(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  ThreadScope threads(threads_arg(state));
  const Inputs in = make_inputs(kShape130m, n);
  const SsdShape& sh = in.shape;
  std::vector<float> y(size_t(n) * sh.nheads * sh.headdim);
  std::vector<float> chunks(size_t(n / sh.chunk_size) * sh.state_elems() + 1), fin(size_t(sh.state_elems()));
  for (auto _ : state) {
    ssd_scan(sh, in.x.data(), in.dt.data(), in.A.data(), in.B.data(), in.C.data(), in.D.data(), n, 0, in.s0.data(),
             y.data(), chunks.data(), fin.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["threads"] = num_threads();
}
BENCHMARK(BM_SsdPrefill)->ArgNames({"n", "threads"})->Args({1024, 1})->Args({1024, 0})->Args({256, 1})->Args({256, 0})
    ->Unit(benchmark::kMicrosecond);

// Exact-mode prefill on the exact grid as the model runs it (x read in place from rows of the conv
// output
// n tokens from position 0 into an fp32 state, cells of `cell` rows, staggered. GFLOP/s counts
// 4·P·N multiply-adds a row and head (C·S and the fold), the work that does not shrink with the cell.
void BM_SsdGridPrefill(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), cell = static_cast<int>(state.range(1));
  ThreadScope threads(threads_arg(state, 2));
  const Inputs in = make_inputs(kShape130m, n);
  const SsdShape& sh = in.shape;
  const int64_t HP = int64_t(sh.nheads) * sh.headdim, stride = HP + 2 * sh.dstate + 24;
  std::vector<float> xs(size_t(n) * size_t(stride));
  for (int t = 0; t < n; ++t) std::copy_n(in.x.data() + t * HP, HP, xs.data() + t * stride);
  std::vector<float> y(size_t(n) * HP), st(size_t(sh.state_elems()));
  const ExactGrid grid{cell, true, sh.nheads};
  for (auto _ : state) {
    st = in.s0;
    ssd_scan_grid(sh, grid, xs.data(), in.dt.data(), in.A.data(), in.B.data(), in.C.data(), in.D.data(), 0, n, 0,
                  GridState{st.data(), nullptr}, y.data(), stride);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * n * HP * sh.dstate, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = num_threads();
}
BENCHMARK(BM_SsdGridPrefill)->ArgNames({"n", "cell", "threads"})
    ->ArgsProduct({{512}, {4, 8, 16, 32}, {1, 0}})
    ->Unit(benchmark::kMicrosecond);

// The earlier exact decode without a running state: rows 0..pos of the chunk from the boundary
// state, output for row pos only, and at pos = chunk-1 the whole chunk folded in this one call
// for the new boundary state (the spike the running state removes).
void BM_SsdReplayDecode(benchmark::State& state) {
  const int pos = static_cast<int>(state.range(0));
  ThreadScope threads(threads_arg(state));
  const Inputs in = make_inputs(kShape130m, pos + 1);
  const SsdShape& sh = in.shape;
  const bool completes = pos + 1 == sh.chunk_size;
  std::vector<float> y(size_t(sh.nheads) * sh.headdim), fin(size_t(sh.state_elems()));
  const size_t cstride = size_t(sh.ngroups) * sh.dstate;
  for (auto _ : state) {
    ssd_scan(sh, in.x.data(), in.dt.data(), in.A.data(), in.B.data(), in.C.data() + pos * cstride, in.D.data(),
             pos + 1, pos, in.s0.data(), y.data(), nullptr, completes ? fin.data() : nullptr);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["threads"] = num_threads();
}
BENCHMARK(BM_SsdReplayDecode)->ArgNames({"pos", "threads"})
    ->Args({1, 1})->Args({64, 1})->Args({128, 1})->Args({255, 1})
    ->Args({1, 0})->Args({64, 0})->Args({128, 0})->Args({255, 0})
    ->Unit(benchmark::kMicrosecond);

// Plain-mode decode: one recurrent update of the whole layer state.
void BM_SsuStep(benchmark::State& state) {
  ThreadScope threads(threads_arg(state));
  const Inputs in = make_inputs(kShape130m, 1);
  const SsdShape& sh = in.shape;
  std::vector<float> S = in.s0, y(size_t(sh.nheads) * sh.headdim);
  for (auto _ : state) {
    ssu_step(sh, in.x.data(), in.dt.data(), in.A.data(), in.B.data(), in.C.data(), in.D.data(), S.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["threads"] = num_threads();
}
BENCHMARK(BM_SsuStep)->ArgNames({"unused", "threads"})->Args({0, 1})->Args({0, 0})->Unit(benchmark::kMicrosecond);

}  // namespace
