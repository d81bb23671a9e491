// The fused walk (ssd_band.cu + ssd_walk.cu) at each of its tiles, the span walk (ssd_span.cu) and the
// lane walk (ssd_lanes.cu) where they take the shape, against the three-phase kernels they replaced: every output row, every state (fp32 and bf16) and the replay ring must have the same bits,
// on shapes that hit the tiling's edges — cells not a multiple of the 16-row chunk, P not a multiple
// of the tile, N not a multiple of 4 or 8 and above 128 (two passes), calls that start inside a cell,
// staggered heads, several groups, several sequences per pass, an x row stride that is not a multiple
// of 4 — in exact and plain mode. A companion shows that the comparison sees a small change. Plain mode's
// chunk scan (ssd_chunk.cu), whose sums have their own order, is held to the same reference within a
// tolerance and to batch invariance bit for bit (the end of the file).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/pass_plan.h"
#include "kernels_cuda/ssd_prefill.h"
#include "tests/cuda/gpu_test_support.h"
#include "tests/cuda/ssd_scan_memory.h"

namespace parity {
namespace {

using cuda::SsdPrefill;

using Shape = test::PackedShape;
using Call = test::ScanCall;
using Schedule = test::ScanSchedule;

// One sequence's inputs: xbc [T][ld], dt [T][H].
struct Stream {
  std::vector<float> xbc, dt;
  Stream(const Shape& s, int T, uint64_t seed)
      : xbc(test::uniform(std::size_t(T) * s.ld(), seed)), dt(test::uniform(std::size_t(T) * s.H, seed + 1, 0.005f, 0.1f)) {}
};

// Everything a run leaves behind: each slot's outputs, the slots' states and the replay ring.
struct Result {
  std::map<int, std::vector<float>> y;
  std::vector<float> s32, ring_x, ring_dt, ring_B;
  std::vector<uint16_t> s16;
};

class ScanRun {
 public:
  ScanRun(const Shape& sh, const cuda::ScanGrid& g, bool bf16, int slots, int T, SsdPrefill which)
      : sh_(sh), g_(g), bf16_(bf16), slots_(slots), T_(T), which_(which) {
    for (int s = 0; s < slots; ++s) streams_.emplace_back(sh, T, 1000 + 10 * s);
    const std::size_t S = std::size_t(slots) * sh.H * sh.P * sh.N;
    // A non-zero starting state, so loading it (and widening bf16) is part of what is compared.
    const std::vector<float> s0 = test::uniform(S, 77, -0.5f, 0.5f);
    if (bf16) mem_.s16.upload(test::to_bf16(s0));
    else mem_.s32.upload(s0);
    mem_.rx.upload(std::vector<float>(std::size_t(slots) * sh.H * g.cell * sh.P, 0.0f));
    mem_.rdt.upload(std::vector<float>(std::size_t(slots) * sh.H * g.cell, 0.0f));
    mem_.rb.upload(std::vector<float>(std::size_t(slots) * sh.groups * g.cell * sh.N, 0.0f));
    A_.upload([&] {
      std::vector<float> a = test::uniform(sh.H, 99, 0.5f, 2.0f);
      for (float& v : a) v = -v;
      return a;
    }());
    D_.upload(test::uniform(sh.H, 98));
  }

