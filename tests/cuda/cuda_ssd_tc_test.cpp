// The tensor-core cell walk (ssd_tc.cu) against ssd_scan's fp32 walk (which the tiling tests hold
// to the three-phase kernels bit for bit, and cuda_ssd_test to the CPU's reference scan within 2e-5 in
// the same measure): the same function up to the products' rounding.
// Error: max |tc − fp32| over a tensor divided by max |fp32| of it (y of every call; the final state).
// Stated tolerances (the walk's accuracy claim; the measured values are printed):
//   bf16 products (vLLM's chunk scan): y and state within 1e-2;  split products (bf16 hi + lo): 2e-5
//   (with a bf16 state: the state within 1e-2 and the split's y within 4e-3, see tol_y).
// Measured on an H200 (2 × 520 rows, 32 heads, fp32 state): bf16 y 1.97e-3, state 2.65e-3; split y 3.86e-6,
// state 4.61e-6. bf16 state: bf16 y 1.46e-3, state 5.41e-3; split y 2.54e-4, state 2.70e-3.
// Beyond the tolerance: the walk's own bits do not depend on its block shape, nor (exact mode) on how
// the sequence is cut into calls, and the replay ring holds what ssd_scan's holds. Companions show
// that the error check sees the D skip left out and the bit checks see a changed input.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "backend_cuda/backend.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/pass_plan.h"
#include "kernels_cuda/ssd_prefill.h"
#include "kernels_cuda/ssd_tc.h"
#include "kernels_cuda/ssd_tc_kernels.h"
#include "kernels_cuda/stream.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "tests/cuda/cell_band_cover.h"
#include "tests/cuda/gpu_test_support.h"
#include "tests/cuda/ssd_scan_memory.h"
#include "tests/cuda/wgmma_chain.h"

