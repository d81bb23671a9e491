#pragma once
// SSD test problems shared by the chunked-scan and the exact-grid kernel tests: a token stream
// with Mamba2's initialisation statistics, a float64 recurrence to measure accuracy against, and
// bitwise comparisons.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/math.h"
#include "kernels/ssd.h"
#include "test_support.h"

namespace parity::kernels::test {

// In the sanitizer build (parity::test::kSanitizerBuild) the longest invariance loops check one row or
// schedule in kSanitizerSample: a memory error shows on any sample, and the normal build checks every case.
inline constexpr int kSanitizerSample = parity::test::kSanitizerBuild ? 7 : 1;

// A token stream with Mamba2's initialisation statistics: A in [-16, -1], dt = softplus(dt_bias +
// noise) with softplus(dt_bias) log-uniform in [1e-3, 1e-1], D near 1, x, B, C ~ N(0, 1), and a
// nonzero initial state so that the boundary term is exercised from row 0.
struct Problem {
  SsdShape shape;
  int n = 0;
  std::vector<float> x, dt, A, B, C, D, s0;
  int64_t ldx() const { return int64_t(shape.nheads) * shape.headdim; }
  int64_t ldb() const { return int64_t(shape.ngroups) * shape.dstate; }
  int64_t state_elems() const { return shape.state_elems(); }
};

inline Problem make_problem(SsdShape shape, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  Problem pr;
  pr.shape = shape;
  pr.n = n;
  const int H = shape.nheads;
  pr.A.resize(H);
  pr.D.resize(H);
  std::vector<float> dt_bias(H);
  for (int h = 0; h < H; ++h) {
    pr.A[h] = -(1.0f + 15.0f * ud(rng));
    pr.D[h] = 1.0f + 0.1f * nd(rng);
    const double target = std::exp(std::log(1e-3) + (std::log(1e-1) - std::log(1e-3)) * ud(rng));
    dt_bias[h] = static_cast<float>(std::log(std::expm1(target)));  // inverse softplus
  }
  pr.dt.resize(size_t(n) * H);
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < H; ++h) pr.dt[size_t(t) * H + h] = softplus_f(dt_bias[h] + 0.5f * nd(rng));
  auto fill = [&](std::vector<float>& v, size_t count, float scale) {
    v.resize(count);
    for (auto& e : v) e = scale * nd(rng);
  };
  fill(pr.x, size_t(n) * pr.ldx(), 1.0f);
  fill(pr.B, size_t(n) * pr.ldb(), 1.0f);
  fill(pr.C, size_t(n) * pr.ldb(), 1.0f);
  fill(pr.s0, size_t(pr.state_elems()), 0.5f);
  return pr;
}

// x's rows placed `stride` floats apart, as the model hands the scans the conv output's x | B | C
// rows: the gap between rows holds NaN, so a kernel that read it would show.
inline std::vector<float> strided_x(const Problem& pr, int64_t stride) {
  const int64_t ld = pr.ldx();
  std::vector<float> out(size_t(pr.n) * size_t(stride), NAN);
  for (int t = 0; t < pr.n; ++t) std::copy_n(pr.x.data() + t * ld, ld, out.data() + t * stride);
  return out;
}

// The bit comparisons every test uses (test_support.h), found under this namespace too.
using parity::test::count_bit_mismatches;
using parity::test::same_bits;

// Sequential recurrence in float64: h = exp(dt A) h + dt x ⊗ B, y = h C + D x, token by token;
// the state is also kept at every chunk end.
struct F64Run {
  std::vector<double> y, chunk_states, final_state;
};

inline F64Run recurrence_f64(const Problem& pr) {
  const SsdShape& sh = pr.shape;
  const int H = sh.nheads, P = sh.headdim, N = sh.dstate, hpg = H / sh.ngroups;
  std::vector<double> S(pr.s0.begin(), pr.s0.end());
  F64Run r;
  r.y.resize(size_t(pr.n) * pr.ldx());
  for (int t = 0; t < pr.n; ++t) {
    for (int h = 0; h < H; ++h) {
      const int g = h / hpg;
      const double dt = pr.dt[size_t(t) * H + h];
      const double decay = std::exp(dt * pr.A[h]);
      const float* B = pr.B.data() + t * pr.ldb() + g * N;
      const float* C = pr.C.data() + t * pr.ldb() + g * N;
      for (int p = 0; p < P; ++p) {
        const double xp = pr.x[t * pr.ldx() + h * P + p];
        double* Sp = S.data() + (size_t(h) * P + p) * N;
        double acc = 0.0;
        for (int k = 0; k < N; ++k) {
          Sp[k] = decay * Sp[k] + dt * xp * B[k];
          acc += Sp[k] * C[k];
        }
        r.y[t * pr.ldx() + h * P + p] = acc + double(pr.D[h]) * xp;
      }
    }
    if ((t + 1) % sh.chunk_size == 0) r.chunk_states.insert(r.chunk_states.end(), S.begin(), S.end());
  }
  r.final_state = S;
  return r;
}

// max |a - ref| / max |ref|: the error relative to the tensor's scale, which is what matters for
// the next layer and stays meaningful where individual elements pass through zero.
inline double rel_max_err(const float* a, const std::vector<double>& ref) {
  if (ref.empty()) return 0.0;
  double md = 0.0, mr = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    md = std::max(md, std::abs(double(a[i]) - ref[i]));
    mr = std::max(mr, std::abs(ref[i]));
  }
  return md / mr;
}

inline const SsdShape kSmall{4, 16, 2, 16, 32};     // fast: many calls per test
inline const SsdShape kLarge{8, 64, 1, 128, 256};   // close to mamba2-130m (24 × 64, dstate 128, chunk 256)
inline constexpr int kLargeN = 700;                  // two full chunks and a partial one
// Shapes whose head_dim, d_state and chunk size are not multiples of the 16-lane vectors.
inline const SsdShape kOdd{3, 20, 3, 24, 20};
inline const SsdShape kOdd2{2, 33, 1, 40, 48};
// d_state wider than the AVX-512 state step's 8-vector column block, with a partial last block.
inline const SsdShape kWide{2, 9, 1, 200, 16};

}  // namespace parity::kernels::test