  void pass(const std::vector<Call>& calls) {
    const int LD = sh_.ld(), I = sh_.I();
    std::vector<cuda::SeqSpan> spans;
    std::vector<float> xbc, dt;
    for (const Call& c : calls) {
      const Stream& s = streams_[c.slot];
      spans.push_back({c.slot, c.start, c.n});
      xbc.insert(xbc.end(), s.xbc.begin() + c.start * LD, s.xbc.begin() + (c.start + c.n) * LD);
      dt.insert(dt.end(), s.dt.begin() + c.start * sh_.H, s.dt.begin() + (c.start + c.n) * sh_.H);
    }
    const int rows = static_cast<int>(dt.size() / sh_.H);
    const cuda::PassPlan plan(spans, g_);
    const cuda::PassSeqs ps = plan.upload(ints_, starts_);
    const cuda::SsdShape ssh{sh_.H, sh_.P, sh_.N, sh_.groups};
    scratch_.resize(std::max<std::size_t>(1, cuda::ssd_scratch_floats(ssh, ps, g_, which_)));
    cuda::DeviceBuffer<float> dx, ddt, dy(std::size_t(rows) * I);
    dx.upload(xbc);
    ddt.upload(dt);
    cuda::SsdState st = mem_.state(bf16_);
    cuda::ssd_scan(ssh, g_, ps, dx.data(), LD, ddt.data(), A_.data(), D_.data(), st, scratch_.data(), scratch_.size(),
                   dy.data(), nullptr, which_);
    const std::vector<float> y = dy.download(std::size_t(rows) * I);
    std::size_t r = 0;
    for (const Call& c : calls) {
      std::vector<float>& o = res_.y[c.slot];
      o.resize(std::size_t(T_) * I);
      std::copy(y.begin() + r * I, y.begin() + (r + c.n) * I, o.begin() + c.start * I);
      r += c.n;
    }
  }

  Result finish() {
    const std::size_t S = std::size_t(slots_) * sh_.H * sh_.P * sh_.N;
    if (bf16_) res_.s16 = mem_.s16.download(S);
    else res_.s32 = mem_.s32.download(S);
    res_.ring_x = mem_.rx.download(mem_.rx.size());
    res_.ring_dt = mem_.rdt.download(mem_.rdt.size());
    res_.ring_B = mem_.rb.download(mem_.rb.size());
    return std::move(res_);
  }

  std::vector<Stream>& streams() { return streams_; }