namespace parity {
namespace {

using kernels::ScanProducts;

constexpr double kTolBf16 = 1e-2, kTolSplit = 2e-5;
// With a bf16 state both walks round it at every fold, so one differing product can flip a rounding
// (2^-8 of that element): the state is then held to 1e-2 whatever the products, and the split's y to 4e-3.
double tol_y(ScanProducts p, bool bf16_state) {
  return p == ScanProducts::bfloat16 ? kTolBf16 : bf16_state ? 4e-3 : kTolSplit;
}
double tol_state(ScanProducts p, bool bf16_state) {
  return bf16_state ? 1e-2 : p == ScanProducts::bfloat16 ? kTolBf16 : kTolSplit;
}

using Shape = test::PackedShape;
using Call = test::ScanCall;
using Schedule = test::ScanSchedule;

// float32 (the default): ssd_scan's automatic way; else ssd_tc_scan with these products and this way.
struct Path {
  ScanProducts products = ScanProducts::float32;
  cuda::SsdTcWay way;
  bool tc() const { return products != ScanProducts::float32; }
};

Path tc(int wp, int ks, ScanProducts prod) { return {prod, {wp, ks}}; }

struct Result {
  std::map<int, std::vector<float>> y;  // per slot, [T][H·P]
  std::vector<float> state;             // fp32, or the bf16 state widened
  std::vector<float> ring_x, ring_dt, ring_B;
};

struct Inputs {
  std::vector<std::vector<float>> xbc, dt;  // per slot
};

Inputs make_inputs(const Shape& sh, int slots, int T) {
  Inputs in;
  for (int s = 0; s < slots; ++s) {
    in.xbc.push_back(test::uniform(std::size_t(T) * sh.ld(), 500 + 10 * s));
    in.dt.push_back(test::uniform(std::size_t(T) * sh.H, 501 + 10 * s, 0.005f, 0.1f));
  }
  return in;
}

Result run(const Shape& sh, const cuda::ScanGrid& g, bool bf16, int T, const Inputs& in, const Schedule& sched,
           Path path, float d_offset = 0.0f) {
  const int slots = static_cast<int>(in.xbc.size());
  const cuda::SsdShape ssh{sh.H, sh.P, sh.N, sh.groups};
  test::ScanMemory mem;
  const std::size_t S = std::size_t(slots) * sh.H * sh.P * sh.N;
  const std::vector<float> s0 = test::uniform(S, 77, -0.5f, 0.5f);  // a non-zero start state
  if (bf16) mem.s16.upload(test::to_bf16(s0));
  else mem.s32.upload(s0);
  mem.rx.upload(std::vector<float>(std::size_t(slots) * sh.H * g.cell * sh.P, 0.0f));
  mem.rdt.upload(std::vector<float>(std::size_t(slots) * sh.H * g.cell, 0.0f));
  mem.rb.upload(std::vector<float>(std::size_t(slots) * sh.groups * g.cell * sh.N, 0.0f));
  cuda::DeviceBuffer<float> A, D, scratch;
  A.upload([&] {
    std::vector<float> a = test::uniform(sh.H, 99, 0.5f, 2.0f);
    for (float& v : a) v = -v;
    return a;
  }());
  D.upload([&] {
    std::vector<float> d = test::uniform(sh.H, 98);
    for (float& v : d) v += d_offset;
    return d;
  }());
  cuda::DeviceBuffer<int32_t> ints;
  cuda::DeviceBuffer<int64_t> starts;
  Result res;
  const int LD = sh.ld(), I = sh.I();
  for (const auto& pass : sched) {
    std::vector<cuda::SeqSpan> spans;
    std::vector<float> xbc, dt;
    for (const Call& c : pass) {
      spans.push_back({c.slot, c.start, c.n});
      const auto& x = in.xbc[c.slot];
      const auto& d = in.dt[c.slot];
      xbc.insert(xbc.end(), x.begin() + c.start * LD, x.begin() + (c.start + c.n) * LD);
      dt.insert(dt.end(), d.begin() + c.start * sh.H, d.begin() + (c.start + c.n) * sh.H);
    }
    const int rows = static_cast<int>(dt.size() / sh.H);
    cuda::ScanGrid pg = g;
    pg.products = path.products;
    const cuda::PassPlan plan(spans, g);
    const cuda::PassSeqs ps = plan.upload(ints, starts);
    scratch.resize(std::max<std::size_t>(
        1, path.tc() ? cuda::ssd_tc_scratch_floats(ssh, ps, pg) : cuda::ssd_scratch_floats(ssh, ps, g)));
    cuda::DeviceBuffer<float> dx, ddt, dy(std::size_t(rows) * I);
    dx.upload(xbc);
    ddt.upload(dt);
    const cuda::SsdState st = mem.state(bf16);
    if (path.way.programmatic > 0) {
      // A stream of its own, as the model's: the copies above ran on the legacy stream, which it does not wait for.
      cuda::cuda_check(cudaDeviceSynchronize(), "before the programmatic pass");
      const cuda::Stream stream;
      cuda::ssd_tc_scan(ssh, pg, ps, dx.data(), LD, ddt.data(), A.data(), D.data(), st, scratch.data(), scratch.size(),
                        dy.data(), stream.get(), path.way);
      stream.sync("the programmatic pass");
    } else if (path.tc())
      cuda::ssd_tc_scan(ssh, pg, ps, dx.data(), LD, ddt.data(), A.data(), D.data(), st, scratch.data(), scratch.size(),
                        dy.data(), nullptr, path.way);
    else
      cuda::ssd_scan(ssh, g, ps, dx.data(), LD, ddt.data(), A.data(), D.data(), st, scratch.data(), scratch.size(),
                     dy.data(), nullptr);
    const std::vector<float> y = dy.download(std::size_t(rows) * I);
    std::size_t r = 0;
    for (const Call& c : pass) {
      std::vector<float>& o = res.y[c.slot];
      o.resize(std::size_t(T) * I);
      std::copy(y.begin() + r * I, y.begin() + (r + c.n) * I, o.begin() + c.start * I);
      r += c.n;
    }
  }
  if (bf16) {
    const std::vector<uint16_t> s = mem.s16.download(S);
    res.state.resize(S);
    for (std::size_t i = 0; i < S; ++i) res.state[i] = bf16_to_f32(s[i]);
  } else {
    res.state = mem.s32.download(S);
  }
  res.ring_x = mem.rx.download(mem.rx.size());
  res.ring_dt = mem.rdt.download(mem.rdt.size());
  res.ring_B = mem.rb.download(mem.rb.size());
  return res;
}

// max |a − b| / max |b|.
double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    d = std::max(d, std::fabs(double(a[i]) - b[i]));
    m = std::max(m, std::fabs(double(b[i])));
  }
  return m > 0 ? d / m : d;
}

struct Errors {
  double y = 0, y_rms = 0, state = 0, state_rms = 0;
};

