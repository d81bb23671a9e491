// SSD scan and SSU step: argument checks, ISA dispatch, and the plain scalar twin. The evaluation
// order every path follows is written down once, in ssd_internal.h.
#include "kernels/ssd.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/isa.h"
#include "kernels/math.h"
#include "kernels/ssd_internal.h"

namespace parity::kernels {

namespace {

using ssd_detail::decay_f;
using ssd_detail::decay_sums;
using ssd_detail::dot16;
using ssd_detail::ScanArgs;
using ssd_detail::SsuArgs;

void check_shape(const SsdShape& s) {
  if (s.nheads <= 0 || s.headdim <= 0 || s.ngroups <= 0 || s.dstate <= 0 || s.chunk_size <= 0) {
    throw Error("ssd: shape fields must be positive (nheads " + std::to_string(s.nheads) + ", headdim " +
                std::to_string(s.headdim) + ", ngroups " + std::to_string(s.ngroups) + ", dstate " +
                std::to_string(s.dstate) + ", chunk_size " + std::to_string(s.chunk_size) + ")");
  }
  if (s.nheads % s.ngroups != 0) {
    throw Error("ssd: nheads " + std::to_string(s.nheads) + " is not a multiple of ngroups " +
                std::to_string(s.ngroups));
  }
}

void check_scan(const ScanArgs& a) {
  check_shape(a.shape);
  if (a.n < 0 || a.first_out < 0 || a.first_out > a.n) {
    throw Error("ssd_scan: need 0 <= first_out <= n (n " + std::to_string(a.n) + ", first_out " +
                std::to_string(a.first_out) + ")");
  }
}

// One head over all chunks of the call, in the order of ssd_internal.h, with nothing shared
// between heads and no vector code: the readable statement of the arithmetic.
void reference_head(const ScanArgs& a, int h) {
  const SsdShape& sh = a.shape;
  const int H = sh.nheads, P = sh.headdim, N = sh.dstate, L = sh.chunk_size;
  const int g = h / (H / sh.ngroups);
  const int64_t ldx = int64_t(H) * P, ldb = int64_t(sh.ngroups) * N, pn = int64_t(P) * N;
  const float Ah = a.A[h], Dh = a.D[h];

  std::vector<float> S(a.s0 + h * pn, a.s0 + (h + 1) * pn);
  std::vector<float> dA(L), dtc(L), sum(L + 1), w(L);
  const int nchunks = (a.n + L - 1) / L;
  for (int c = 0; c < nchunks; ++c) {
    const int c0 = c * L;
    const int Lc = std::min(L, a.n - c0);
    const bool complete = Lc == L;
    for (int s = 0; s < Lc; ++s) {
      dtc[s] = a.dt[int64_t(c0 + s) * H + h];
      dA[s] = dtc[s] * Ah;
    }
    auto xrow = [&](int s) { return a.x + int64_t(c0 + s) * ldx + int64_t(h) * P; };
    auto brow = [&](int s) { return a.B + int64_t(c0 + s) * ldb + int64_t(g) * N; };

    for (int t = std::max(0, a.first_out - c0); t < Lc; ++t) {
      const int64_t out = c0 + t - a.first_out;
      const float* Ct = a.C + out * ldb + int64_t(g) * N;
      decay_sums(dA.data(), t, sum.data());
      const float exp_cs = decay_f(sum[t + 1]);
      for (int s = 0; s <= t; ++s) w[s] = (dot16(Ct, brow(s), N) * decay_f(sum[s])) * dtc[s];
      float* yt = a.y + out * ldx + int64_t(h) * P;
      for (int p = 0; p < P; ++p) {
        float intra = 0.0f;
        for (int s = 0; s <= t; ++s) intra = std::fma(w[s], xrow(s)[p], intra);
        const float sc = dot16(S.data() + int64_t(p) * N, Ct, N);
        yt[p] = std::fma(Dh, xrow(t)[p], std::fma(exp_cs, sc, intra));
      }
    }

    if (complete || a.final_state) {  // a partial chunk is always the last one
      const int T = Lc - 1;
      decay_sums(dA.data(), T, sum.data());
      const float exp_total = decay_f(sum[T + 1]);
      for (auto& v : S) v = exp_total * v;
      for (int s = 0; s <= T; ++s) {
        const float coef = decay_f(sum[s]) * dtc[s];
        for (int p = 0; p < P; ++p) {
          const float u = coef * xrow(s)[p];
          float* Sp = S.data() + int64_t(p) * N;
          for (int k = 0; k < N; ++k) Sp[k] = std::fma(u, brow(s)[k], Sp[k]);
        }
      }
      if (complete && a.chunk_states) {
        std::memcpy(a.chunk_states + (int64_t(c) * H + h) * pn, S.data(), sizeof(float) * pn);
      }
    }
  }
  if (a.final_state) std::memcpy(a.final_state + h * pn, S.data(), sizeof(float) * pn);
}

void ssu_reference_head(const SsuArgs& a, int h) {
  const SsdShape& sh = a.shape;
  const int H = sh.nheads, P = sh.headdim, N = sh.dstate;
  const int g = h / (H / sh.ngroups);
  const float dth = a.dt[h];
  const float decay = exp_f(dth * a.A[h]);
  const float* Bg = a.B + int64_t(g) * N;
  const float* Cg = a.C + int64_t(g) * N;
  for (int p = 0; p < P; ++p) {
    const float xp = a.x[int64_t(h) * P + p];
    const float u = dth * xp;
    float* Sp = a.state + (int64_t(h) * P + p) * N;
    for (int k = 0; k < N; ++k) Sp[k] = std::fma(u, Bg[k], decay * Sp[k]);
    a.y[int64_t(h) * P + p] = std::fma(a.D[h], xp, dot16(Sp, Cg, N));
  }
}

}  // namespace

void ssd_scan(const SsdShape& shape, const float* x, const float* dt, const float* A, const float* B,
              const float* C, const float* D, int n, int first_out, const float* s0, float* y,
              float* chunk_states, float* final_state) {
  const ScanArgs a{shape, x, dt, A, B, C, D, n, first_out, s0, y, chunk_states, final_state};
  check_scan(a);
  if (active_isa() == Isa::Avx512) {
    ssd_detail::scan_avx512(a);
    return;
  }
  // Without AVX-512 the heads run the scalar twin; AVX2 gets no SSD path of its own yet.
#pragma omp parallel for num_threads(kernels::num_threads()) schedule(static)
  for (int h = 0; h < shape.nheads; ++h) reference_head(a, h);
}

void ssd_scan_reference(const SsdShape& shape, const float* x, const float* dt, const float* A,
                        const float* B, const float* C, const float* D, int n, int first_out,
                        const float* s0, float* y, float* chunk_states, float* final_state) {
  const ScanArgs a{shape, x, dt, A, B, C, D, n, first_out, s0, y, chunk_states, final_state};
  check_scan(a);
  for (int h = 0; h < shape.nheads; ++h) reference_head(a, h);
}

void ssu_step(const SsdShape& shape, const float* x, const float* dt, const float* A, const float* B,
              const float* C, const float* D, float* state, float* y) {
  check_shape(shape);
  const SsuArgs a{shape, x, dt, A, B, C, D, state, y};
  if (active_isa() == Isa::Avx512) {
    ssd_detail::ssu_avx512(a);
    return;
  }
#pragma omp parallel for num_threads(kernels::num_threads()) schedule(static)
  for (int h = 0; h < shape.nheads; ++h) ssu_reference_head(a, h);
}

}  // namespace parity::kernels
