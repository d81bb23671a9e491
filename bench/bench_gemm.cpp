// GEMM throughput on the mamba2-130m shapes, next to the two ceilings that bound it on this
// machine: a register-only FMA loop (compute peak) and a streaming read (memory bandwidth).
// Counters: FLOP/s and B/s (weights + A + C bytes), and pct_peak / pct_bw against the ceilings
// measured in the same process with the same thread count.
//
//   ./parity_bench --benchmark_filter='Gemm|Peak|Bandwidth'
//
// Weights are cycled through enough packed copies (>= 1 GiB) that every call reads them from
// memory, as a decode step does when the whole model streams through the caches.
//
// Clocks: single-thread cases are timed with the thread's CPU time, so that other processes on
// a shared machine do not count against the kernel; multi-thread cases (and their ceilings) use
// wall time, which is all one can say about a team of threads.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstring>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "common/aligned.h"
#include "common/dtype.h"
#include "kernels/gemm.h"
#include "kernels/isa.h"

namespace {

using parity::AlignedBuffer;
using parity::DType;
using namespace parity::kernels;

int max_threads() { return omp_get_max_threads(); }

double now(int threads) {
  if (threads == 1) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---------------------------------------------------------------------------------------------
// Ceilings

// Keeps a vector result observable (cheaper on warnings than _mm512_reduce_add_ps under GCC 12).
__attribute__((target("avx512f"))) float sink512(__m512 v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  return t[0] + t[15];
}

// 16 independent accumulators: enough to cover FMA latency × throughput on current x86 cores.
__attribute__((target("avx512f"))) __attribute__((noinline)) float fma_loop_512(long iters) {
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_set1_ps(0.001f * j);
  const __m512 m = _mm512_set1_ps(0.9999f), a = _mm512_set1_ps(1e-4f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, a);
  }
  __m512 s = acc[0];
  for (int j = 1; j < 16; ++j) s = _mm512_add_ps(s, acc[j]);
  return sink512(s);
}

__attribute__((target("avx2,fma"))) __attribute__((noinline)) float fma_loop_256(long iters) {
  __m256 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(0.001f * j);
  const __m256 m = _mm256_set1_ps(0.9999f), a = _mm256_set1_ps(1e-4f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, a);
  }
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  alignas(32) float t[8];
  _mm256_store_ps(t, s);
  return t[0] + t[7];
}

// FLOPs of one fma_loop iteration, for the best instruction set of this CPU.
double fma_loop_flops(long iters) {
  if (detected_isa() == Isa::Avx512) return 2.0 * 16 * 16 * static_cast<double>(iters);
  if (detected_isa() == Isa::Avx2) return 2.0 * 12 * 8 * static_cast<double>(iters);
  return 0.0;
}

float fma_loop(long iters) {
  if (detected_isa() == Isa::Avx512) return fma_loop_512(iters);
  if (detected_isa() == Isa::Avx2) return fma_loop_256(iters);
  return 0.0f;
}

