// The SSM part of one decode step of a batch (24 layers of the mamba2-130m mixer shape, every
// sequence and layer in its own buffers, as in the cache), plain against exact at the same state
// dtype, measured two ways, each interleaved plain / exact inside every iteration so that load on
// a shared machine hits both alike:
//
//   BM_DecodeSsmKernels  the real kernels: ssu_step / ssu_step_bf16 per sequence (plain) against
//                        ssd_grid_decode over the batch on the default exact grid (exact).
//   BM_DecodeSsmFloor    only the memory traffic those kernels cannot avoid, with no arithmetic:
//                        plain reads and rewrites its state; exact reads its boundary state and
//                        each head's ring rows since its boundary, and the heads whose cell ends
//                        at this step write their state. A kernel near its floor is bound by
//                        memory, one far above it by arithmetic.
//   BM_DecodeSsmVsFloor  the four interleaved in every iteration (plain kernel, plain floor, exact
//                        kernel, exact floor), so the kernel/floor ratios come from one run too.
//   BM_SsuInCache        plain mode's SSU on one layer's state, stepped again and again so that it
//                        stays in L2, beside the floor loop over the same bytes: what the kernel's
//                        arithmetic costs when memory costs next to nothing (ns per 16 state elements).
//
// Arguments: batch, position (absolute; the grid repeats every cell), dtype (0 float32, 1 bfloat16).
//   OMP_NUM_THREADS=1 build/parity_bench --benchmark_filter=DecodeSsm --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <random>
#include <vector>

#include "common/aligned.h"
#include "decode_timing.h"
#include "kernels/isa.h"
#include "kernels/stream_plan.h"
#include "kernels/ssd.h"
#include "kernels/ssd_grid.h"
#include "kernels/ssd_internal.h"

namespace {

using namespace parity;
using kernels::SsdShape;

const SsdShape kShape{24, 64, 1, 128, 256};
constexpr int kLayers = 24;
const kernels::ExactGrid kGrid{kernels::kDefaultExactCell, true, 24};

// Every (sequence, layer) of the batch in its own memory, as the state cache holds them.
struct Batch {
  int seqs = 0;
  bool bf16 = false;
  std::size_t S = 0;
  kernels::RingSizes ring{0, 0, 0};
  AlignedBuffer<uint16_t> plain16, exact16;  // bf16 states
  AlignedBuffer<float> plain32, exact32, rx, rdt, rB, B, C, x, dt, y;
  std::vector<float> A, D;

  Batch(int n, bool use_bf16) : seqs(n), bf16(use_bf16) {
    const int H = kShape.nheads, P = kShape.headdim, N = kShape.dstate;
    S = static_cast<std::size_t>(kShape.state_elems());
    ring = kernels::ring_sizes(kShape, kGrid);
    const std::size_t m = std::size_t(n) * kLayers;
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 0.5f);
    auto fill = [&](AlignedBuffer<float>& b, std::size_t count) {
      b.resize(count);
      for (std::size_t i = 0; i < count; ++i) b[i] = nd(rng);
    };
    if (bf16) {
      for (auto* b : {&plain16, &exact16}) {
        b->resize(m * S);
        for (std::size_t i = 0; i < m * S; ++i) (*b)[i] = 0x3c00;  // bf16 0.0078125
      }
    } else {
      fill(plain32, m * S);
      fill(exact32, m * S);
    }
    fill(rx, m * std::size_t(ring.x));
    fill(rB, m * std::size_t(ring.B));
    fill(B, m * N);
    fill(C, m * N);
    fill(x, m * H * P);
    rdt.resize(m * std::size_t(ring.dt));
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
      if (b.bf16)
        kernels::ssu_step_bf16(kShape, b.x.data() + k * H * P, b.dt.data() + k * H, b.A.data(), b.B.data() + k * N,
                               b.C.data() + k * N, b.D.data(), b.plain16.data() + k * b.S, b.y.data() + k * H * P);
      else
        kernels::ssu_step(kShape, b.x.data() + k * H * P, b.dt.data() + k * H, b.A.data(), b.B.data() + k * N,
                          b.C.data() + k * N, b.D.data(), b.plain32.data() + k * b.S, b.y.data() + k * H * P);
    }
}

