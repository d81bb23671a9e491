#pragma once
// What the SSD entry points (ssd.cpp, ssd_grid.cpp) share: argument checks, the scalar row and fold
// routines of ssd_internal.h's contract, and the optimized path's per-thread scratch. Not for the
// ISA files (see the note on inline functions in ssd_internal.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "common/aligned.h"
#include "common/error.h"
#include "kernels/ssd_internal.h"

namespace parity::kernels::ssd_detail {

inline int round_up(int v, int m) { return (v + m - 1) / m * m; }

// Below this many multiply-adds a parallel region costs more than it saves (a few microseconds
// to wake the other threads); the mamba2-130m decode step is well above it.
inline constexpr double kParallelFlops = 65536.0;

inline void check_shape(const SsdShape& s) {
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

// An x row stride as the scans take it: 0 means packed rows (nheads·headdim); a stride must hold
// a whole row.
inline int64_t x_stride_or_packed(const SsdShape& s, int64_t x_stride) {
  const int64_t packed = int64_t(s.nheads) * s.headdim;
  if (x_stride == 0) return packed;
  if (x_stride < packed)
    throw Error("ssd: x row stride " + std::to_string(x_stride) + " is shorter than a row (" +
                std::to_string(packed) + " floats)");
  return x_stride;
}


// The fold of one head over a chunk's (or cell's) rows 0..Lc-1 (ssd_internal.h): the scalar statement
// that the AVX-512 fold reproduces. xrow(s) / brow(s) give the head's x and the group's B of row s;
// sum is scratch of Lc + 1 floats. S holds the boundary state on entry and the state at row Lc-1's
// end on return.
template <class XRow, class BRow>
inline void fold_reference_head(int P, int N, int Lc, XRow xrow, BRow brow, const float* dA, const float* dtc,
                                float* S, float* sum) {
  if (Lc <= 0) return;
  decay_sums(dA, Lc - 1, sum);
  const float E = decay_f(sum[Lc]);
  for (int p = 0; p < P; ++p) {
    float* Sp = S + int64_t(p) * N;
    for (int k = 0; k < N; ++k) Sp[k] = E * Sp[k];
  }
  for (int s = 0; s < Lc; ++s) {
    const float c = decay_f(sum[s]) * dtc[s];
    const float* xs = xrow(s);
    const float* Bs = brow(s);
    for (int p = 0; p < P; ++p) {
      const float u = c * xs[p];
      float* Sp = S + int64_t(p) * N;
      for (int k = 0; k < N; ++k) Sp[k] = std::fma(u, Bs[k], Sp[k]);
    }
  }
}

// Output row t of one head by the row routine, as ssd_internal.h writes it: xrow(s) / brow(s) give
// the head's x and the group's B of chunk row s; sum and w are scratch of t + 2 floats.
template <class XRow, class BRow>
inline void reference_row(int P, int N, int t, XRow xrow, BRow brow, const float* Ct, const float* dA, const float* dtc,
                   const float* Sb, float Dh, float* sum, float* w, float* yt) {
  decay_sums(dA, t, sum);
  const float exp_cs = decay_f(sum[t + 1]);
  for (int s = 0; s <= t; ++s) w[s] = (dot16(Ct, brow(s), N) * decay_f(sum[s])) * dtc[s];
  for (int p = 0; p < P; ++p) {
    float intra = 0.0f;
    for (int s = 0; s <= t; ++s) intra = std::fma(w[s], xrow(s)[p], intra);
    const float sc = dot16(Sb + int64_t(p) * N, Ct, N);
    yt[p] = std::fma(Dh, xrow(t)[p], std::fma(exp_cs, sc, intra));
  }
}


// Per-thread scratch of the optimized path, grown on demand so that steady-state calls
// allocate nothing.
struct HeadScratch {
  AlignedBuffer<float> dA, dtc, sum, w, sc, u, xc;
  int lpad = 0, ppad = 0;
  void reserve(int L, int P) {
    const int lp = round_up(L + 2, 16), pp = round_up(P, 16);
    if (lp <= lpad && pp <= ppad) return;
    lpad = std::max(lp, lpad);
    ppad = std::max(pp, ppad);
    dA.resize(lpad);
    dtc.resize(lpad);
    sum.resize(size_t(16) * lpad);
    w.resize(size_t(16) * lpad);
    sc.resize(size_t(16) * ppad);
    u.resize(size_t(lpad) * ppad);
    xc.resize(size_t(lpad) * ppad);
  }
};

inline HeadScratch& head_scratch() {
  thread_local HeadScratch s;
  return s;
}

// A HeadChunk wired to the calling thread's scratch (dt and dA of the chunk's rows go in
// scr.dtc / scr.dA); the caller sets the row range and the data pointers.
inline HeadChunk scratch_chunk(HeadScratch& scr, int P, int N) {
  HeadChunk k{};
  k.P = P;
  k.N = N;
  k.dA = scr.dA.data();
  k.dtc = scr.dtc.data();
  k.sum = scr.sum.data();
  k.w = scr.w.data();
  k.sc = scr.sc.data();
  k.u = scr.u.data();
  k.lpad = scr.lpad;
  k.ppad = scr.ppad;
  return k;
}

}  // namespace parity::kernels::ssd_detail
