// The GPU scan. Exact mode: every row and the final state bit-identical whatever the schedule (one
// call, uneven chunks, one row at a time through the one-row decode kernel, sequences sharing
// passes at different cell positions, decode rows beside a prefill chunk, any p-tile of the decode
// kernels), for both state dtypes, several cells, staggered or not; plain mode's rows do change
// with the schedule and the grid (the companions). Plain mode's one-row decode (SSU) against a
// scalar twin, bit for bit. Both modes against the CPU's scalar reference scan.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>

#include "kernels/ssd.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/pass_plan.h"
#include "tests/cuda/gpu_test_support.h"
#include "tests/cuda/ssd_scan_memory.h"

namespace parity {
namespace {

constexpr int H = 8, P = 32, N = 16, G = 2, I = H * P, GN = G * N, LD = I + 2 * GN, T = 150;

struct Stream {
  std::vector<float> xbc, dt;
  explicit Stream(uint64_t seed) : xbc(test::uniform(std::size_t(T) * LD, seed)), dt(test::uniform(std::size_t(T) * H, seed + 1, 0.005f, 0.1f)) {}
};

const std::vector<float>& A_() {
  static const std::vector<float> a = [] {
    std::vector<float> v = test::uniform(H, 99, 0.5f, 2.0f);
    for (float& x : v) x = -x;
    return v;
  }();
  return a;
}
const std::vector<float>& D_() {
  static const std::vector<float> d = test::uniform(H, 98);
  return d;
}

struct Call {
  int slot;
  int64_t start;
  int n;
};

class GpuScan {
 public:
  GpuScan(cuda::ScanGrid g, bool bf16, int slots) : g_(g), bf16_(bf16) {
    const std::size_t S = std::size_t(slots) * H * P * N;
    if (bf16) {
      mem_.s16.resize(S);
      mem_.s16.zero();
    } else {
      mem_.s32.resize(S);
      mem_.s32.zero();
    }
    mem_.rx.resize(std::size_t(slots) * H * g.cell * P);
    mem_.rdt.resize(std::size_t(slots) * H * g.cell);
    mem_.rb.resize(std::size_t(slots) * G * g.cell * N);
    dA_.upload(A_());
    dD_.upload(D_());
  }
  // One pass over the calls; call i reads rows [start, start+n) of streams[i], y lands in out[slot].
  void pass(const std::vector<Call>& calls, const std::vector<const Stream*>& streams) {
    std::vector<cuda::SeqSpan> spans;
    std::vector<float> xbc, dt;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const Call& c = calls[i];
      spans.push_back({c.slot, c.start, c.n});
      xbc.insert(xbc.end(), streams[i]->xbc.begin() + c.start * LD, streams[i]->xbc.begin() + (c.start + c.n) * LD);
      dt.insert(dt.end(), streams[i]->dt.begin() + c.start * H, streams[i]->dt.begin() + (c.start + c.n) * H);
    }
    const int rows = static_cast<int>(dt.size() / H);
    cuda::PassPlan plan(spans, g_);
    const cuda::PassSeqs ps = plan.upload(ints_, starts_);
    cuda::DeviceBuffer<float> dx, ddt, dy(std::size_t(rows) * I);
    scratch_.resize(std::max<std::size_t>(1, cuda::ssd_scratch_floats({H, P, N, G}, ps)));
    dx.upload(xbc);
    ddt.upload(dt);
    cuda::SsdState st = mem_.state(bf16_);
    cuda::ssd_scan({H, P, N, G}, g_, ps, dx.data(), LD, ddt.data(), dA_.data(), dD_.data(), st, scratch_.data(),
                   scratch_.size(), dy.data(), nullptr);
    const std::vector<float> y = dy.download(std::size_t(rows) * I);
    std::size_t r = 0;
    for (const Call& c : calls) {
      std::vector<float>& o = out[c.slot];
      o.resize(std::size_t(T) * I);
      std::copy(y.begin() + r * I, y.begin() + (r + c.n) * I, o.begin() + c.start * I);
      r += c.n;
    }
  }
  // The slots' states [slots][H][P][N] as floats (a bf16 state widened: exact).
  std::vector<float> state() const {
    if (!bf16_) return mem_.s32.download(mem_.s32.size());
    const std::vector<uint16_t> b = mem_.s16.download(mem_.s16.size());
    std::vector<float> f(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_f32(b[i]);
    return f;
  }
  std::map<int, std::vector<float>> out;

 private:
  cuda::ScanGrid g_;
  bool bf16_;
  test::ScanMemory mem_;
  cuda::DeviceBuffer<float> dA_, dD_, scratch_;
  cuda::DeviceBuffer<int32_t> ints_;
  cuda::DeviceBuffer<int64_t> starts_;
};

// "" when a and b hold the same bits, else where they first differ and both values.
std::string first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!test::same_bits(&a[i], &b[i], 1)) {
      std::ostringstream o;
      o.precision(9);
      o << "first difference at " << i << " of " << a.size() << ": " << a[i] << " vs " << b[i];
      return o.str();
    }
  return "";
}