// The decode rows mamba2_scan hands the kernel for tokens at position pos (rings filled).
void exact_kernels(Batch& b, int64_t pos) {
  const int H = kShape.nheads, P = kShape.headdim, N = kShape.dstate;
  std::vector<kernels::GridDecodeRow> rows(b.seqs);
  for (int l = 0; l < kLayers; ++l) {
    for (int i = 0; i < b.seqs; ++i) {
      const std::size_t k = b.at(i, l);
      kernels::GridDecodeRow& d = rows[i];
      d.pos = pos;
      d.x_ring = b.rx.data() + k * b.ring.x;
      d.dt_ring = b.rdt.data() + k * b.ring.dt;
      d.b_ring = b.rB.data() + k * b.ring.B;
      d.C = b.C.data() + k * N;
      d.state = b.bf16 ? kernels::GridState{nullptr, b.exact16.data() + k * b.S}
                       : kernels::GridState{b.exact32.data() + k * b.S, nullptr};
      d.y = b.y.data() + k * H * P;
    }
    kernels::ssd_grid_decode(kShape, kGrid, b.A.data(), b.D.data(), rows.data(), b.seqs);
  }
}

// The traffic alone, as integer words: XOR is associative, so the compiler vectorises the loops
// freely and they run at the memory's pace. `zero` is 0 at run time: every store writes back what
// it read, and the compiler can drop neither the loads nor the stores. With g_ask_ahead each
// 64-byte line asks for the lines ahead as the kernels do (the active stream plan's near distance
// into L1 and, for a bf16 state, its far one into the outer caches). On the Zen 5 that made the bf16
// and fp32 read loops faster and the fp32 in-place copy slower, so a floor is the faster of the two
// ways, timed side by side (floor_ms).
bool g_ask_ahead = false;
inline void ask_ahead(const void* line, bool far) {
  if (!g_ask_ahead) return;
  const char* c = static_cast<const char*>(line);
  if (const int near = kernels::state_prefetch_near()) _mm_prefetch(c + near, _MM_HINT_T0);
  if (far && kernels::state_prefetch_far()) _mm_prefetch(c + kernels::state_prefetch_far(), _MM_HINT_T2);
}
uint32_t read_floats(const float* p, std::size_t n, bool far = false) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p);
  uint32_t acc = 0;
  const std::size_t whole = n / 16 * 16;
  for (std::size_t i = 0; i < whole; i += 16) {
    ask_ahead(w + i, far);
    for (std::size_t j = 0; j < 16; ++j) acc ^= w[i + j];
  }
  for (std::size_t i = whole; i < n; ++i) acc ^= w[i];
  return acc;
}
void rewrite_u16(uint16_t* p, std::size_t n, uint16_t zero) {
  const std::size_t whole = n / 32 * 32;
  for (std::size_t i = 0; i < whole; i += 32) {
    ask_ahead(p + i, true);
    for (std::size_t j = 0; j < 32; ++j) p[i + j] ^= zero;
  }
  for (std::size_t i = whole; i < n; ++i) p[i] ^= zero;
}
// In place, as the kernels update a state: one pointer, so that the compiler needs no overlap test
// (a copy from a pointer to itself took its scalar fallback: 2x slower than the kernel on the Zen 4).
void rewrite_floats(float* p, std::size_t n, uint32_t zero) {
  uint32_t* w = reinterpret_cast<uint32_t*>(p);
  const std::size_t whole = n / 16 * 16;
  for (std::size_t i = 0; i < whole; i += 16) {
    ask_ahead(w + i, false);
    for (std::size_t j = 0; j < 16; ++j) w[i + j] ^= zero;
  }
  for (std::size_t i = whole; i < n; ++i) w[i] ^= zero;
}