 private:
  Shape sh_;
  cuda::ScanGrid g_;
  bool bf16_;
  int slots_, T_;
  SsdPrefill which_;
  std::vector<Stream> streams_;
  test::ScanMemory mem_;
  cuda::DeviceBuffer<float> A_, D_, scratch_;
  cuda::DeviceBuffer<int32_t> ints_;
  cuda::DeviceBuffer<int64_t> starts_;
  Result res_;
};

// "" when the two arrays have the same bits; else where they first differ and both values.
template <typename V>
std::string first_difference(const std::vector<V>& a, const std::vector<V>& b, int row_len, const char* what) {
  if (a.size() != b.size()) return std::string(what) + ": sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(V)) == 0) continue;
    std::ostringstream o;
    o << what << ": first difference at " << i << " (row " << i / row_len << ", column " << i % row_len << "): ";
    if constexpr (sizeof(V) == 4) {
      uint32_t ua, ub;
      std::memcpy(&ua, &a[i], 4);
      std::memcpy(&ub, &b[i], 4);
      o << a[i] << " (0x" << std::hex << ua << ") vs " << std::dec << b[i] << " (0x" << std::hex << ub << ")";
    } else {
      o << "0x" << std::hex << a[i] << " vs 0x" << b[i];
    }
    return o.str();
  }
  return "";
}

std::string compare(const Result& want, const Result& got, const Shape& sh) {
  for (const auto& [slot, y] : want.y) {
    const auto it = got.y.find(slot);
    if (it == got.y.end()) return "slot " + std::to_string(slot) + " has no outputs";
    const std::string d = first_difference(y, it->second, sh.I(), ("y of slot " + std::to_string(slot)).c_str());
    if (!d.empty()) return d;
  }
  for (const std::string& d : {first_difference(want.s32, got.s32, sh.N, "fp32 state"),
                               first_difference(want.s16, got.s16, sh.N, "bf16 state"),
                               first_difference(want.ring_x, got.ring_x, sh.P, "ring x"),
                               first_difference(want.ring_dt, got.ring_dt, 1, "ring dt"),
                               first_difference(want.ring_B, got.ring_B, sh.N, "ring B")})
    if (!d.empty()) return d;
  return "";
}

// One sequence in one call.
Schedule whole(int T) { return {{{0, 0, T}}}; }

// One sequence in uneven calls: most start inside a cell, two are single rows (the one-row decode
// kernels; two rows where the state size is not a multiple of 4, which those kernels refuse).
Schedule uneven(int T, int one = 1) {
  Schedule s;
  int64_t pos = 0;
  for (int n : {37, one, one, 64, 5, one}) {
    if (pos + n > T) break;
    s.push_back({{0, pos, n}});
    pos += n;
  }
  if (pos < T) s.push_back({{0, pos, static_cast<int>(T - pos)}});
  return s;
}

// Slot 0's chunk in shared(): a sixteenth of the rows (sanitizer mode: a quarter), at least 9.
int shared_step(int T) { return std::max(9, T / test::pick(16, 4)); }

// Three sequences sharing passes: slot 0 in short chunks, slot 1 in uneven ones, slot 2 all at once
// in the first pass.
Schedule shared(int T, int one = 1) {
  const int step = shared_step(T);
  const Schedule u = uneven(T, one);
  Schedule s;
  int64_t pos = 0;
  for (std::size_t k = 0; pos < T || k < u.size(); ++k) {
    std::vector<Call> calls;
    if (pos < T) {
      const int n = static_cast<int>(std::min<int64_t>(step, T - pos));
      calls.push_back({0, pos, n});
      pos += n;
    }
    if (k < u.size()) calls.push_back({1, u[k][0].start, u[k][0].n});
    if (k == 0) calls.push_back({2, 0, T});
    s.push_back(calls);
  }
  return s;
}

Result run(const Shape& sh, const cuda::ScanGrid& g, bool bf16, int T, const Schedule& sched, SsdPrefill which) {
  int slots = 0;
  for (const auto& pass : sched)
    for (const Call& c : pass) slots = std::max(slots, c.slot + 1);
  ScanRun r(sh, g, bf16, slots, T, which);
  for (const auto& pass : sched) r.pass(pass);
  return r.finish();
}

struct Case {
  Shape sh;
  cuda::ScanGrid g;
  bool bf16;
  int T;
};

std::string name(const Case& c) {
  std::ostringstream o;
  o << "H " << c.sh.H << " P " << c.sh.P << " N " << c.sh.N << " groups " << c.sh.groups << " pad " << c.sh.pad
    << (c.g.exact ? " exact" : " plain")
    << " cell " << c.g.cell << (c.g.stagger ? " staggered" : "") << (c.bf16 ? " bf16" : " f32") << " T " << c.T;
  return o.str();
}

// Sanitizer mode cuts a sequence to a cell and 40 rows (a full cell, then a call that starts inside the
// next and runs past its end), and more while a schedule's last chunk would be a single row (a state
// size that is no multiple of 4 takes no one-row call).
int rows_of(const Case& c) {
  if (!test::sanitizing()) return c.T;
  int T = std::min(c.T, c.g.cell + 40);
  while (T % shared_step(T) == 1 || uneven(T, 2).back()[0].n == 1) ++T;
  return T;
}

// The three schedules every case runs: whole, uneven and shared (one-row calls take two rows where the
// state size is not a multiple of 4, which the one-row decode kernels refuse).
std::vector<std::pair<const char*, Schedule>> schedules(const Case& c, int T) {
  const int one = c.sh.N % 4 == 0 ? 1 : 2;
  return {{"whole", whole(T)}, {"uneven", uneven(T, one)}, {"shared", shared(T, one)}};
}

// Sanitizer mode also deals the ways out over the three schedules (way w of case i under schedule
// (w + i) % 3): each way still meets every schedule over a test's cases, at a third of the launches.
void expect_every_tile_matches_three_phase(const std::vector<Case>& cases) {
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    const int T = rows_of(c);
    std::size_t si = 0;
    for (const auto& [sname, sched] : schedules(c, T)) {
      const std::size_t schedule_index = si++;
      const Result want = run(c.sh, c.g, c.bf16, T, sched, SsdPrefill::three_phase);
      for (const auto& [slot, y] : want.y)  // the reference is a real scan, not NaNs or zeros equal by accident
        ASSERT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return std::isfinite(v); }) &&
                    std::any_of(y.begin(), y.end(), [](float v) { return v != 0.0f; }))
            << name(c) << ", schedule " << sname << ", slot " << slot;
      const cuda::SsdShape ssh{c.sh.H, c.sh.P, c.sh.N, c.sh.groups};
      // Automatic is the chunk scan in plain mode (its own sums: PlainChunkScan* below).
      std::vector<SsdPrefill> ways = {SsdPrefill::walk16, SsdPrefill::walk32, SsdPrefill::walk64, SsdPrefill::walk};
      if (c.g.exact) ways.push_back(SsdPrefill::automatic);
      if (cuda::ssd_span_supported(ssh, c.g)) {
        ways.push_back(SsdPrefill::span16);  // bulk copies where rows are aligned (pad 0 or 4), else cp.async
      }
      if (cuda::ssd_lanes_supported(ssh, c.g))
        for (SsdPrefill l : {SsdPrefill::lanes64, SsdPrefill::lanes64r, SsdPrefill::lanes32, SsdPrefill::lanes1x32,
                             SsdPrefill::lanes1x16, SsdPrefill::pipe64, SsdPrefill::pipe64r, SsdPrefill::pipe64t,
                             SsdPrefill::pipe64q})
          ways.push_back(l);
      for (std::size_t wi = 0; wi < ways.size(); ++wi) {
        if (test::sanitizing() && (wi + ci) % 3 != schedule_index) continue;
        const SsdPrefill w = ways[wi];
        const std::string d = compare(want, run(c.sh, c.g, c.bf16, T, sched, w), c.sh);
        EXPECT_EQ(d, "") << name(c) << ", schedule " << sname << ", walk tile " << static_cast<int>(w);
      }
    }
  }
}

