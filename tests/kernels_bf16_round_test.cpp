// The AVX-512 SSD kernels round fp32 to bf16 with AVX512-BF16's vcvtne2ps2bf16 when the CPU has
// it (kernels::avx512_bf16_active()). The instruction flushes subnormal inputs to zero, which
// common/dtype.h's f32_to_bf16 does not, so pairs holding a subnormal take the integer sequence.
// Checked here: the rounding equals f32_to_bf16 on edge values and on every exponent, the exact
// grid kernels give the same bits with the instruction on and off on data whose states reach the
// subnormal range, and (companion) the instruction alone would differ on exactly those values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "isa_test_support.h"
#include "kernels/ssd_grid.h"
#include "kernels/ssd_internal.h"
#include "ssd_test_support.h"

namespace parity::kernels {
namespace {

using namespace test;
using ssd_detail::Bf16Rounding;

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Edge values (zeros, subnormals, the smallest normals, ties to even, the largest finite values
// that round to infinity, infinities, quiet and signalling NaNs with payloads) of both signs, then
// random bit patterns spread over every exponent.
std::vector<float> rounding_inputs() {
  const uint32_t edges[] = {0x00000000u, 0x00000001u, 0x00007fffu, 0x00008000u, 0x00008001u, 0x00018000u,
                            0x0000ffffu, 0x007f7fffu, 0x007f8000u, 0x007fffffu, 0x00800000u, 0x00808000u,
                            0x00818000u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7f7fffu,
                            0x7f7f8000u, 0x7f7fffffu, 0x7f800000u, 0x7f800001u, 0x7fbfffffu, 0x7fc00000u,
                            0x7fc12345u, 0x7fffffffu};
  std::vector<float> v;
  for (uint32_t e : edges) {
    v.push_back(from_bits(e));
    v.push_back(from_bits(e | 0x80000000u));
  }
  std::mt19937 rng(13);
  for (int i = 0; i < 1 << 16; ++i) {
    uint32_t u = rng();
    if (i % 4 == 0) u &= 0x807fffffu;  // a quarter subnormal or zero
    v.push_back(from_bits(u));
  }
  v.push_back(1.0f);  // an odd count: the masked tail
  return v;
}

std::vector<uint16_t> rounded(const std::vector<float>& in, Bf16Rounding how) {
  std::vector<uint16_t> out(in.size(), 0xdead);
  ssd_detail::round_bf16_avx512(in.data(), out.data(), static_cast<int>(in.size()), how);
  return out;
}

// First index where the rounding differs from f32_to_bf16, or -1.
long first_mismatch(const std::vector<float>& in, const std::vector<uint16_t>& got) {
  for (size_t i = 0; i < in.size(); ++i)
    if (got[i] != f32_to_bf16(in[i])) return static_cast<long>(i);
  return -1;
}

bool have_bf16_instructions() {
  if (!cpu_has(Isa::Avx512)) return false;
  if (avx512_bf16_detected()) return true;
  std::fprintf(stderr, "AVX512-BF16: not run on this CPU (%s)\n",
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ::testing::Test::RecordProperty("avx512_bf16", "not run on this CPU");
  return false;
}

class Bf16Guard {
 public:
  explicit Bf16Guard(bool on) { set_avx512_bf16_enabled(on); }
  ~Bf16Guard() { set_avx512_bf16_enabled(true); }
};

TEST(KernelsBf16Round, BothRoundingsEqualF32ToBf16) {
  if (!cpu_has(Isa::Avx512)) return;
  const std::vector<float> in = rounding_inputs();
  const std::vector<uint16_t> integer = rounded(in, Bf16Rounding::Integer);
  long i = first_mismatch(in, integer);
  EXPECT_EQ(i, -1) << "integer sequence: input bits " << std::hex << (i < 0 ? 0 : f32_bits(in[i])) << " gave "
                   << (i < 0 ? 0 : integer[i]) << ", f32_to_bf16 " << (i < 0 ? 0 : f32_to_bf16(in[i]));
  if (!have_bf16_instructions()) return;
  const std::vector<uint16_t> hw = rounded(in, Bf16Rounding::Hardware);
  i = first_mismatch(in, hw);
  EXPECT_EQ(i, -1) << "AVX512-BF16 path: input bits " << std::hex << (i < 0 ? 0 : f32_bits(in[i])) << " gave "
                   << (i < 0 ? 0 : hw[i]) << ", f32_to_bf16 " << (i < 0 ? 0 : f32_to_bf16(in[i]));
}

// Companion: the instruction alone flushes the subnormals, so without the fallback the check above
// fails, and it fails on subnormal inputs only.
TEST(KernelsBf16RoundCompanion, InstructionAloneFlushesSubnormals) {
  if (!have_bf16_instructions()) return;
  const std::vector<float> in = rounding_inputs();
  const std::vector<uint16_t> raw = rounded(in, Bf16Rounding::RawInstruction);
  int differ = 0, differ_normal = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (raw[i] == f32_to_bf16(in[i])) continue;
    ++differ;
    if (std::fpclassify(in[i]) != FP_SUBNORMAL) ++differ_normal;
  }
  EXPECT_GT(differ, 1000) << "the inputs must hold subnormals that the instruction flushes";
  EXPECT_EQ(differ_normal, 0) << "the instruction should differ on subnormals only";
}

// A problem whose states reach the subnormal range: a few heads' inputs and boundary states
// scaled down by 2^-120, so that fold results land below FLT_MIN.
Problem tiny_problem(const SsdShape& sh, int n, uint32_t seed) {
  Problem pr = make_problem(sh, n, seed);
  const float tiny = std::ldexp(1.0f, -120);
  const int64_t pn = int64_t(sh.headdim) * sh.dstate;
  for (int h = 0; h < sh.nheads; h += 2) {
    for (int t = 0; t < n; ++t)
      for (int p = 0; p < sh.headdim; ++p) pr.x[size_t(t) * pr.ldx() + size_t(h) * sh.headdim + p] *= tiny;
    for (int64_t i = 0; i < pn; ++i) pr.s0[size_t(h * pn + i)] *= tiny;
  }
  return pr;
}

int bf16_subnormals(const std::vector<uint16_t>& s) {
  int c = 0;
  for (uint16_t v : s) c += (v & 0x7f80u) == 0 && (v & 0x7fu) != 0;
  return c;
}

// The grid kernels with the instruction on and off: the same y and bf16 states, single shot and
// token by token, on data that exercises the subnormal fallback.
TEST(KernelsBf16Round, GridKernelsGiveTheSameBitsWithAndWithoutTheInstruction) {
  if (!have_bf16_instructions()) return;
  IsaGuard ig(Isa::Avx512);
  for (const SsdShape& sh : {kSmall, kLarge}) {
    const Problem pr = tiny_problem(sh, 70, 21);
    const ExactGrid g{8, true, sh.nheads};
    for (int prompt : {0, 9}) {
      std::vector<uint16_t> states[2];
      std::vector<float> ys[2];
      for (bool on : {false, true}) {
        Bf16Guard bg(on);
        const SsdShape& s = pr.shape;
        const int H = s.nheads;
        std::vector<uint16_t> st;
        for (float v : pr.s0) st.push_back(f32_to_bf16(v));
        const RingSizes rs = ring_sizes(s, g);
        std::vector<float> rx(size_t(rs.x)), rdt(size_t(rs.dt)), rb(size_t(rs.B)), y(size_t(pr.n) * pr.ldx(), NAN);
        const ReplayRing ring{rx.data(), rdt.data(), rb.data()};
        const int first = prompt == 0 ? pr.n : prompt;
        ssd_scan_grid(s, g, pr.x.data(), pr.dt.data(), pr.A.data(), pr.B.data(), pr.C.data(), pr.D.data(), 0, first, 0,
                      GridState{nullptr, st.data()}, y.data());
        for (int64_t p = std::max(0, first - g.cell); p < first; ++p)
          ring_put(s, g, ring, p, pr.x.data() + p * pr.ldx(), pr.dt.data() + p * H, pr.B.data() + p * pr.ldb());
        for (int64_t p = first; p < pr.n; ++p) {
          ring_put(s, g, ring, p, pr.x.data() + p * pr.ldx(), pr.dt.data() + p * H, pr.B.data() + p * pr.ldb());
          GridDecodeRow d;
          d.pos = p;
          d.x_ring = rx.data();
          d.dt_ring = rdt.data();
          d.b_ring = rb.data();
          d.C = pr.C.data() + p * pr.ldb();
          d.state = GridState{nullptr, st.data()};
          d.y = y.data() + p * pr.ldx();
          ssd_grid_decode(s, g, pr.A.data(), pr.D.data(), &d, 1);
        }
        states[on] = st;
        ys[on] = y;
      }
      EXPECT_TRUE(same_bits(ys[0].data(), ys[1].data(), ys[0].size())) << "y, prompt " << prompt;
      EXPECT_EQ(states[0], states[1]) << "states, prompt " << prompt;
      EXPECT_GT(bf16_subnormals(states[1]), 0) << "the data must reach the subnormal fallback";
    }
  }
}

// Plain mode's SSU step on a bf16 state (ssu_step_bf16) with the instruction on and off, and on the
// portable path: the same y and states token by token, on data whose states reach the subnormal
// fallback. The companion above shows the instruction alone would flush those values.
TEST(KernelsBf16Round, PlainSsuStepGivesTheSameBitsWithAndWithoutTheInstruction) {
  if (!have_bf16_instructions()) return;
  for (const SsdShape& sh : {kSmall, kLarge}) {
    const Problem pr = tiny_problem(sh, 40, 23);
    const int H = sh.nheads;
    std::vector<uint16_t> states[3];
    std::vector<float> ys[3];
    for (int run = 0; run < 3; ++run) {  // 0: AVX-512 integer rounding, 1: the instruction, 2: portable
      IsaGuard ig(run == 2 ? Isa::Portable : Isa::Avx512);
      Bf16Guard bg(run == 1);
      std::vector<uint16_t> st;
      for (float v : pr.s0) st.push_back(f32_to_bf16(v));
      std::vector<float> y(size_t(pr.n) * pr.ldx(), NAN);
      for (int64_t p = 0; p < pr.n; ++p)
        ssu_step_bf16(sh, pr.x.data() + p * pr.ldx(), pr.dt.data() + p * H, pr.A.data(), pr.B.data() + p * pr.ldb(),
                      pr.C.data() + p * pr.ldb(), pr.D.data(), st.data(), y.data() + p * pr.ldx());
      states[run] = st;
      ys[run] = y;
    }
    for (int run : {1, 2}) {
      EXPECT_TRUE(same_bits(ys[0].data(), ys[run].data(), ys[0].size())) << "y, run " << run << ", P " << sh.headdim;
      EXPECT_EQ(states[0], states[run]) << "states, run " << run << ", P " << sh.headdim;
    }
    EXPECT_GT(bf16_subnormals(states[1]), 0) << "the data must reach the subnormal fallback";
  }
}

}  // namespace
}  // namespace parity::kernels