volatile uint16_t g_zero16 = 0;
volatile uint32_t g_zero32 = 0;

void plain_floor(Batch& b) {
  const uint16_t z16 = g_zero16;
  const uint32_t z32 = g_zero32;
  for (int l = 0; l < kLayers; ++l)
    for (int i = 0; i < b.seqs; ++i) {
      if (b.bf16) {
        rewrite_u16(b.plain16.data() + b.at(i, l) * b.S, b.S, z16);
      } else {
        float* s = b.plain32.data() + b.at(i, l) * b.S;
        rewrite_floats(s, b.S, z32);
      }
    }
}

// Exact decode at position pos: every head's boundary state and its ring rows since its boundary
// are read, and the heads whose cell ends here write their state.
uint32_t exact_floor(Batch& b, int64_t pos) {
  const int H = kShape.nheads, P = kShape.headdim, N = kShape.dstate, G = kGrid.cell;
  const std::size_t pn = std::size_t(P) * N;
  const uint16_t z16 = g_zero16;
  const uint32_t z32 = g_zero32;
  uint32_t sink = 0;
  for (int l = 0; l < kLayers; ++l)
    for (int i = 0; i < b.seqs; ++i) {
      const std::size_t k = b.at(i, l);
      for (int h = 0; h < H; ++h) {
        const int64_t start = kGrid.cell_start(h, pos);
        const int rows = static_cast<int>(pos - start) + 1;
        const bool fold = pos + 1 == kGrid.cell_end(h, start);
        if (b.bf16) {
          uint16_t* s = b.exact16.data() + k * b.S + h * pn;
          if (fold) rewrite_u16(s, pn, z16);
          else sink ^= read_floats(reinterpret_cast<const float*>(s), pn / 2, true);
        } else {
          float* s = b.exact32.data() + k * b.S + h * pn;
          if (fold) rewrite_floats(s, pn, z32);
          else sink ^= read_floats(s, pn);
        }
        sink ^= read_floats(b.rx.data() + k * b.ring.x + (std::size_t(h) * G + kGrid.ring_slot(h, start)) * P,
                            std::size_t(rows) * P);
      }
      sink ^= read_floats(b.rB.data() + k * b.ring.B, std::size_t(G) * N);
    }
  return sink;
}

template <class F>
double time_ms(F&& f) {
  const double t0 = bench::now_ms();
  f();
  return bench::now_ms() - t0;
}