TEST(CudaSsdTiling, WalkMatchesThreePhaseAtTheModelShape) {
  PARITY_REQUIRE_GPU();
  const Shape m{2, 64, 128, 1};  // mamba2's head: P 64, N 128
  expect_every_tile_matches_three_phase({{m, {true, 16, true}, false, 300},
                                         {m, {true, 64, true}, false, 300},
                                         {m, {true, 256, true}, false, 300},
                                         {m, {true, 16, true}, true, 300},
                                         {m, {true, 32, false}, true, 150},
                                         {m, {false, 64, false}, false, 300},
                                         {m, {false, 256, false}, true, 300}});
}

TEST(CudaSsdTiling, WalkMatchesThreePhaseAtRaggedShapes) {
  PARITY_REQUIRE_GPU();
  const Shape a{4, 40, 20, 2};   // P not a multiple of any tile; N % 8 = 4
  const Shape b{3, 24, 18, 1};   // N % 4 = 2: the quarter sums' tail (calls of two rows, not one)
  const Shape c{2, 72, 136, 2};  // P above one 64-tile; N above 128: two passes of the delta
  const Shape d{6, 16, 32, 3};   // three groups of two heads
  expect_every_tile_matches_three_phase({{a, {true, 5, true}, false, 150},
                                         {a, {true, 23, true}, true, 150},
                                         {a, {false, 23, false}, false, 150},
                                         {b, {true, 1, true}, false, 60},
                                         {b, {true, 16, true}, true, 150},
                                         {b, {true, 48, true}, false, 150},
                                         {c, {true, 16, true}, false, 150},
                                         {c, {true, 100, true}, true, 150},
                                         {c, {false, 48, false}, false, 150},
                                         {d, {true, 8, true}, true, 150},
                                         {d, {true, 32, true}, false, 150},
                                         {d, {false, 16, false}, false, 150}});
}