Errors errors(const Result& got, const Result& want) {
  Errors e;
  std::vector<float> gy, wy;
  for (const auto& [slot, y] : want.y) {
    wy.insert(wy.end(), y.begin(), y.end());
    const auto& o = got.y.at(slot);
    gy.insert(gy.end(), o.begin(), o.end());
  }
  e.y = max_rel(gy, wy);
  e.y_rms = test::relative_error(gy, wy.data());
  e.state = max_rel(got.state, want.state);
  e.state_rms = test::relative_error(got.state, want.state.data());
  return e;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool same_bits(const Result& a, const Result& b) {
  for (const auto& [slot, y] : a.y)
    if (!b.y.count(slot) || !same_bits(y, b.y.at(slot))) return false;
  return same_bits(a.state, b.state) && same_bits(a.ring_x, b.ring_x) && same_bits(a.ring_dt, b.ring_dt) &&
         same_bits(a.ring_B, b.ring_B);
}

Schedule whole(int slots, int T) {
  std::vector<Call> pass;
  for (int s = 0; s < slots; ++s) pass.push_back({s, 0, T});
  return {pass};
}
// Each slot's calls in order, call k of every slot in pass k.
Schedule passes_of(const std::vector<std::vector<Call>>& calls) {
  Schedule s;
  for (std::size_t k = 0;; ++k) {
    std::vector<Call> pass;
    for (const auto& c : calls)
      if (k < c.size()) pass.push_back(c[k]);
    if (pass.empty()) break;
    s.push_back(pass);
  }
  return s;
}
// Each slot in calls of uneven lengths (most start inside a cell; none of one row: `decoding` below has
// those), call k of every slot in pass k.
Schedule uneven(int slots, int T) {
  const int lengths[] = {37, 64, 5, 2, 90, 23};
  std::vector<std::vector<Call>> calls(slots);
  for (int sl = 0; sl < slots; ++sl)
    for (int64_t pos = 0, k = 0; pos < T; ++k) {
      const int n = static_cast<int>(std::min<int64_t>(lengths[(k + sl) % 6], T - pos));
      calls[sl].push_back({sl, pos, n});
      pos += n;
    }
  return passes_of(calls);
}

const char* name(ScanProducts p) { return p == ScanProducts::split ? "split" : "bf16"; }

// The bench's head (32 heads of 64, state 128: every stagger offset 0..15), two sequences of 520 rows
// (the last cell open), fp32 and bf16 state.
TEST(CudaSsdTc, WithinToleranceOfTheFp32WalkAtTheModelShape) {
  PARITY_REQUIRE_GPU();
  const Shape sh{32, 64, 128, 1};
  const cuda::ScanGrid g{true, 16, true};
  const int T = 520;
  const Inputs in = make_inputs(sh, 2, T);
  for (bool bf16 : {false, true}) {
    const Result want = run(sh, g, bf16, T, in, whole(2, T), {});
    Errors e[2];
    for (ScanProducts prod : {ScanProducts::bfloat16, ScanProducts::split}) {
      const Result got = run(sh, g, bf16, T, in, whole(2, T), tc(0, 0, prod));
      Errors& err = e[prod == ScanProducts::split ? 1 : 0];
      err = errors(got, want);
      std::printf("[tc] state %s, products %s: y max-rel %.3e (rms %.3e), state max-rel %.3e (rms %.3e)\n",
                  bf16 ? "bf16" : "fp32", name(prod), err.y, err.y_rms, err.state, err.state_rms);
      EXPECT_LE(err.y, tol_y(prod, bf16)) << name(prod);
      EXPECT_LE(err.state, tol_state(prod, bf16)) << name(prod);
      EXPECT_TRUE(same_bits(got.ring_x, want.ring_x) && same_bits(got.ring_dt, want.ring_dt) &&
                  same_bits(got.ring_B, want.ring_B))
          << "ring";
    }
    // The products really are rounded (past the split's tolerance), and the split really is finer.
    EXPECT_GT(e[0].y, kTolSplit);
    if (!bf16) {
      EXPECT_LT(e[1].y_rms * 20, e[0].y_rms);
    }
  }
}

// The walk's bits: the same for every block shape (warps over p and over n: the quarters of C·Sᵀ
// summed by another warp), and (exact mode) for any cut of the sequences into calls, passes shared by
// several sequences, calls starting inside cells (the walk's general copies) and whole cells (its
// branch-free ones); rows not 16-byte aligned (pad 3: general copies only) and aligned (pad 0); several
// groups; P of 32 (one or two warps over p).
TEST(CudaSsdTc, BitsDoNotDependOnTheBlockShapeOrSchedule) {
  PARITY_REQUIRE_GPU();
  const cuda::ScanGrid g{true, 16, true};
  int si = 0;
  for (const Shape& sh : {Shape{8, 64, 128, 1}, Shape{6, 32, 128, 2, 0}})
    for (bool bf16 : test::bf16_sweep(si++))
      for (ScanProducts prod : {ScanProducts::bfloat16, ScanProducts::split}) {
        const int T = test::pick(300, 100), slots = 3;  // sanitizer mode: six cells and an open one
        const Inputs in = make_inputs(sh, slots, T);
        const Result ref = run(sh, g, bf16, T, in, whole(slots, T), tc(1, 1, prod));
        const Result fp32 = run(sh, g, bf16, T, in, whole(slots, T), {});
        const Errors e = errors(ref, fp32);
        EXPECT_LE(e.y, tol_y(prod, bf16));
        for (const auto& [wp, ks] : {std::pair{1, 1}, {2, 1}, {4, 1}, {1, 2}, {2, 2}, {4, 2}, {1, 4}, {2, 4}, {4, 4}})
          for (const auto& [sname, sched] : {std::pair<const char*, Schedule>{"whole", whole(slots, T)},
                                              {"uneven", uneven(slots, T)}}) {
            if (sh.P % (16 * wp) != 0 || (wp == 1 && ks == 1 && std::string(sname) == "whole")) continue;
            EXPECT_TRUE(same_bits(run(sh, g, bf16, T, in, sched, tc(wp, ks, prod)), ref))
                << "H " << sh.H << " P " << sh.P << " groups " << sh.groups << (bf16 ? " bf16" : " fp32") << " "
                << name(prod) << " warps " << wp << " x " << ks << " schedule " << sname;
          }
      }
}

// Calls that decode: each slot prefills a few rows, then goes on mostly one row a call with a multi-row call now
// and then, the slots out of step, so that passes mix one-row and multi-row calls (call k of every slot in
// pass k).
Schedule decoding(int slots, int T) {
  std::vector<std::vector<Call>> calls(slots);
  for (int sl = 0; sl < slots; ++sl)
    for (int64_t pos = 0, k = 0; pos < T; ++k) {
      const int want = k == 0 ? 3 + 13 * sl : (k + 3 * sl) % 9 == 0 ? 2 + static_cast<int>(k % 5) * 7 : 1;
      const int n = static_cast<int>(std::min<int64_t>(want, T - pos));
      calls[sl].push_back({sl, pos, n});
      pos += n;
    }
  return passes_of(calls);
}

// A sweep's case in a failure's message: the shape, the state dtype and the products.
std::string sweep_case(const Shape& sh, bool bf16, ScanProducts prod) {
  return "H " + std::to_string(sh.H) + " P " + std::to_string(sh.P) + " groups " + std::to_string(sh.groups) +
         (bf16 ? " bf16 " : " fp32 ") + name(prod);
}

// The one-row decode on the walk's steps (ssd_tc_decode.cu): rows decoded one at a time, beside prefills in the
// same passes, have the bits one whole call gives them, and leave the same state and replay ring; both
// product precisions, both state dtypes, 64 and 32 columns of p a head (four and two warps a block), one and
// two groups. Companion: the fp32 walk's decode on the same schedule (what a decoded row was before this
// kernel) does not.
TEST(CudaSsdTc, DecodedRowsHaveTheWalksBits) {
  PARITY_REQUIRE_GPU();
  const cuda::ScanGrid g{true, 16, true};
  int si = 0;
  for (const Shape& sh : {Shape{8, 64, 128, 1}, Shape{6, 32, 128, 2, 0}})
    for (bool bf16 : test::bf16_sweep(si++))
      for (ScanProducts prod : {ScanProducts::bfloat16, ScanProducts::split}) {
        const int T = test::pick(200, 60), slots = 3;
        const Inputs in = make_inputs(sh, slots, T);
        const Result ref = run(sh, g, bf16, T, in, whole(slots, T), tc(0, 0, prod));
        const Result dec = run(sh, g, bf16, T, in, decoding(slots, T), tc(0, 0, prod));
        const std::string what = sweep_case(sh, bf16, prod);
        for (const auto& [slot, y] : ref.y) {
          const std::vector<float>& d = dec.y.at(slot);
          std::size_t first = 0;
          while (first < y.size() && std::memcmp(&y[first], &d[first], 4) == 0) ++first;
          EXPECT_EQ(first, y.size()) << what << ": slot " << slot << " first differs at row " << first / sh.I()
                                     << " column " << first % sh.I();
        }
        EXPECT_TRUE(same_bits(dec, ref)) << what << " (state or ring)";
        EXPECT_FALSE(same_bits(run(sh, g, bf16, T, in, decoding(slots, T), {}), ref)) << what << " (companion)";
      }
}

// The bit tests' sweep: both shapes (one group with P 64; two groups with P 32 and unaligned rows), both state dtypes
// (test::bf16_sweep), both products; 3 slots of T rows each. f(sh, bf16, prod, T, slots, inputs, what).
template <class F>
void for_each_case(F&& f) {
  int si = 0;
  for (const Shape& sh : {Shape{8, 64, 128, 1}, Shape{6, 32, 128, 2, 0}})
    for (bool bf16 : test::bf16_sweep(si++))
      for (ScanProducts prod : {ScanProducts::bfloat16, ScanProducts::split}) {
        const int T = test::pick(300, 100), slots = 3;
        f(sh, bf16, prod, T, slots, make_inputs(sh, slots, T), sweep_case(sh, bf16, prod));
      }
}
// Whole calls, calls starting inside cells, and one-row calls beside prefills.
std::vector<std::pair<const char*, Schedule>> schedules(int slots, int T) {
  return {{"whole", whole(slots, T)}, {"uneven", uneven(slots, T)}, {"decoding", decoding(slots, T)}};
}

// The relay (ssd_tc_relay.cu: one to four cells a round formed in parallel, the fold chained by 1, 2 or 4 warps) has
// the walk's bits: every schedule (whole calls, calls starting inside cells, calls of one row beside prefills),
// both products, both state dtypes, one and two groups, P of 64 and 32. Companion: the relay's own run on an
// input changed by 1 % gives other bits (the relay's check sees its inputs).
TEST(CudaSsdTc, TheRelayHasTheWalksBits) {
  PARITY_REQUIRE_GPU();
  const cuda::ScanGrid g{true, 16, true};
  for_each_case([&](const Shape& sh, bool bf16, ScanProducts prod, int T, int slots, const Inputs& in,
                    const std::string& what) {
    const Result ref = run(sh, g, bf16, T, in, whole(slots, T), tc(1, 1, prod));
    for (int cw : {1, 2, 3, 4})
      for (int kc : {1, 2, 4})
        for (const auto& [sname, sched] : schedules(slots, T)) {
          if (cw >= 3 && prod == ScanProducts::split) continue;  // its stages do not fit a block
          const Path relay{prod, {0, 0, cw, kc}};
          EXPECT_TRUE(same_bits(run(sh, g, bf16, T, in, sched, relay), ref))
              << what << " cell warps " << cw << " chain warps " << kc << " schedule " << sname;
        }
    Inputs in2 = in;
    in2.xbc[1][std::size_t(40) * sh.ld() + 2 * sh.P + 3] *= 1.01f;  // slot 1, row 40, head 2, p 3
    EXPECT_FALSE(same_bits(run(sh, g, bf16, T, in2, whole(slots, T), {prod, {0, 0, 2}}), ref))
        << what << " (companion)";
  });
}

// The lean relay (SsdTcWay::lean: constant-step tile copies, buffers by round and slot, the chain's deltas read
// without a select) has the walk's bits at the shapes it is compiled for (2 and 3 cell warps, 2 chain warps, one
// group), every schedule, both products and state dtypes, ordinary and programmatic launches; with two groups, or
// another shape, it is refused by name. Companion: the lean relay on an input changed by 1 % gives other bits.
TEST(CudaSsdTc, TheLeanRelayHasTheWalksBits) {
  PARITY_REQUIRE_GPU();
  const cuda::ScanGrid g{true, 16, true};
  for_each_case([&](const Shape& sh, bool bf16, ScanProducts prod, int T, int slots, const Inputs& in,
                    const std::string& what) {
    cuda::SsdTcWay lean{0, 0, prod == ScanProducts::split ? 2 : 3, 2};
    lean.lean = 1;
    if (sh.groups != 1) {
      try {
        run(sh, g, bf16, T, in, whole(slots, T), {prod, lean});
        ADD_FAILURE() << what << ": the lean relay took two groups";
      } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("the lean way is compiled for one group"), std::string::npos) << e.what();
      }
      return;
    }
    // The sweep's one-group shape has rows that are not 16-byte aligned; the model's are (the x copies that step by
    // a constant), so both.
    const Shape aligned{sh.H, sh.P, sh.N, 1, 0};
    for (const auto& [shape, inputs] : {std::pair<Shape, Inputs>{sh, in}, {aligned, make_inputs(aligned, slots, T)}}) {
      const Result ref = run(shape, g, bf16, T, inputs, whole(slots, T), tc(1, 1, prod));
      for (int cw : {2, 3})
        for (const auto& [sname, sched] : schedules(slots, T))
          for (int level : {0, 2}) {
            if (cw == 3 && prod == ScanProducts::split) continue;  // its stages do not fit a block
            cuda::SsdTcWay way{0, 0, cw, 2};
            way.lean = 1;
            way.programmatic = level;
            EXPECT_TRUE(same_bits(run(shape, g, bf16, T, inputs, sched, {prod, way}), ref))
                << what << " pad " << shape.pad << " cell warps " << cw << " schedule " << sname << " level "
                << level;
          }
    }
    lean.chain_warps = 1;
    EXPECT_ANY_THROW(run(sh, g, bf16, T, in, whole(slots, T), {prod, lean})) << what << " (one chain warp)";
    lean.chain_warps = 2;
    const Result ref = run(sh, g, bf16, T, in, whole(slots, T), tc(1, 1, prod));
    Inputs in2 = in;
    in2.xbc[1][std::size_t(40) * sh.ld() + 2 * sh.P + 3] *= 1.01f;  // slot 1, row 40, head 2, p 3
    EXPECT_FALSE(same_bits(run(sh, g, bf16, T, in2, whole(slots, T), {prod, lean}), ref)) << what << " (companion)";
  });
}