__attribute__((target("avx512f"))) __attribute__((noinline)) float read_512(const float* p, std::size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (std::size_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return sink512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

__attribute__((target("avx2"))) __attribute__((noinline)) float read_256(const float* p, std::size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (std::size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return t[0];
}

float read_stream(const float* p, std::size_t n) {
  if (detected_isa() == Isa::Avx512) return read_512(p, n);
  if (detected_isa() == Isa::Avx2) return read_256(p, n);
  float s = 0.0f;
  for (std::size_t i = 0; i < n; i += 16) s += p[i];
  return s;
}

constexpr std::size_t kStreamBytes = std::size_t(1) << 30;  // far beyond any last-level cache

const AlignedBuffer<float>& stream_buffer() {
  static AlignedBuffer<float> buf = [] {
    AlignedBuffer<float> b(kStreamBytes / sizeof(float));
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = 1e-9f * static_cast<float>(i & 1023);
    return b;
  }();
  return buf;
}

// One parallel pass of `threads` threads; returns seconds. With `rate_sum`, also the sum over the
// threads of each one's own FLOP/s: on a shared host one core can run slower than the other (another
// tenant on its sibling), and then equal work per thread over the wall time reads the slower core
// times the thread count, while kernels that hand out work as threads come free use both in full.
double peak_pass(int threads, long iters, float* sink, double* rate_sum = nullptr) {
  const double t0 = now(threads);
  float s = 0.0f;
  double rates = 0.0;
  if (threads == 1) {
    s = fma_loop(iters);
  } else {
#pragma omp parallel num_threads(threads) reduction(+ : s, rates)
    {
      const auto start = std::chrono::steady_clock::now();
      s += fma_loop(iters);
      rates += fma_loop_flops(iters) / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }
  *sink += s;
  const double secs = now(threads) - t0;
  if (rate_sum) *rate_sum = threads == 1 ? fma_loop_flops(iters) / secs : rates;
  return secs;
}

double bandwidth_pass(int threads, float* sink) {
  const AlignedBuffer<float>& b = stream_buffer();
  const std::size_t n = b.size();
  const double t0 = now(threads);
  float s = 0.0f;
  if (threads == 1) {
    s = read_stream(b.data(), n);
  } else {
#pragma omp parallel num_threads(threads) reduction(+ : s)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const std::size_t chunk = (n / nt) / 64 * 64;
      s += read_stream(b.data() + chunk * t, t == nt - 1 ? n - chunk * t : chunk);
    }
  }
  *sink += s;
  return now(threads) - t0;
}

// Best of a few passes: the ceiling, not the average, is what a kernel is compared with.
double measured_peak_flops(int threads) {
  static std::map<int, double> cache;
  if (auto it = cache.find(threads); it != cache.end()) return it->second;
  const long iters = 20'000'000;
  float sink = 0.0f;
  double best = 1e30;
  for (int r = 0; r < 5; ++r) best = std::min(best, peak_pass(threads, iters, &sink));
  benchmark::DoNotOptimize(sink);
  return cache[threads] = fma_loop_flops(iters) * threads / best;
}

double measured_bandwidth(int threads) {
  static std::map<int, double> cache;
  if (auto it = cache.find(threads); it != cache.end()) return it->second;
  float sink = 0.0f;
  double best = 1e30;
  for (int r = 0; r < 5; ++r) best = std::min(best, bandwidth_pass(threads, &sink));
  benchmark::DoNotOptimize(sink);
  return cache[threads] = static_cast<double>(kStreamBytes) / best;
}

void BM_FmaPeak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const long iters = 5'000'000;
  float sink = 0.0f;
  double best_sum = 0.0;
  for (auto _ : state) {
    double rate_sum = 0.0;
    double secs = peak_pass(threads, iters, &sink, &rate_sum);
    best_sum = std::max(best_sum, rate_sum);
    state.SetIterationTime(secs);
  }
  benchmark::DoNotOptimize(sink);
  state.counters["FLOP/s"] = benchmark::Counter(fma_loop_flops(iters) * threads, benchmark::Counter::kIsIterationInvariantRate);
  // The best pass's sum of per-thread rates (peak_pass): what the prefill is compared with.
  state.counters["sum_of_threads"] = best_sum;
  state.counters["threads"] = threads;
  state.SetLabel(isa_name(detected_isa()));
}
BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(max_threads())->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_Bandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  float sink = 0.0f;
  stream_buffer();
  for (auto _ : state) state.SetIterationTime(bandwidth_pass(threads, &sink));
  benchmark::DoNotOptimize(sink);
  state.counters["B/s"] = benchmark::Counter(static_cast<double>(kStreamBytes), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}
BENCHMARK(BM_Bandwidth)->Arg(1)->Arg(max_threads())->UseManualTime()->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------------------------
// GEMM

struct WeightSet {
  std::vector<PackedWeight> copies;
  std::size_t bytes = 0;  // one copy
};

// Packed weights for (n, k, dtype), replicated to >= 1 GiB. Only one set is kept alive at a time.
const WeightSet& weights(int n, int k, DType dt) {
  static std::tuple<int, int, DType> key{-1, -1, DType::F32};
  static WeightSet set;
  if (key == std::make_tuple(n, k, dt)) return set;
  set = WeightSet{};
  std::vector<uint8_t> raw(static_cast<std::size_t>(n) * k * parity::dtype_size(dt));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (std::size_t i = 0; i < static_cast<std::size_t>(n) * k; ++i) {
    float f = nd(rng);
    if (dt == DType::F32) {
      std::memcpy(raw.data() + 4 * i, &f, 4);
    } else {
      uint16_t h = parity::f32_to_bf16(f);
      std::memcpy(raw.data() + 2 * i, &h, 2);
    }
  }
  set.copies.push_back(pack_weight(raw.data(), dt, n, k));
  set.bytes = set.copies[0].data.size();
  const std::size_t want = std::max<std::size_t>(1, (kStreamBytes + set.bytes - 1) / set.bytes);
  while (set.copies.size() < want) {
    PackedWeight c;
    c.n = n;
    c.k = k;
    c.dtype = dt;
    c.data.resize(set.bytes);
    std::memcpy(c.data.data(), set.copies[0].data.data(), set.bytes);
    set.copies.push_back(std::move(c));
  }
  key = std::make_tuple(n, k, dt);
  return set;
}

// Args: K, N, M, dtype (0 = F32, 1 = BF16), threads.
void BM_Gemm(benchmark::State& state) {
  const int k = static_cast<int>(state.range(0)), n = static_cast<int>(state.range(1)),
            m = static_cast<int>(state.range(2));
  const DType dt = state.range(3) ? DType::BF16 : DType::F32;
  const int threads = static_cast<int>(state.range(4));
  const WeightSet& ws = weights(n, k, dt);
  std::vector<float> a(static_cast<std::size_t>(m) * k), c(static_cast<std::size_t>(m) * n), bias(n, 0.01f);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  for (auto& x : a) x = ud(rng);
  const int saved = num_threads();
  const double peak = measured_peak_flops(threads), bw = measured_bandwidth(threads);
  set_num_threads(threads);
  std::size_t i = 0;
  double secs = 0.0;
  for (auto _ : state) {
    const double t0 = now(threads);
    gemm(a.data(), m, k, ws.copies[i++ % ws.copies.size()], bias.data(), c.data(), n);
    benchmark::ClobberMemory();
    const double dt = now(threads) - t0;
    state.SetIterationTime(dt);
    secs += dt;
  }
  set_num_threads(saved);
  const double flops = 2.0 * m * static_cast<double>(n) * k;
  const double bytes = static_cast<double>(ws.bytes) + 4.0 * (static_cast<double>(m) * k + static_cast<double>(m) * n);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["B/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  // Percentages of the ceilings measured with the same thread count.
  const double iters = static_cast<double>(state.iterations());
  state.counters["pct_peak"] = flops * iters / secs / peak * 100.0;
  state.counters["pct_bw"] = bytes * iters / secs / bw * 100.0;
  state.SetLabel(std::string(parity::dtype_name(dt)) + " " + isa_name(active_isa()) + " t" + std::to_string(threads));
}

void gemm_args(benchmark::internal::Benchmark* b) {
  const int shapes[][2] = {{768, 3352}, {1536, 768}, {768, 50288}};  // K → N of mamba2-130m
  std::vector<int> threads = {1};
  if (max_threads() > 1) threads.push_back(max_threads());
  for (auto& s : shapes) {
    for (int dt : {1, 0}) {
      for (int m : {1, 16, 64, 256, 512}) {
        for (int t : threads) b->Args({s[0], s[1], m, dt, t});
      }
    }
  }
  b->ArgNames({"K", "N", "M", "bf16", "thr"});
}
BENCHMARK(BM_Gemm)->Apply(gemm_args)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