// The span walk (ssd_span.cu) at every grid it takes (G = 16, 32, 64: 4, 2 and 1 cells per span), on
// shapes at its edges: P not a multiple of its 16 columns, N below 128 (idle state lanes), several
// groups, bf16 states, spans cut short by the call's end, calls that start inside a cell.
TEST(CudaSsdTiling, SpanWalkMatchesThreePhase) {
  PARITY_REQUIRE_GPU();
  const Shape m{2, 64, 128, 1};
  const Shape a{4, 40, 20, 2};  // P = 40: the third tile of 16 columns is half empty; N = 20
  const Shape d{6, 16, 32, 3};  // three groups of two heads
  const Shape e{3, 48, 64, 1};  // N = 64: half the state lanes idle
  for (const Shape& sh : {m, a, d, e})
    for (int cell : {16, 32, 64})
      ASSERT_TRUE(cuda::ssd_span_supported({sh.H, sh.P, sh.N, sh.groups}, {true, cell, true})) << "cell " << cell;
  // The same shapes with 16-byte aligned rows: the span walk copies them by the TMA unit.
  const Shape m0{2, 64, 128, 1, 0}, a0{4, 40, 20, 2, 4}, d0{6, 16, 32, 3, 0}, e0{3, 48, 64, 1, 0};
  expect_every_tile_matches_three_phase({{m0, {true, 16, true}, false, 300},
                                         {m0, {true, 64, true}, true, 200},
                                         {m0, {false, 32, false}, false, 200},
                                         {a0, {true, 16, true}, true, 150},
                                         {a0, {true, 32, true}, false, 150},
                                         {d0, {true, 16, true}, false, 150},
                                         {e0, {true, 64, true}, false, 150},
                                         {e0, {false, 16, false}, true, 150}});
  expect_every_tile_matches_three_phase({{m, {true, 32, true}, false, 300},
                                         {m, {false, 16, false}, true, 200},
                                         {m, {true, 16, false}, false, 97},
                                         {a, {true, 16, true}, false, 150},
                                         {a, {true, 32, true}, true, 150},
                                         {a, {true, 64, true}, false, 200},
                                         {a, {false, 16, false}, false, 150},
                                         {d, {true, 16, true}, true, 150},
                                         {d, {false, 32, false}, false, 150},
                                         {e, {true, 16, true}, false, 230},
                                         {e, {true, 64, true}, true, 150}});
}

// The lane walk (ssd_lanes.cu) at cells of up to 16 rows, on shapes at its edges: P below and above
// its 64 columns (idle lanes, a second block of columns), N below 128 and not a multiple of 16 (a
// quarter's last float4 partly idle), cells of 1, 5 and 16 rows, staggered and not, several groups,
// bf16 states, calls that start inside a cell, rows not 16-byte aligned (pad 3) and aligned (pad 0).
TEST(CudaSsdTiling, LaneWalkMatchesThreePhase) {
  PARITY_REQUIRE_GPU();
  const Shape m{2, 64, 128, 1}, m0{2, 64, 128, 1, 0};
  const Shape a{4, 40, 20, 2};   // P = 40: 24 of the 64 columns idle; N = 20: 5 values a quarter
  const Shape c{2, 72, 36, 2};   // P = 72: a second block of 8 columns; N = 36: 9 values a quarter
  const Shape d{6, 16, 32, 3};   // three groups of two heads
  for (const Shape& sh : {m, a, c, d})
    for (int cell : {1, 5, 8, 16})
      ASSERT_TRUE(cuda::ssd_lanes_supported({sh.H, sh.P, sh.N, sh.groups}, {true, cell, true})) << "cell " << cell;
  expect_every_tile_matches_three_phase({{m, {true, 16, true}, false, 300},
                                         {m0, {true, 16, true}, true, 300},
                                         {m, {true, 16, false}, false, 97},
                                         {m0, {false, 16, false}, false, 200},
                                         {a, {true, 5, true}, true, 150},
                                         {a, {false, 16, false}, false, 150},
                                         {c, {true, 16, true}, false, 150},
                                         {c, {true, 8, true}, true, 150},
                                         {d, {true, 16, true}, true, 150},
                                         {d, {true, 1, true}, false, 60}});
}

