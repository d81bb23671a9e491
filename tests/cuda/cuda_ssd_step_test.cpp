// The decode step's kernels (ssd_ssu.cu, ssd_decode.cu) at shapes other than cuda_ssd_test.cpp's
// 8 × 32 × 16: the mixer's own head (P 64, N 128: several pieces per thread, two passes of the
// dots at a whole-head tile) and an odd one (P 18, N 20: rows of 5 sixteen-byte pieces, bf16 rows
// copied 8 bytes at a time, a last p-tile of 2 rows, x rows that are not 16-byte aligned). Exact
// mode: a batch decoded one row per pass at mixed cell positions equals each sequence's
// single-shot prefill, rows and final state, for every p-tile. Plain mode: the SSU against its
// scalar twin, bit for bit.
#include <algorithm>
#include <map>

#include "kernels/math.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/pass_plan.h"
#include "kernels_cuda/ssd_prefill.h"
#include "tests/cuda/gpu_test_support.h"
#include "tests/cuda/ssd_scan_memory.h"

namespace parity {
namespace {

struct Shape {
  int H, P, N, G;
  int I() const { return H * P; }
  int GN() const { return G * N; }
  int LD() const { return I() + 2 * GN(); }
  std::string name() const {
    return std::to_string(H) + "x" + std::to_string(P) + "x" + std::to_string(N) + " g" + std::to_string(G);
  }
};

constexpr int T = 72;  // rows per sequence
constexpr int K = 5;   // sequences
const int kPrefill[K] = {0, 1, 7, 16, 33};

struct Stream {
  std::vector<float> xbc, dt;
  Stream(const Shape& s, uint64_t seed)
      : xbc(test::uniform(std::size_t(T) * s.LD(), seed)), dt(test::uniform(std::size_t(T) * s.H, seed + 1, 0.005f, 0.1f)) {}
};

struct Call {
  int slot;
  int64_t start;
  int n;
};

class Scan {
 public:
  Scan(const Shape& sh, cuda::ScanGrid g, bool bf16, int slots) : sh_(sh), g_(g), bf16_(bf16) {
    const std::size_t S = std::size_t(slots) * sh.H * sh.P * sh.N;
    if (bf16) {
      mem_.s16.resize(S);
      mem_.s16.zero();
    } else {
      mem_.s32.resize(S);
      mem_.s32.zero();
    }
    mem_.rx.resize(std::size_t(slots) * sh.H * g.cell * sh.P);
    mem_.rdt.resize(std::size_t(slots) * sh.H * g.cell);
    mem_.rb.resize(std::size_t(slots) * sh.G * g.cell * sh.N);
    A = test::uniform(sh.H, 99, -2.0f, -0.5f);
    D = test::uniform(sh.H, 98);
    dA_.upload(A);
    dD_.upload(D);
  }
  void pass(const std::vector<Call>& calls, const std::vector<const Stream*>& streams) {
    const int LD = sh_.LD(), H = sh_.H, I = sh_.I();
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
    const cuda::SsdShape dsh{sh_.H, sh_.P, sh_.N, sh_.G};
    cuda::DeviceBuffer<float> dx, ddt, dy(std::size_t(rows) * I);
    scratch_.resize(std::max<std::size_t>(1, cuda::ssd_scratch_floats(dsh, ps)));
    dx.upload(xbc);
    ddt.upload(dt);
    cuda::SsdState st = mem_.state(bf16_);
    cuda::ssd_scan(dsh, g_, ps, dx.data(), LD, ddt.data(), dA_.data(), dD_.data(), st, scratch_.data(),
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
  std::vector<float> state() const {
    if (!bf16_) return mem_.s32.download(mem_.s32.size());
    const std::vector<uint16_t> b = mem_.s16.download(mem_.s16.size());
    std::vector<float> f(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_f32(b[i]);
    return f;
  }
  std::map<int, std::vector<float>> out;
  std::vector<float> A, D;

 private:
  Shape sh_;
  cuda::ScanGrid g_;
  bool bf16_;
  test::ScanMemory mem_;
  cuda::DeviceBuffer<float> dA_, dD_, scratch_;
  cuda::DeviceBuffer<int32_t> ints_;
  cuda::DeviceBuffer<int64_t> starts_;
};

// "" when a and b hold the same bits, else the count and the first difference (row of `cols`).
std::string diff(const std::vector<float>& a, const std::vector<float>& b, std::size_t cols) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  return test::bit_difference(a.data(), b.data(), a.size(), cols);
}

struct Forced {
  explicit Forced(int tp) { cuda::ssd_force_step_tile(tp); }
  ~Forced() { cuda::ssd_force_step_tile(0); }
};

struct ForcedPrefetch {
  explicit ForcedPrefetch(int ahead) { cuda::ssd_force_step_prefetch(ahead); }
  ~ForcedPrefetch() { cuda::ssd_force_step_prefetch(0); }
};

struct SeqRun {
  std::vector<float> y, state;
};

// Every sequence in one call from position 0 (the single-shot prefill), one pass per sequence.
std::vector<SeqRun> single_shot(const Shape& sh, const cuda::ScanGrid& g, bool bf16, const std::vector<Stream>& ss) {
  std::vector<SeqRun> runs;
  for (int k = 0; k < K; ++k) {
    Scan scan(sh, g, bf16, 1);
    scan.pass({{0, 0, T}}, {&ss[k]});
    runs.push_back({scan.out[0], scan.state()});
  }
  return runs;
}

// Sequence k prefilled kPrefill[k] rows in one pass, then all decoded together one row per pass
// (sanitizer mode: 34 passes, each sequence across a 16-row cell's boundary and the last across 64,
// then the rest of every sequence as one chunk of a last pass).
std::vector<SeqRun> decoded(const Shape& sh, const cuda::ScanGrid& g, bool bf16, const std::vector<Stream>& ss) {
  Scan scan(sh, g, bf16, K);
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
    const bool rest = step == test::pick(T, 34);
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

std::vector<Stream> streams(const Shape& sh) {
  std::vector<Stream> ss;
  for (int k = 0; k < K; ++k) ss.emplace_back(sh, 300 + 2 * k);
  return ss;
}

const Shape kShapes[] = {{4, 64, 128, 1}, {6, 18, 20, 2}};

// Exact decode of the batch against the single shot, at every listed p-tile (those up to P).
void check_exact(const Shape& sh, int cell, bool bf16, std::initializer_list<int> tiles) {
  const std::vector<Stream> ss = streams(sh);
  const cuda::ScanGrid g{true, cell, true};
  const std::vector<SeqRun> one = single_shot(sh, g, bf16, ss);
  for (int tile : tiles) {
    if (tile > sh.P) continue;
    const Forced forced(tile);
    const std::vector<SeqRun> dec = decoded(sh, g, bf16, ss);
    for (int k = 0; k < K; ++k) {
      const std::string what = sh.name() + " cell " + std::to_string(cell) + (bf16 ? " bf16" : " f32") + " tile " +
                               std::to_string(tile) + " sequence " + std::to_string(k);
      ASSERT_EQ(diff(one[k].y, dec[k].y, sh.I()), "") << what << ": rows (row = position)";
      ASSERT_EQ(diff(one[k].state, dec[k].state, sh.N), "") << what << ": final state (row = head·P + p)";
    }
  }
}

TEST(CudaSsdStep, ExactDecodeEqualsSingleShotAtOtherShapes) {
  PARITY_REQUIRE_GPU();
  int i = 0;
  for (const Shape& sh : kShapes)
    for (int cell : {16, 64}) {  // one stage of replay rows; two (the fold's sums kept between stages)
      // Sanitizer mode: one dtype a pair (the indices 0, 1, 3, 4: each shape and each cell with both).
      for (bool bf16 : test::bf16_sweep(i + i / 2)) check_exact(sh, cell, bf16, {0, 8, 16, 32, 64});
      ++i;
    }
}

// A short run of the above for compute-sanitizer (scripts/test-gpu.sh): the mixer's head, a whole
// head per block (sixteen pieces a thread, two passes of the dots), a fold over two stages.
TEST(CudaSsdStep, ExactDecodeAtTheMixerShapeWholeHead) {
  PARITY_REQUIRE_GPU();
  for (bool bf16 : {false, true}) check_exact(kShapes[0], 64, bf16, {64});
}

// The decode with its L2 prefetch of later blocks' tiles forced on (at these batches the default
// has every block resident and prefetches nothing): the addresses it forms are in bounds (this runs
// under compute-sanitizer too) and the bits do not move.
TEST(CudaSsdStep, ExactDecodeWithPrefetchEqualsSingleShot) {
  PARITY_REQUIRE_GPU();
  for (int ahead : {1, 3})
    for (bool bf16 : test::bf16_sweep(ahead / 2)) {
      const ForcedPrefetch forced(ahead);
      check_exact(kShapes[0], 16, bf16, {0, 16});
      check_exact(kShapes[1], 16, bf16, {0, 8});
    }
}

struct ForcedWay {
  explicit ForcedWay(int way) { cuda::ssd_force_decode_way(way); }
  ~ForcedWay() { cuda::ssd_force_decode_way(0); }
};

// Every schedule of the exact decode (ssd_force_decode_way: 100 + flags, the sets ssd_decode.cu builds:
// session 9's and the default's two-lane dots, quad fold and late ring) against the single shot: the
// mixer's head (a whole-head tile: the fold's rows in batches of four, 64 rows of
// dots), the odd shape at 8-row tiles (the fold's column walk does not divide the block: the old fold; a
// last tile of 2 rows), and a 64-row cell (two stages: the fold continues the partial sums).
TEST(CudaSsdStep, ExactDecodeEveryWayEqualsSingleShot) {
  PARITY_REQUIRE_GPU();
  // Every flag's code path: none (session 9's), and the default's three (late ring, quad fold, dots2).
  for (int way : {100, 1644}) {
    SCOPED_TRACE("way " + std::to_string(way));
    const ForcedWay forced(way);
    for (bool bf16 : test::bf16_sweep(way == 1644)) {
      check_exact(kShapes[0], 16, bf16, {0});
      check_exact(kShapes[1], 16, bf16, {8});
      check_exact(kShapes[0], 64, bf16, {0});
    }
  }
}

// Companion: under the new schedules the comparison still sees another grid's rows.
TEST(CudaSsdStep, CompanionEveryWayAnotherGridDiffers) {
  PARITY_REQUIRE_GPU();
  for (int way : {100, 1644}) {
    const ForcedWay forced(way);
    const Shape& sh = kShapes[0];
    const std::vector<Stream> ss = streams(sh);
    const std::vector<SeqRun> dec = decoded(sh, {true, 16, true}, true, ss);
    const std::vector<SeqRun> other = single_shot(sh, {true, 16, false}, true, ss);
    for (int k = 0; k < K; ++k)
      EXPECT_NE(diff(other[k].y, dec[k].y, sh.I()), "") << "way " << way << " sequence " << k;
  }
}

// The decode launched programmatically (set_programmatic_exact_decode; nothing before it here, so the
// wait returns at once): its L2 requests and launch leave the bits as they were.
TEST(CudaSsdStep, ExactDecodeProgrammaticEqualsSingleShot) {
  PARITY_REQUIRE_GPU();
  for (bool l2_requests : {true, false}) {
    cuda::set_programmatic_exact_decode(true, l2_requests);
    for (bool bf16 : test::bf16_sweep(l2_requests)) {
      check_exact(kShapes[0], 16, bf16, {0});
      check_exact(kShapes[1], 16, bf16, {0});
    }
  }
  cuda::set_programmatic_exact_decode_mode(cuda::kProgrammaticDecodeAuto);
}

// The check above can fail: the single shot on another grid gives other rows.
TEST(CudaSsdStep, CompanionSingleShotOnAnotherGridDiffers) {
  PARITY_REQUIRE_GPU();
  for (const Shape& sh : kShapes) {
    const std::vector<Stream> ss = streams(sh);
    const std::vector<SeqRun> dec = decoded(sh, {true, 16, true}, false, ss);
    const std::vector<SeqRun> other = single_shot(sh, {true, 8, true}, false, ss);
    for (int k = 0; k < K; ++k) EXPECT_NE(diff(other[k].y, dec[k].y, sh.I()), "") << sh.name() << " sequence " << k;
  }
}

// Where the one-row decode's index math (row_in_cell: a row's place in its head's cell from start mod
// cell) takes its other branches: a grid without stagger (every head folds at once, no first cell
// shorter than the others) and one row per cell (every row folds, nothing replayed), at the mixer's
// head and the odd shape; the staggered grid of the same cells beside them.
TEST(CudaSsdStep, ExactDecodeUnstaggeredAndOneRowCells) {
  PARITY_REQUIRE_GPU();
  int i = 0;
  for (const Shape& sh : kShapes) {
    const std::vector<Stream> ss = streams(sh);
    for (bool bf16 : test::bf16_sweep(i++))
      for (int cell : {1, 16})
        for (bool stagger : {false, true}) {
          const cuda::ScanGrid g{true, cell, stagger};
          const std::vector<SeqRun> one = single_shot(sh, g, bf16, ss);
          const std::vector<SeqRun> dec = decoded(sh, g, bf16, ss);
          for (int k = 0; k < K; ++k) {
            const std::string what = sh.name() + " cell " + std::to_string(cell) + (stagger ? " staggered" : "") +
                                     (bf16 ? " bf16" : " f32") + " sequence " + std::to_string(k);
            ASSERT_EQ(diff(one[k].y, dec[k].y, sh.I()), "") << what << ": rows (row = position)";
            ASSERT_EQ(diff(one[k].state, dec[k].state, sh.N), "") << what << ": final state (row = head·P + p)";
          }
        }
  }
}

// Plain mode's SSU against a scalar twin on the host (cuda_ssd_test.cpp's, at these shapes).
TEST(CudaSsdStep, PlainSsuEqualsItsScalarTwinAtOtherShapes) {
  PARITY_REQUIRE_GPU();
  for (const Shape& sh : kShapes) {
    const std::vector<Stream> ss = streams(sh);
    const int H = sh.H, P = sh.P, N = sh.N, I = sh.I(), GN = sh.GN(), LD = sh.LD();
    const cuda::ScanGrid g{false, 64, false};
    for (bool bf16 : {false, true})
      for (int tile : {0, 8, 16, 64}) {
        if (tile > P) continue;
        const Forced forced(tile);
        Scan scan(sh, g, bf16, K);
        std::vector<Call> calls;
        std::vector<const Stream*> from;
        for (int k = 0; k < K; ++k) {
          calls.push_back({k, 0, 10 + k});
          from.push_back(&ss[k]);
        }
        scan.pass(calls, from);  // some state to start from
        for (int step = 0; step < 3; ++step) {
          std::vector<float> S = scan.state();
          for (auto& c : calls) c = {c.slot, c.start + c.n, 1};
          scan.pass(calls, from);
          for (int k = 0; k < K; ++k) {
            const int64_t t = calls[k].start;
            const float* row = ss[k].xbc.data() + t * LD;
            std::vector<float> y_ref(I);
            for (int h = 0; h < H; ++h) {
              const int grp = h / (H / sh.G);
              const float d = ss[k].dt[t * H + h];
              const float dA = kernels::exp_f(d * scan.A[h]);
              const float *x = row + h * P, *B = row + I + grp * N, *C = row + I + GN + grp * N;
              for (int p = 0; p < P; ++p) {
                float* Sp = S.data() + ((std::size_t(k) * H + h) * P + p) * N;
                float a[4] = {0, 0, 0, 0};
                for (int n = 0; n < N; ++n) {
                  const float v = std::fma(dA, Sp[n], (d * x[p]) * B[n]);
                  Sp[n] = bf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
                  a[n % 4] = std::fma(C[n], Sp[n], a[n % 4]);
                }
                y_ref[h * P + p] = ((a[0] + a[1]) + (a[2] + a[3])) + scan.D[h] * x[p];
              }
            }
            const std::vector<float>& o = scan.out[k];
            const std::vector<float> y(o.begin() + t * I, o.begin() + (t + 1) * I);
            ASSERT_EQ(diff(y_ref, y, P), "") << sh.name() << (bf16 ? " bf16" : " f32") << " tile " << tile << " step "
                                             << step << " sequence " << k << ": y (row = head)";
          }
          ASSERT_EQ(diff(S, scan.state(), N), "") << sh.name() << (bf16 ? " bf16" : " f32") << " tile " << tile
                                                  << " step " << step << ": state (row = (slot·H + head)·P + p)";
        }
      }
  }
}

}  // namespace
}  // namespace parity