// The rows of one sequence and its final state.
struct SeqRun {
  std::vector<float> y, state;
};

// Rows of one sequence run in chunks of the given sizes, one pass per chunk.
SeqRun run_seq(const cuda::ScanGrid& g, bool bf16, const Stream& s, const std::vector<int>& sizes) {
  GpuScan scan(g, bf16, 1);
  int64_t pos = 0;
  for (int n : sizes) {
    scan.pass({{0, pos, n}}, {&s});
    pos += n;
  }
  EXPECT_EQ(pos, T);
  return {scan.out[0], scan.state()};
}
std::vector<float> run_chunks(const cuda::ScanGrid& g, bool bf16, const Stream& s, const std::vector<int>& sizes) {
  return run_seq(g, bf16, s, sizes).y;
}

// Forces the decode kernels' p-tile for a scope (0: the default choice).
struct ForcedTile {
  explicit ForcedTile(int tp) { cuda::ssd_force_step_tile(tp); }
  ~ForcedTile() { cuda::ssd_force_step_tile(0); }
};

std::vector<int> uneven() { return {37, 1, 1, 64, 5, 1, 41}; }
std::vector<int> ones() { return std::vector<int>(T, 1); }
// Row by row. Sanitizer mode (a launch costs ~16 ms under racecheck): only the first 3 rows, the last 2
// and three each side of the first cell boundary past them one at a time (every row up to 6 for cells of
// one row), chunks between.
std::vector<int> decode_rows(int cell) {
  if (!test::sanitizing()) return ones();
  const int edge = std::max(cell, 4);
  std::vector<int> sizes;
  for (int p = 0; p < T;) {
    auto alone = [&](int q) { return q < std::max(3, cell == 1 ? 6 : 0) || q >= T - 2 || std::abs(q - edge) <= 3; };
    int n = 1;
    while (!alone(p) && p + n < T && !alone(p + n)) ++n;
    sizes.push_back(n);
    p += n;
  }
  return sizes;
}

struct ScanConfig {
  int cell;
  bool stagger, bf16;
};

// Every cell size with both staggerings and both state dtypes; in sanitizer mode every cell size with
// each staggering and each dtype once (two of the four pairs, alternating).
std::vector<ScanConfig> scan_configs() {
  std::vector<ScanConfig> v;
  int i = 0;
  for (int cell : {1, 8, 16, 32, 64, 128, 256}) {
    for (bool stagger : {true, false})
      for (bool bf16 : {false, true})
        if (!test::sanitizing() || (stagger != bf16) == (i % 2 == 0)) v.push_back({cell, stagger, bf16});
    ++i;
  }
  return v;
}