// The programmatic ways (SsdTcWay::programmatic 1: the band lets the table pass start early, the table pass and the
// relay wait on the device for the launch before them; 2: the band is launched programmatically too) have the
// ordinary launches' bits, and leave the same state and ring: the relay's default shapes (also after the one-launch
// band and tables) and one cell warp with one chain warp, every schedule, both products and state dtypes, one and two
// groups. What a launch reads before its wait
// (metadata, dt, the state) must be what no launch still running writes; a read of the tables or the bf16 rows moved
// before its wait would, where it ran ahead of the launch before, take what the scratch held (the pass before's
// tables) and show here as other bits, though a race need not show on every run. Companion: the same check on an
// input changed by 1 % fails.
TEST(CudaSsdTc, ProgrammaticLaunchesHaveTheOrdinaryBits) {
  PARITY_REQUIRE_GPU();
  const cuda::ScanGrid g{true, 16, true};
  for_each_case([&](const Shape& sh, bool bf16, ScanProducts prod, int T, int slots, const Inputs& in,
                    const std::string& what) {
    // (warps over p, cell warps, chain warps, tables): the relay with one cell a round; the relay's default shape;
    // that shape after the band and tables' one launch (an ordinary launch, then the relay programmatically); the
    // walk (the band and the table pass programmatic, the walk ordinary).
    const int wide = prod == ScanProducts::split ? 2 : 3;
    const int ways[][4] = {{0, 1, 1, 0}, {0, wide, 2, 0}, {0, wide, 2, 1}, {2, 0, 0, 0}};
    for (const auto& [wp, cw, kc, tables] : ways)
      for (const auto& [sname, sched] : schedules(slots, T)) {
        cuda::SsdTcWay way{wp, wp > 0 ? 2 : 0, cw, kc};
        way.tables = tables;
        way.programmatic = 0;
        const Result ordinary = run(sh, g, bf16, T, in, sched, {prod, way});
        // 1 and 2 on a stream of their own; then the process's level, set to 2, on the legacy stream (run() takes
        // it for a way that names no level): how the model's passes and the benches launch.
        for (int level : {1, 2, cuda::kSsdTcProcessLevel}) {
          way.programmatic = level;
          const int process = cuda::ssd_tc_programmatic();
          if (level == cuda::kSsdTcProcessLevel) cuda::set_ssd_tc_programmatic(2);
          const Result got = run(sh, g, bf16, T, in, sched, {prod, way});
          cuda::set_ssd_tc_programmatic(process);
          EXPECT_TRUE(same_bits(got, ordinary)) << what << " warps over p " << wp << " cell warps " << cw << " tables "
                                                << tables << " schedule " << sname << " level " << level;
        }
        if (cw == 1 && std::string(sname) == "whole") {
          Inputs in2 = in;
          in2.xbc[2][std::size_t(70) * sh.ld() + sh.P + 1] *= 1.01f;  // slot 2, row 70, head 1, p 1
          EXPECT_FALSE(same_bits(run(sh, g, bf16, T, in2, sched, {prod, way}), ordinary)) << what << " (companion)";
        }
      }
  });
}

