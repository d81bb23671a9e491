// Why exact decode costs what it costs late in a chunk: the SSM part of one decode step of a batch
// (24 layers of the mamba2-130m mixer shape, every sequence and layer in its own buffers, as in
// the cache) measured two ways, each interleaved plain / exact inside every iteration so that
// load on a shared machine hits both alike:
//
//   BM_DecodeSsmKernels  the real kernels: ssu_step_bf16 per sequence (plain) against
//                        ssd_decode_rows over the batch with the running fold where mamba2_scan
//                        has it (exact).
//   BM_DecodeSsmFloor    only the memory traffic those kernels cannot avoid, with no arithmetic:
//                        plain reads and rewrites its bf16 state; exact reads its fp32 boundary
//                        state and the replay x and B of rows 0..t, and the heads that fold this
//                        step read their running fold and write its destination. Each floor is
//                        what its kernel would cost if it did no arithmetic: a kernel near its floor
//                        is bound by memory, one far above it by arithmetic.
//
//   OMP_NUM_THREADS=1 build/parity_bench --benchmark_filter=DecodeSsm --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/aligned.h"
#include "decode_timing.h"
#include "kernels/ssd.h"
#include "model/mamba2_mixer.h"

namespace {

using namespace parity;
using kernels::SsdShape;

const SsdShape kShape{24, 64, 1, 128, 256};
constexpr int kLayers = 24;

// Every (sequence, layer) of the batch in its own memory, as the state cache holds them.
struct Batch {
  int seqs = 0;
  std::size_t S = 0, ld = 0;  // state floats; replay x floats per (sequence, layer)
  AlignedBuffer<uint16_t> plain;                   // bf16 states
  AlignedBuffer<float> boundary, running, rx, rdt, rB, C, x, dt, y;
  std::vector<float> A, D;

  Batch(int n) : seqs(n) {
    const int H = kShape.nheads, P = kShape.headdim, N = kShape.dstate, L = kShape.chunk_size;
    S = static_cast<std::size_t>(kShape.state_elems());
    ld = std::size_t(H) * L * P;
    const std::size_t m = std::size_t(n) * kLayers;
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 0.5f);
    auto fill = [&](AlignedBuffer<float>& b, std::size_t count) {
      b.resize(count);
      for (std::size_t i = 0; i < count; ++i) b[i] = nd(rng);
    };
    plain.resize(m * S);
    for (std::size_t i = 0; i < m * S; ++i) plain[i] = 0x3c00;  // bf16 0.0078125
    fill(boundary, m * S);
    fill(running, m * S);
    fill(rx, m * ld);
    fill(rB, m * L * N);
    fill(C, m * N);
    fill(x, m * H * P);
    rdt.resize(m * L * H);
    for (std::size_t i = 0; i < rdt.size(); ++i) rdt[i] = 0.01f;
    dt.resize(m * H);
    for (std::size_t i = 0; i < dt.size(); ++i) dt[i] = 0.01f;
    y.resize(m * H * P);
    A.assign(H, -1.0f);
    D.assign(H, 1.0f);
  }
  std::size_t at(int seq, int layer) const { return std::size_t(layer) * seqs + seq; }
};

void plain_kernels(Batch& b) {
  const int H = kShape.nheads, P = kShape.headdim, N = kShape.dstate;
  for (int l = 0; l < kLayers; ++l)
    for (int i = 0; i < b.seqs; ++i) {
      const std::size_t k = b.at(i, l);
      kernels::ssu_step_bf16(kShape, b.x.data() + k * H * P, b.dt.data() + k * H, b.A.data(),
                             b.rB.data() + k * kShape.chunk_size * N, b.C.data() + k * N, b.D.data(),
                             b.plain.data() + k * b.S, b.y.data() + k * H * P);
    }
}

// The decode rows mamba2_scan hands the kernel at chunk row t (running fold as far along as a real
// decode leaves it).
void exact_kernels(Batch& b, int t) {
  const int H = kShape.nheads, P = kShape.headdim, N = kShape.dstate, L = kShape.chunk_size;
  std::vector<kernels::SsdDecodeRow> rows(b.seqs);
  std::vector<int> fold(std::size_t(b.seqs) * 2 * H);
  for (int l = 0; l < kLayers; ++l) {
    for (int i = 0; i < b.seqs; ++i) {
      const std::size_t k = b.at(i, l);
      kernels::SsdDecodeRow& d = rows[i];
      d = {};
      d.t = t;
      d.x = b.rx.data() + k * b.ld;
      d.dt = b.rdt.data() + k * L * H;
      d.B = b.rB.data() + k * L * N;
      d.C = b.C.data() + k * N;
      d.boundary = b.boundary.data() + k * b.S;
      d.running = b.running.data() + k * b.S;
      for (int h = 0; h < H; ++h) {
        const model::DecodeFold f = model::decode_fold(h, t, 0, L);
        fold[std::size_t(i) * 2 * H + h] = f.from;
        fold[std::size_t(i) * 2 * H + H + h] = f.to;
      }
      d.head_folded = fold.data() + std::size_t(i) * 2 * H;
      d.head_fold_to = d.head_folded + H;
      if (t == L - 1) d.fold_dst = b.boundary.data() + k * b.S;
      d.y = b.y.data() + k * H * P;
    }
    kernels::ssd_decode_rows(kShape, b.A.data(), b.D.data(), rows.data(), b.seqs);
  }
}