TEST(CudaSsd, ExactRowsAreBitIdenticalUnderEverySchedule) {
  PARITY_REQUIRE_GPU();
  const Stream s(11), other(12);
  for (const auto& [cell, stagger, bf16] : scan_configs()) {
    const cuda::ScanGrid g{true, cell, stagger};
    const std::string what = "cell " + std::to_string(cell) + (stagger ? " staggered" : "") + (bf16 ? " bf16" : " f32");
    const SeqRun one = run_seq(g, bf16, s, {T});
    for (const auto& sizes : {uneven(), decode_rows(cell)}) {
      const SeqRun r = run_seq(g, bf16, s, sizes);
      const char* sched = sizes.size() == uneven().size() ? " uneven chunks" : " one row at a time";
      ASSERT_EQ(first_diff(one.y, r.y), "") << what << sched << ": rows";
      ASSERT_EQ(first_diff(one.state, r.state), "") << what << sched << ": final state";
    }
    // Batch mix: sequence 0 decodes row by row while sequence 1 (another stream) prefills in
    // uneven chunks in the same passes, on another slot.
    GpuScan mix(g, bf16, 2);
    const std::vector<int> ch = uneven(), rows = decode_rows(cell);
    int64_t p0 = 0, p1 = 0;
    std::size_t ci = 0, ri = 0;
    while (p0 < T || p1 < T) {
      std::vector<Call> calls;
      std::vector<const Stream*> ss;
      if (p1 < T) {
        calls.push_back({1, p1, ch[ci]});
        ss.push_back(&other);
        p1 += ch[ci++];
      }
      if (p0 < T) {
        calls.push_back({0, p0, rows[ri]});
        ss.push_back(&s);
        p0 += rows[ri++];
      }
      mix.pass(calls, ss);
    }
    ASSERT_EQ(first_diff(one.y, mix.out[0]), "") << what << " batch mix";
    const std::vector<float> ms = mix.state();
    ASSERT_EQ(first_diff(one.state, std::vector<float>(ms.begin(), ms.begin() + one.state.size())), "")
        << what << " batch mix: final state";
  }
}

// K sequences, each prefilled to its own length in one pass, then decoded together one row per
// pass: in every pass they sit at different positions of their cells, so some heads of some
// sequences fold while the rest do not. Every sequence's rows and final state must equal its own
// single-shot run. Sanitizer mode: 26 decode passes (each sequence across 8-, 16- and, from 40 rows,
// the 64-row cell's boundary), then the rest of every sequence as one chunk of a last pass.
constexpr int K = 6;
const int kPrefill[K] = {0, 1, 5, 11, 17, 40};

std::vector<SeqRun> decode_batch(const cuda::ScanGrid& g, bool bf16, const std::vector<Stream>& ss) {
  GpuScan scan(g, bf16, K);
  std::vector<Call> calls;
  std::vector<const Stream*> from;
  for (int k = 0; k < K; ++k)
    if (kPrefill[k] > 0) {
      calls.push_back({k, 0, kPrefill[k]});
      from.push_back(&ss[k]);
    }
  scan.pass(calls, from);
  int64_t pos[K];
  for (int k = 0; k < K; ++k) pos[k] = kPrefill[k];
  for (int step = 0;; ++step) {
    const bool rest = step == test::pick(T, 26);
    calls.clear();
    from.clear();
    for (int k = 0; k < K; ++k)
      if (pos[k] < T) {
        const int n = rest ? static_cast<int>(T - pos[k]) : 1;
        calls.push_back({k, pos[k], n});
        from.push_back(&ss[k]);
        pos[k] += n;
      }
    if (calls.empty()) break;
    scan.pass(calls, from);
  }
  const std::vector<float> st = scan.state();
  const std::size_t per = st.size() / K;
  std::vector<SeqRun> runs(K);
  for (int k = 0; k < K; ++k)
    runs[k] = {scan.out[k], std::vector<float>(st.begin() + k * per, st.begin() + (k + 1) * per)};
  return runs;
}

std::vector<Stream> streams() {
  std::vector<Stream> ss;
  for (int k = 0; k < K; ++k) ss.emplace_back(100 + 2 * k);
  return ss;
}