// The process's switch for the model's passes (PARITY_CUDA_TC_LAUNCH): a bad value is refused by name before any
// device is touched; a good one is taken.
TEST(CudaSsdTc, TheLaunchSwitchIsCheckedAndTaken) {
  auto load = [] { return backend_cuda::load_model(model::open_checkpoint("builtin:tiny"), {}); };
  ::setenv("PARITY_CUDA_TC_LAUNCH", "eager", 1);
  try {
    load();
    ADD_FAILURE() << "a bad PARITY_CUDA_TC_LAUNCH was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "PARITY_CUDA_TC_LAUNCH must be ordinary, programmatic or programmatic-band, not 'eager'"),
              std::string::npos)
        << e.what();
  }
  for (const auto& [value, level] : {std::pair<const char*, int>{"programmatic", 1}, {"programmatic-band", 2},
                                     {"ordinary", 0}}) {
    ::setenv("PARITY_CUDA_TC_LAUNCH", value, 1);
    try {
      load();  // without a device it throws after taking the switch
    } catch (const std::exception&) {
    }
    EXPECT_EQ(cuda::ssd_tc_programmatic(), level) << value;
  }
  ::unsetenv("PARITY_CUDA_TC_LAUNCH");
  cuda::set_ssd_tc_programmatic(cuda::kSsdTcProgrammaticDefault);  // the tests after this one take the default
}