// What the lane walk takes and what it leaves to the others (ssd_scan throws if it is named for one).
TEST(CudaSsdTiling, LaneWalkShapes) {
  PARITY_REQUIRE_GPU();
  const cuda::SsdShape m{32, 64, 128, 1};
  EXPECT_TRUE(cuda::ssd_lanes_supported(m, {true, 16, true}));
  EXPECT_TRUE(cuda::ssd_lanes_supported(m, {false, 16, false}));
  EXPECT_FALSE(cuda::ssd_lanes_supported(m, {true, 17, true}));                // a cell above 16 rows
  EXPECT_FALSE(cuda::ssd_lanes_supported(m, {false, 256, false}));             // plain mode's chunks
  EXPECT_FALSE(cuda::ssd_lanes_supported({32, 64, 132, 1}, {true, 16, true}));  // N above 128
  EXPECT_FALSE(cuda::ssd_lanes_supported({32, 64, 18, 1}, {true, 16, true}));   // N not a multiple of 4
}

// What the span walk takes and what it leaves to the walk (ssd_scan throws if it is named for one).
TEST(CudaSsdTiling, SpanWalkShapes) {
  PARITY_REQUIRE_GPU();
  const cuda::SsdShape m{32, 64, 128, 1};
  EXPECT_TRUE(cuda::ssd_span_supported(m, {true, 16, true}));
  EXPECT_TRUE(cuda::ssd_span_supported(m, {false, 64, false}));
  EXPECT_FALSE(cuda::ssd_span_supported(m, {true, 8, true}));     // cells below a 16-row block
  EXPECT_FALSE(cuda::ssd_span_supported(m, {true, 48, true}));    // 64 / 48 is not a whole number of cells
  EXPECT_FALSE(cuda::ssd_span_supported(m, {false, 256, false})); // one cell is more than a span
  EXPECT_FALSE(cuda::ssd_span_supported({32, 64, 136, 1}, {true, 16, true}));  // N above 128
  EXPECT_FALSE(cuda::ssd_span_supported({32, 64, 18, 1}, {true, 16, true}));   // N not a multiple of 4
}

// Companion: the comparison is not blind. One x value changed in its fourth significant digit
// changes its own row's output (not an earlier one) and the state.
TEST(CudaSsdTiling, CompanionASmallChangeInOneInputIsSeen) {
  PARITY_REQUIRE_GPU();
  const Shape sh{2, 64, 128, 1};
  const cuda::ScanGrid g{true, 16, true};
  const Result want = run(sh, g, false, 150, whole(150), SsdPrefill::three_phase);
  ScanRun r(sh, g, false, 1, 150, SsdPrefill::walk64);
  r.streams()[0].xbc[std::size_t(20) * sh.ld() + 5] *= 1.001f;  // row 20, head 0, p 5
  for (const auto& pass : whole(150)) r.pass(pass);
  const Result got = r.finish();
  const std::string dy = first_difference(want.y.at(0), got.y.at(0), sh.I(), "y");
  EXPECT_NE(dy.find("(row 20, column 5)"), std::string::npos) << dy;
  EXPECT_NE(first_difference(want.s32, got.s32, sh.N, "state"), "");
}