TEST(CudaSsd, ExactDecodeOfABatchAtMixedCellPositionsEqualsSingleShot) {
  PARITY_REQUIRE_GPU();
  const std::vector<Stream> ss = streams();
  struct Case {
    int cell;
    bool stagger;
  };
  int ci = 0;
  for (const Case c : {Case{8, true}, Case{16, true}, Case{64, true}, Case{256, true}, Case{16, false}})
    for (bool bf16 : test::bf16_sweep(ci++)) {
      const cuda::ScanGrid g{true, c.cell, c.stagger};
      std::vector<SeqRun> one;
      for (int k = 0; k < K; ++k) one.push_back(run_seq(g, bf16, ss[k], {T}));
      // The default p-tile (16 rows here), the whole head (32) and a quarter of it (8).
      for (int tile : {0, 32, 8}) {
        const ForcedTile forced(tile);
        const std::vector<SeqRun> dec = decode_batch(g, bf16, ss);
        for (int k = 0; k < K; ++k) {
          const std::string what = "cell " + std::to_string(c.cell) + (c.stagger ? " staggered" : "") +
                                   (bf16 ? " bf16" : " f32") + " tile " + std::to_string(tile) + " sequence " +
                                   std::to_string(k) + " (prefill " + std::to_string(kPrefill[k]) + ")";
          ASSERT_EQ(first_diff(one[k].y, dec[k].y), "") << what << ": rows";
          ASSERT_EQ(first_diff(one[k].state, dec[k].state), "") << what << ": final state";
        }
      }
    }
}

// The check above can fail: decoding on another grid, or in plain mode (SSU), gives other bits.
TEST(CudaSsd, CompanionDecodeBitsDependOnTheGridAndTheMode) {
  PARITY_REQUIRE_GPU();
  const std::vector<Stream> ss = streams();
  const std::vector<SeqRun> g16 = decode_batch({true, 16, true}, false, ss);
  const std::vector<SeqRun> g8 = decode_batch({true, 8, true}, false, ss);
  const std::vector<SeqRun> plain = decode_batch({false, 64, false}, false, ss);
  for (int k = 0; k < K; ++k) {
    EXPECT_NE(first_diff(g16[k].y, g8[k].y), "") << k;
    EXPECT_NE(first_diff(run_chunks({false, 64, false}, false, ss[k], {T}), plain[k].y), "") << k;
  }
}

// Plain mode's one-row decode against a scalar twin on the host, bit for bit: per element
// S ← fmaf(exp(dt·A), S, (dt·x[p])·B[n]) (rounded to bf16 for a bf16 state), y[p] =
// ((a0 + a1) + (a2 + a3)) + D·x[p] with a_q the ascending sum over n ≡ q (mod 4) of C[n]·S[p][n].
TEST(CudaSsd, PlainSsuEqualsItsScalarTwin) {
  PARITY_REQUIRE_GPU();
  const std::vector<Stream> ss = streams();
  const cuda::ScanGrid g{false, 64, false};
  for (bool bf16 : {false, true})
    for (int tile : {0, 32, 8}) {
      const ForcedTile forced(tile);
      GpuScan scan(g, bf16, K);
      std::vector<Call> calls;
      std::vector<const Stream*> from;
      for (int k = 0; k < K; ++k) {
        calls.push_back({k, 0, 20 + k});
        from.push_back(&ss[k]);
      }
      scan.pass(calls, from);  // a multi-row prefill: some state to start from
      for (int step = 0; step < 3; ++step) {
        std::vector<float> S = scan.state();
        for (auto& c : calls) c = {c.slot, c.start + c.n, 1};
        scan.pass(calls, from);
        std::vector<float> y_ref(std::size_t(K) * I);
        for (int k = 0; k < K; ++k) {
          const int64_t t = calls[k].start;
          const float* row = ss[k].xbc.data() + t * LD;
          for (int h = 0; h < H; ++h) {
            const int grp = h / (H / G);
            const float d = ss[k].dt[t * H + h];
            const float dA = kernels::exp_f(d * A_()[h]);
            const float *x = row + h * P, *B = row + I + grp * N, *C = row + I + GN + grp * N;
            for (int p = 0; p < P; ++p) {
              float* Sp = S.data() + ((std::size_t(k) * H + h) * P + p) * N;
              float a[4] = {0, 0, 0, 0};
              for (int n = 0; n < N; ++n) {
                const float v = std::fma(dA, Sp[n], (d * x[p]) * B[n]);
                Sp[n] = bf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
                a[n % 4] = std::fma(C[n], Sp[n], a[n % 4]);
              }
              y_ref[std::size_t(k) * I + h * P + p] = ((a[0] + a[1]) + (a[2] + a[3])) + D_()[h] * x[p];
            }
          }
          const std::vector<float>& o = scan.out[k];
          const std::vector<float> y(o.begin() + t * I, o.begin() + (t + 1) * I);
          const std::vector<float> yr(y_ref.begin() + k * I, y_ref.begin() + (k + 1) * I);
          ASSERT_EQ(first_diff(yr, y), "") << (bf16 ? "bf16" : "f32") << " tile " << tile << " step " << step
                                           << " sequence " << k << ": y";
        }
        ASSERT_EQ(first_diff(S, scan.state()), "") << (bf16 ? "bf16" : "f32") << " tile " << tile << " step " << step
                                                    << ": state";
      }
    }
}