// The band and the tables in one launch (SsdTcWay::tables = 1, ssd_tc_cell_band.cu) against the two launches (band,
// then table pass): the same dots, tables and bf16 rows, so the walk and the relay give the same bits on every
// schedule (calls starting inside cells, decode rows between them: the ring rows and the stagger's partial cells).
TEST(CudaSsdTc, TheOneLaunchTablesHaveTheTwoLaunchesBits) {
  PARITY_REQUIRE_GPU();
  const cuda::ScanGrid g{true, 16, true};
  for_each_case([&](const Shape& sh, bool bf16, ScanProducts prod, int T, int slots, const Inputs& in,
                    const std::string& what) {
    for (const auto& [wname, two] : {std::pair<const char*, Path>{"walk", tc(1, 1, prod)},
                                     {"relay", Path{prod, {0, 0, 2, 2}}}}) {
      Path one = two;
      one.way.tables = 1;
      for (const auto& [sname, sched] : schedules(slots, T))
        EXPECT_TRUE(same_bits(run(sh, g, bf16, T, in, sched, one), run(sh, g, bf16, T, in, sched, two)))
            << what << " " << wname << " schedule " << sname;
      Inputs in2 = in;
      in2.xbc[1][std::size_t(40) * sh.ld() + 2 * sh.P + 3] *= 1.01f;  // slot 1, row 40, head 2, p 3
      const Result changed = run(sh, g, bf16, T, in2, whole(slots, T), one);
      EXPECT_FALSE(same_bits(changed, run(sh, g, bf16, T, in, whole(slots, T), two))) << what << " " << wname
                                                                                       << " (companion)";
    }
  });
}