// The same for the span walk, the lane walk and the pipelined lane walk: x of row 37 (the third cell of the first span at
// G = 16) changed in its fourth significant digit changes that row's output first, and the state.
TEST(CudaSsdTiling, CompanionTheSpanWalkSeesASmallChange) {
  PARITY_REQUIRE_GPU();
  const cuda::ScanGrid g{true, 16, true};
  for (const auto& [sh, way] : {std::pair<Shape, SsdPrefill>{{2, 64, 128, 1}, SsdPrefill::span16},
                                {{2, 64, 128, 1, 0}, SsdPrefill::span16},
                                {{2, 64, 128, 1}, SsdPrefill::lanes64},
                                {{2, 64, 128, 1, 0}, SsdPrefill::lanes1x16},
                                {{2, 64, 128, 1}, SsdPrefill::pipe64},
                                {{2, 64, 128, 1, 0}, SsdPrefill::pipe64r},
                                {{2, 64, 128, 1}, SsdPrefill::pipe64t},
                                {{2, 64, 128, 1, 0}, SsdPrefill::pipe64q}}) {
    const Result want = run(sh, g, false, 150, whole(150), SsdPrefill::three_phase);
    const Result same = run(sh, g, false, 150, whole(150), way);
    EXPECT_EQ(compare(want, same, sh), "") << "way " << static_cast<int>(way);
    ScanRun r(sh, g, false, 1, 150, way);
    r.streams()[0].xbc[std::size_t(37) * sh.ld() + 5] *= 1.001f;  // row 37, head 0, p 5
    for (const auto& pass : whole(150)) r.pass(pass);
    const Result got = r.finish();
    const std::string dy = first_difference(want.y.at(0), got.y.at(0), sh.I(), "y");
    EXPECT_NE(dy.find("(row 37, column 5)"), std::string::npos) << "way " << static_cast<int>(way) << ": " << dy;
    EXPECT_NE(first_difference(want.s32, got.s32, sh.N, "state"), "") << "way " << static_cast<int>(way);
  }
}

// ---- plain mode's chunk scan (ssd_chunk.cu) ------------------------------------------------------------
// Its sums run in their own order, so it is held to the three-phase kernels within a tolerance (the same
// function of the same inputs), and to rule 1 bit for bit: a sequence's rows and state do not depend on
// the other sequences of its pass or on where its rows sit in it.

// max |got − want| over max |want|, over every slot's outputs (or the states).
double relative_error(const std::vector<float>& want, const std::vector<float>& got) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size() && i < got.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return want.size() == got.size() && scale > 0 ? diff / scale : 1.0;
}
std::vector<float> widened(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const uint32_t u = static_cast<uint32_t>(v[i]) << 16;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

// fp32 state: the two orders of the same fp32 sums (chunks of up to 256 rows) agree to ~1e-6 of the
// largest output; bf16 state: a fold's result may round to the next bf16 value in one order and not
// the other (2^-8 of that element), and later rows carry it.
void expect_chunk_scan_near_three_phase(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    const int T = rows_of(c);
    const double tol = c.bf16 ? 1e-2 : 2e-5;
    for (const auto& [sname, sched] : schedules(c, T)) {
      const Result want = run(c.sh, c.g, c.bf16, T, sched, SsdPrefill::three_phase);
      const Result got = run(c.sh, c.g, c.bf16, T, sched, SsdPrefill::chunked);
      const Result dflt = run(c.sh, c.g, c.bf16, T, sched, SsdPrefill::automatic);
      EXPECT_EQ(compare(got, dflt, c.sh), "") << name(c) << ", " << sname << ": automatic is the chunk scan";
      for (const auto& [slot, y] : want.y) {
        const double e = relative_error(y, got.y.at(slot));
        EXPECT_LT(e, tol) << name(c) << ", " << sname << ", slot " << slot;
        EXPECT_GT(e, 0.0) << name(c) << ", " << sname << ", slot " << slot << ": other sums, other bits expected";
        std::printf("[chunk scan] %s, %s, slot %d: y %.3g\n", name(c).c_str(), sname, slot, e);
      }
      const double es = c.bf16 ? relative_error(widened(want.s16), widened(got.s16)) : relative_error(want.s32, got.s32);
      EXPECT_LT(es, tol) << name(c) << ", " << sname << ": state";
      std::printf("[chunk scan] %s, %s: state %.3g\n", name(c).c_str(), sname, es);
    }
  }
}

TEST(CudaSsdTiling, PlainChunkScanAgreesWithThreePhase) {
  PARITY_REQUIRE_GPU();
  const Shape m{2, 64, 128, 1}, m0{2, 64, 128, 1, 0};
  const Shape a{4, 40, 20, 2};   // P = 40: 24 of the 64 columns idle; N = 20: a stage of n cut short
  const Shape c{2, 72, 136, 2};  // P = 72: a second tile of columns; N = 136: five stages of n
  const Shape d{6, 16, 32, 3};   // three groups of two heads
  expect_chunk_scan_near_three_phase({{m, {false, 256, false}, false, 600},
                                      {m0, {false, 256, false}, true, 600},
                                      {m, {false, 64, false}, false, 300},
                                      {a, {false, 23, false}, false, 150},
                                      {a, {false, 100, false}, true, 150},
                                      {c, {false, 48, false}, false, 150},
                                      {c, {false, 256, false}, true, 300},
                                      {d, {false, 16, false}, false, 150},
                                      {d, {false, 1, false}, true, 60}});
}