TEST(CudaSsd, CompanionPlainRowsDependOnTheSchedule) {
  PARITY_REQUIRE_GPU();
  const Stream s(11);
  for (int cell : {64, 256}) {
    const cuda::ScanGrid g{false, cell, false};
    const std::vector<float> one = run_chunks(g, false, s, {T});
    EXPECT_FALSE(test::same_bits(one.data(), run_chunks(g, false, s, ones()).data(), one.size())) << cell;
    EXPECT_FALSE(test::same_bits(one.data(), run_chunks(g, false, s, uneven()).data(), one.size())) << cell;
  }
}

TEST(CudaSsd, BothModesAgreeWithTheCpuReferenceScan) {
  PARITY_REQUIRE_GPU();
  const Stream s(21);
  std::vector<float> x(std::size_t(T) * I), B(std::size_t(T) * GN), C(std::size_t(T) * GN);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < LD; ++i) {
      const float v = s.xbc[std::size_t(t) * LD + i];
      if (i < I) x[std::size_t(t) * I + i] = v;
      else if (i < I + GN) B[std::size_t(t) * GN + i - I] = v;
      else C[std::size_t(t) * GN + i - I - GN] = v;
    }
  const kernels::SsdShape sh{H, P, G, N, 32};
  std::vector<float> s0(sh.state_elems(), 0.0f), fin(sh.state_elems()), ref(std::size_t(T) * I);
  kernels::ssd_scan_reference(sh, x.data(), s.dt.data(), A_().data(), B.data(), C.data(), D_().data(), T, 0, s0.data(),
                              ref.data(), nullptr, fin.data());
  double scale = 0;
  for (float v : ref) scale = std::max(scale, double(std::fabs(v)));
  struct Case {
    cuda::ScanGrid g;
    bool bf16;
    std::vector<int> sizes;
    double tol;
  };
  for (const Case& c : {Case{{true, 32, true}, false, uneven(), 2e-5}, Case{{true, 8, true}, true, ones(), 2e-2},
                        Case{{true, 16, true}, false, {T}, 2e-5}, Case{{true, 256, true}, false, uneven(), 2e-5},
                        Case{{true, 1, false}, false, uneven(), 2e-5}, Case{{false, 64, false}, false, {T}, 2e-5},
                        Case{{false, 64, false}, false, ones(), 2e-5}, Case{{false, 256, false}, false, {T}, 2e-5},
                        Case{{false, 256, false}, false, uneven(), 2e-5}}) {
    const std::vector<float> y = run_chunks(c.g, c.bf16, s, c.sizes);
    double worst = 0;
    for (std::size_t i = 0; i < y.size(); ++i) worst = std::max(worst, double(std::fabs(y[i] - ref[i])));
    EXPECT_LE(worst, c.tol * scale) << "exact " << c.g.exact << " cell " << c.g.cell << " bf16 " << c.bf16;
  }
}

}  // namespace
}  // namespace parity