// What the one launch's blocks rest on, checked on the CPU (no GPU needed) with the planner's tasks and the kernels'
// own cell_task (tests/cuda/cell_band_cover.cu): every row of every multi-row call gets its bf16 C and B from
// exactly one block a group (its group's first head's cell), the ring's rows before a call from one, none for a
// one-row call (it has no tasks); a block's window holds at most 31 call rows and its B rows at most 46 from its
// first source row (the kernel's static buffers); every live head's cell lies inside what its block stages. Calls
// starting at every offset in and around the first cells, lengths across cell edges, one and two groups, up to 80
// heads, staggered or not, and a tensor-parallel rank's heads (their offsets from the whole mixer). Companion: with
// every head's cell writing its rows, rows are written more than once.
TEST(CudaSsdTc, TheOneLaunchBlocksPartitionTheRowsAndFitTheirBuffers) {
  struct Heads {
    int H, groups, first_head, model_heads;
  };
  const Heads heads[] = {{8, 1, 0, 0}, {6, 2, 0, 0}, {32, 1, 0, 0}, {80, 2, 0, 0}, {8, 1, 8, 16}, {6, 2, 6, 12}};
  const int64_t starts[] = {0, 1, 5, 15, 16, 17, 31, 33, 50, 69};
  const int lengths[] = {2, 3, 15, 16, 17, 31, 32, 33, 47, 69};
  int passes = 0, seen_duplicate = 0, max_window = 0, max_span = 0;
  for (const Heads& hd : heads)
    for (bool stagger : {true, false})
      for (int64_t start : starts)
        for (int n : lengths) {
          cuda::ScanGrid g{true, 16, stagger};
          g.first_head = hd.first_head;
          g.model_heads = hd.model_heads;
          // A pass of three calls: this one, a one-row decode, and another starting 7 rows later and 5 longer.
          const std::vector<cuda::SeqSpan> spans{{0, start, n}, {1, 40, 1}, {2, start + 7, n + 5}};
          const cuda::PassPlan plan(spans, g);
          const cuda::PassSeqs p = plan.host_view();
          const test::CellBandCover cv = test::cell_band_cover(g, p, hd.H, hd.groups);
          const std::string what = "H " + std::to_string(hd.H) + " groups " + std::to_string(hd.groups) +
                                   " first head " + std::to_string(hd.first_head) + (stagger ? "" : " unstaggered") +
                                   " start " + std::to_string(start) + " n " + std::to_string(n);
          for (int grp = 0; grp < hd.groups; ++grp)
            for (int seq = 0; seq < p.num_seqs; ++seq) {
              const bool tasks = p.task0[seq + 1] > p.task0[seq];
              EXPECT_EQ(cv.ring_writes[std::size_t(grp) * p.num_seqs + seq], tasks ? 1 : 0) << what << " seq " << seq;
              for (int r = p.row0[seq]; r < p.row0[seq] + p.n[seq]; ++r)
                ASSERT_EQ(cv.row_writes[std::size_t(grp) * p.num_rows + r], tasks ? 1 : 0)
                    << what << " group " << grp << " row " << r;
            }
          EXPECT_LE(cv.max_window, 2 * 16 - 1) << what;
          EXPECT_LE(cv.max_span, 2 * 16 - 1 + cuda::kSsdTcRingRows) << what;
          EXPECT_EQ(cv.outside, 0) << what;
          max_window = std::max(max_window, cv.max_window);
          max_span = std::max(max_span, cv.max_span);
          const test::CellBandCover all = test::cell_band_cover(g, p, hd.H, hd.groups, true);
          if (std::any_of(all.row_writes.begin(), all.row_writes.end(), [](int w) { return w > 1; })) ++seen_duplicate;
          ++passes;
        }
  // Every case has several heads a group, whose cells cover the same rows: writing every head's writes some twice.
  EXPECT_EQ(seen_duplicate, passes);
  std::printf("[one launch] %d passes: windows up to %d call rows, B spans up to %d rows\n", passes, max_window,
              max_span);
  EXPECT_EQ(max_window, 31);  // the bounds are reached: the sweep holds the worst cases
}