// The traffic alone, as integer words: XOR is associative, so the compiler vectorises the loops
// freely and they run at the memory's pace. `zero` is 0 at run time: every store writes back what
// it read, and the compiler can drop neither the loads nor the stores.
uint32_t read_floats(const float* p, std::size_t n) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p);
  uint32_t acc = 0;
  for (std::size_t i = 0; i < n; ++i) acc ^= w[i];
  return acc;
}
void rewrite_u16(uint16_t* p, std::size_t n, uint16_t zero) {
  for (std::size_t i = 0; i < n; ++i) p[i] ^= zero;
}
void copy_floats(const float* src, float* dst, std::size_t n, uint32_t zero) {
  const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
  uint32_t* d = reinterpret_cast<uint32_t*>(dst);
  for (std::size_t i = 0; i < n; ++i) d[i] = s[i] ^ zero;
}

volatile uint16_t g_zero16 = 0;
volatile uint32_t g_zero32 = 0;

void plain_floor(Batch& b) {
  const uint16_t z = g_zero16;
  for (int l = 0; l < kLayers; ++l)
    for (int i = 0; i < b.seqs; ++i) rewrite_u16(b.plain.data() + b.at(i, l) * b.S, b.S, z);
}

// Exact decode at chunk row t: the boundary state and the replay x and B of rows 0..t are read,
// and every head that folds this step reads its running fold (or the boundary, for a group
// starting at row 0) and writes the destination.
uint32_t exact_floor(Batch& b, int t) {
  const int H = kShape.nheads, P = kShape.headdim, N = kShape.dstate, L = kShape.chunk_size;
  const std::size_t pn = std::size_t(P) * N;
  const uint32_t z = g_zero32;
  uint32_t sink = 0;
  for (int l = 0; l < kLayers; ++l)
    for (int i = 0; i < b.seqs; ++i) {
      const std::size_t k = b.at(i, l);
      float* Sb = b.boundary.data() + k * b.S;
      float* R = b.running.data() + k * b.S;
      const float* xs = b.rx.data() + k * b.ld;
      for (int h = 0; h < H; ++h) {
        sink ^= read_floats(Sb + h * pn, pn);
        sink ^= read_floats(xs + std::size_t(h) * L * P, std::size_t(t + 1) * P);
        const model::DecodeFold f = model::decode_fold(h, t, 0, L);
        if (f.to != 0) copy_floats(f.from == 0 ? Sb + h * pn : R + h * pn, t == L - 1 ? Sb + h * pn : R + h * pn, pn, z);
      }
      sink ^= read_floats(b.rB.data() + k * L * N, std::size_t(t + 1) * N);
    }
  return sink;
}

template <class F>
double time_ms(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Median per-iteration ratio b/a and both medians as counters.
template <class Fa, class Fb>
void interleave(benchmark::State& st, Fa&& plain, Fb&& exact) {
  std::vector<double> tp, te, ratio;
  for (auto _ : st) {
    const double a = time_ms(plain), c = time_ms(exact);
    tp.push_back(a);
    te.push_back(c);
    ratio.push_back(c / a);
  }
  st.counters["plain_ms"] = bench::median(tp);
  st.counters["exact_ms"] = bench::median(te);
  st.counters["exact/plain"] = bench::median(ratio);
}

void BM_DecodeSsmKernels(benchmark::State& st) {
  Batch b(static_cast<int>(st.range(0)));
  const int t = static_cast<int>(st.range(1));
  interleave(st, [&] { plain_kernels(b); }, [&] { exact_kernels(b, t); });
}
BENCHMARK(BM_DecodeSsmKernels)
    ->ArgNames({"batch", "chunkpos"})
    ->ArgsProduct({{1, 8, 32}, {1, 64, 128, 255}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_DecodeSsmFloor(benchmark::State& st) {
  Batch b(static_cast<int>(st.range(0)));
  const int t = static_cast<int>(st.range(1));
  uint32_t sink = 0;
  interleave(st, [&] { plain_floor(b); }, [&] { sink ^= exact_floor(b, t); });
  benchmark::DoNotOptimize(sink);
}
BENCHMARK(BM_DecodeSsmFloor)
    ->ArgNames({"batch", "chunkpos"})
    ->ArgsProduct({{1, 8, 32}, {1, 64, 128, 255}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