// The faster of the floor loop without and with the software prefetches, ms.
template <class F>
double floor_ms(F&& traffic) {
  g_ask_ahead = false;
  const double plain = time_ms(traffic);
  g_ask_ahead = true;
  const double asked = time_ms(traffic);
  g_ask_ahead = false;
  return std::min(plain, asked);
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
  Batch b(static_cast<int>(st.range(0)), st.range(2) != 0);
  const int64_t t = st.range(1);
  interleave(st, [&] { plain_kernels(b); }, [&] { exact_kernels(b, t); });
}
BENCHMARK(BM_DecodeSsmKernels)
    ->ArgNames({"batch", "pos", "bf16"})
    ->ArgsProduct({{1, 8, 32}, {256, 257, 263, 271}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The exact kernels with the AVX512-BF16 rounding off ("plain" counters) and on ("exact"
// counters), interleaved: the ratio is on/off. bf16 state only; needs a CPU with AVX512-BF16.
void BM_DecodeSsmBf16Rounding(benchmark::State& st) {
  if (!kernels::avx512_bf16_detected()) {
    st.SkipWithError("this CPU lacks AVX512-BF16");
    return;
  }
  Batch b(static_cast<int>(st.range(0)), true);
  const int64_t t = st.range(1);
  interleave(
      st,
      [&] {
        kernels::set_avx512_bf16_enabled(false);
        exact_kernels(b, t);
        kernels::set_avx512_bf16_enabled(true);
      },
      [&] { exact_kernels(b, t); });
}
BENCHMARK(BM_DecodeSsmBf16Rounding)
    ->ArgNames({"batch", "pos"})
    ->ArgsProduct({{8, 32}, {257, 263}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_DecodeSsmFloor(benchmark::State& st) {
  Batch b(static_cast<int>(st.range(0)), st.range(2) != 0);
  const int64_t t = st.range(1);
  uint32_t sink = 0;
  interleave(st, [&] { plain_floor(b); }, [&] { sink ^= exact_floor(b, t); });
  benchmark::DoNotOptimize(sink);
}
BENCHMARK(BM_DecodeSsmFloor)
    ->ArgNames({"batch", "pos", "bf16"})
    ->ArgsProduct({{1, 8, 32}, {256, 257, 263, 271}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_DecodeSsmVsFloor(benchmark::State& st) {
  Batch b(static_cast<int>(st.range(0)), st.range(2) != 0);
  const int64_t t = st.range(1);
  uint32_t sink = 0;
  std::vector<double> pk, pf, ek, ef, rp, re, rep;
  for (auto _ : st) {
    const double a = time_ms([&] { plain_kernels(b); }), af = floor_ms([&] { plain_floor(b); });
    const double c = time_ms([&] { exact_kernels(b, t); }), cf = floor_ms([&] { sink ^= exact_floor(b, t); });
    pk.push_back(a);
    pf.push_back(af);
    ek.push_back(c);
    ef.push_back(cf);
    rp.push_back(a / af);
    re.push_back(c / cf);
    rep.push_back(c / a);
  }
  benchmark::DoNotOptimize(sink);
  st.counters["plain_ms"] = bench::median(pk);
  st.counters["plain_floor_ms"] = bench::median(pf);
  st.counters["exact_ms"] = bench::median(ek);
  st.counters["exact_floor_ms"] = bench::median(ef);
  st.counters["plain/floor"] = bench::median(rp);
  st.counters["exact/floor"] = bench::median(re);
  st.counters["exact/plain"] = bench::median(rep);
}
BENCHMARK(BM_DecodeSsmVsFloor)
    ->ArgNames({"batch", "pos", "bf16"})
    ->ArgsProduct({{1, 8, 32}, {256, 257, 263, 271}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_SsuInCache(benchmark::State& st) {
  Batch b(1, st.range(0) != 0);
  const int H = kShape.nheads, P = kShape.headdim, N = kShape.dstate;
  const uint16_t z16 = g_zero16;
  const uint32_t z32 = g_zero32;
  auto kernel = [&] {
    if (b.bf16)
      kernels::ssu_step_bf16(kShape, b.x.data(), b.dt.data(), b.A.data(), b.B.data(), b.C.data(), b.D.data(),
                             b.plain16.data(), b.y.data());
    else
      kernels::ssu_step(kShape, b.x.data(), b.dt.data(), b.A.data(), b.B.data(), b.C.data(), b.D.data(),
                        b.plain32.data(), b.y.data());
  };
  auto floor = [&] {
    if (b.bf16)
      rewrite_u16(b.plain16.data(), b.S, z16);
    else
      rewrite_floats(b.plain32.data(), b.S, z32);
  };
  constexpr int kReps = 64;
  std::vector<double> tk, tf;
  for (auto _ : st) {
    tk.push_back(time_ms([&] { for (int r = 0; r < kReps; ++r) kernel(); }));
    tf.push_back(time_ms([&] { for (int r = 0; r < kReps; ++r) floor(); }));
  }
  const double vectors = double(H) * P * N / 16 * kReps;
  st.counters["kernel_ns_per_16"] = bench::median(tk) * 1e6 / vectors;
  st.counters["floor_ns_per_16"] = bench::median(tf) * 1e6 / vectors;
  st.counters["kernel/floor"] = bench::median(tk) / bench::median(tf);
}
BENCHMARK(BM_SsuInCache)->ArgNames({"bf16"})->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