// Companions. The error check sees a wrong D skip (the tc walk with every D one larger than the fp32
// walk's: y off by x), and the bit checks see one x value changed by 1 % (that row's output changes first,
// and the state; a change in the fourth digit, below bf16's resolution, left the state's bits as they
// were on the H200: the fold's factor w·x rounded to the same bf16).
TEST(CudaSsdTc, CompanionTheChecksSeeAWrongSkipAndAChangedInput) {
  PARITY_REQUIRE_GPU();
  const Shape sh{4, 64, 128, 1};
  const int T = 150;
  const Inputs in = make_inputs(sh, 1, T);
  const Result want = run(sh, {true, 16, true}, false, T, in, whole(1, T), {});
  const Errors wrong =
      errors(run(sh, {true, 16, true}, false, T, in, whole(1, T), tc(0, 0, ScanProducts::bfloat16), 1.0f), want);
  std::printf("[tc] D one larger: y max-rel %.3e\n", wrong.y);
  EXPECT_GT(wrong.y, kTolBf16);
  const Result a = run(sh, {true, 16, true}, false, T, in, whole(1, T), tc(0, 0, ScanProducts::bfloat16));
  Inputs in2 = in;
  in2.xbc[0][std::size_t(20) * sh.ld() + 3 * sh.P + 5] *= 1.01f;  // row 20, head 3, p 5
  const Result b = run(sh, {true, 16, true}, false, T, in2, whole(1, T), tc(0, 0, ScanProducts::bfloat16));
  EXPECT_FALSE(same_bits(a, b));
  const std::vector<float>& ya = a.y.at(0);
  const std::vector<float>& yb = b.y.at(0);
  std::size_t first = 0;
  while (first < ya.size() && std::memcmp(&ya[first], &yb[first], 4) == 0) ++first;
  EXPECT_EQ(first / sh.I(), 20u);
  EXPECT_FALSE(same_bits(a.state, b.state));
}

// What a decode step would lean on to reuse these steps (docs/cuda.md, "A tensor-core cell walk"): an
// m16n8k16 chain's output row depends only on that row of A and its output column only on that column
// of B — not on the row's place in the tile, the tile, or the other rows (here: moved, or zero). Two
// k16 steps (a quarter of C·Sᵀ), operands over 2^-12..2^12 so that the accumulation's rounding matters.
TEST(CudaSsdTc, AnMmaRowDependsOnlyOnThatRowAndColumn) {
  PARITY_REQUIRE_GPU();
  const int K = 32, R = 64, C = 8;
  std::mt19937_64 gen(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-12, 12);
  auto draw = [&](std::size_t n) {
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = f32_to_bf16(std::ldexp(u(gen), ex(gen)));
    return v;
  };
  const std::vector<uint16_t> A = draw(std::size_t(R) * K), Bt = draw(std::size_t(C) * K);
  const std::vector<float> d = test::run_chains(A, Bt, K).mma;
  std::vector<int> rows(R), cols(C);
  for (int i = 0; i < R; ++i) rows[i] = i;
  for (int i = 0; i < C; ++i) cols[i] = i;
  std::shuffle(rows.begin(), rows.end(), gen);
  std::shuffle(cols.begin(), cols.end(), gen);
  std::vector<uint16_t> A2(A.size()), B2(Bt.size()), A3(A.size(), 0);
  for (int r = 0; r < R; ++r) std::copy_n(A.begin() + rows[r] * K, K, A2.begin() + r * K);
  for (int c = 0; c < C; ++c) std::copy_n(Bt.begin() + cols[c] * K, K, B2.begin() + c * K);
  std::copy_n(A.begin() + 5 * K, K, A3.begin() + 42 * K);  // row 5 alone, as row 10 of the third tile
  const std::vector<float> d2 = test::run_chains(A2, B2, K).mma, d3 = test::run_chains(A3, Bt, K).mma;
  int moved = 0;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) moved += std::memcmp(&d2[r * C + c], &d[rows[r] * C + cols[c]], 4) != 0;
  EXPECT_EQ(moved, 0);
  EXPECT_EQ(std::memcmp(&d3[42 * C], &d[5 * C], C * 4), 0);
  // Companion: the same rows with their two k16 steps swapped give other bits somewhere.
  std::vector<uint16_t> A4(A), B4(Bt);
  for (int r = 0; r < R; ++r) std::rotate(A4.begin() + r * K, A4.begin() + r * K + 16, A4.begin() + (r + 1) * K);
  for (int c = 0; c < C; ++c) std::rotate(B4.begin() + c * K, B4.begin() + c * K + 16, B4.begin() + (c + 1) * K);
  const std::vector<float> d4 = test::run_chains(A4, B4, K).mma;
  EXPECT_NE(std::memcmp(d4.data(), d.data(), d.size() * 4), 0);
}

TEST(CudaSsdTc, Shapes) {
  PARITY_REQUIRE_GPU();
  EXPECT_TRUE(cuda::ssd_tc_supported({32, 64, 128, 1}, {true, 16, true}));
  EXPECT_FALSE(cuda::ssd_tc_supported({32, 64, 128, 1}, {true, 32, true}));  // cells of 16 rows only
  EXPECT_FALSE(cuda::ssd_tc_supported({32, 64, 64, 1}, {true, 16, true}));   // N 128 only
  EXPECT_FALSE(cuda::ssd_tc_supported({32, 40, 128, 1}, {true, 16, true}));  // P a multiple of 16
}

}  // namespace
}  // namespace parity