TEST(CudaSsdTiling, ChunkScanRefusesExactMode) {
  PARITY_REQUIRE_GPU();
  const Shape m{2, 64, 128, 1};
  EXPECT_THROW(run(m, {true, 16, true}, false, 40, whole(40), SsdPrefill::chunked), Error);
}

// Slot 0 alone in its pass, or beside two other sequences with its rows 37 + T rows further on: the same
// bits (outputs and final state). The sequences share the slots' buffers in both runs.
Result slot0_in(const Shape& sh, const cuda::ScanGrid& g, bool bf16, int T, bool crowded) {
  const Schedule alone = {{{0, 0, T}}, {{1, 0, 37}, {2, 0, T}}};
  const Schedule beside = {{{1, 0, 37}, {2, 0, T}, {0, 0, T}}};
  return run(sh, g, bf16, T, crowded ? beside : alone, SsdPrefill::automatic);
}
std::vector<float> slot_state(const Result& r, const Shape& sh, int slot) {
  const std::size_t n = std::size_t(sh.H) * sh.P * sh.N;
  const std::vector<float> all = r.s32.empty() ? widened(r.s16) : r.s32;
  return {all.begin() + slot * n, all.begin() + (slot + 1) * n};
}

TEST(CudaSsdTiling, PlainChunkScanRowsDoNotDependOnTheBatch) {
  PARITY_REQUIRE_GPU();
  for (const auto& [sh, bf16] : {std::pair<Shape, bool>{{2, 64, 128, 1}, false}, {{2, 64, 128, 1}, true},
                                 {{4, 40, 20, 2}, false}}) {
    const cuda::ScanGrid g{false, 256, false};
    const int T = test::pick(600, 300);
    const Result a = slot0_in(sh, g, bf16, T, false), b = slot0_in(sh, g, bf16, T, true);
    EXPECT_EQ(first_difference(a.y.at(0), b.y.at(0), sh.I(), "y"), "") << "P " << sh.P << (bf16 ? " bf16" : "");
    EXPECT_EQ(first_difference(slot_state(a, sh, 0), slot_state(b, sh, 0), sh.N, "state"), "");
  }
}

// Companion: the same comparison sees plain mode's schedule dependence. Slot 0 cut into two calls at
// row 37 restarts the chunks there, so the rows from 37 on (and the state) take other bits; the rows
// before the cut are the same function of the same rows.
TEST(CudaSsdTiling, CompanionPlainChunkScanRowsDependOnTheCut) {
  PARITY_REQUIRE_GPU();
  const Shape sh{2, 64, 128, 1};
  const cuda::ScanGrid g{false, 256, false};
  const int T = 300;
  const Result a = run(sh, g, false, T, {{{0, 0, T}}}, SsdPrefill::automatic);
  const Result b = run(sh, g, false, T, {{{0, 0, 37}}, {{0, 37, T - 37}}}, SsdPrefill::automatic);
  const std::string dy = first_difference(a.y.at(0), b.y.at(0), sh.I(), "y");
  EXPECT_NE(dy, "");
  const std::vector<float> head(a.y.at(0).begin(), a.y.at(0).begin() + 37 * sh.I());
  const std::vector<float> head_b(b.y.at(0).begin(), b.y.at(0).begin() + 37 * sh.I());
  EXPECT_EQ(first_difference(head, head_b, sh.I(), "y before the cut"), "");
  EXPECT_NE(first_difference(a.s32, b.s32, sh.N, "state"), "");
}

}  // namespace
}  // namespace parity
