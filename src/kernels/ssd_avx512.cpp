// AVX-512 SSD scan: the row, fold and state-dot routines of every scan (exact mode's grid and its
// decode, plain mode's chunk grid); plain mode's SSU step is ssu_avx512.cpp. Every output element
// goes through exactly the scalar sequence of ssd_internal.h; vectors only run many such sequences
// side by side (across head_dim in the row routine, across d_state in the fold, across dot products
// in the 16-lane dots), so the bits equal the scalar twin's. Compiled with AVX-512 flags: call only
// after active_isa() says so.
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its flow analysis reports
// once inlined (same false positive as in gemm_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cstdint>

#include "kernels/ssd_avx512_lanes.h"
#include "kernels/ssd_internal.h"
#include "kernels/stream_plan.h"

namespace parity::kernels::ssd_detail {

namespace {

// dot16_lanes of four rows lda apart against one c, side by side: four independent chains where
// one row alone waits on its FMA latency at every step. Each row's chain is dot16_lanes' own.
template <class T>
inline void dot16_lanes4(const T* a, int64_t lda, const float* c, int N, __m512* acc) {
  __m512 l0 = _mm512_setzero_ps(), l1 = l0, l2 = l0, l3 = l0;
  int k = 0;
  #pragma GCC unroll 8
  for (; k + kW <= N; k += kW) {
    const __m512 cv = _mm512_loadu_ps(c + k);
    l0 = _mm512_fmadd_ps(load_state(a + k), cv, l0);
    l1 = _mm512_fmadd_ps(load_state(a + lda + k), cv, l1);
    l2 = _mm512_fmadd_ps(load_state(a + 2 * lda + k), cv, l2);
    l3 = _mm512_fmadd_ps(load_state(a + 3 * lda + k), cv, l3);
  }
  if (k < N) {
    const __mmask16 m = tail_mask(N - k);
    const __m512 cv = _mm512_maskz_loadu_ps(m, c + k);
    l0 = _mm512_mask3_fmadd_ps(maskz_load_state(m, a + k), cv, l0, m);
    l1 = _mm512_mask3_fmadd_ps(maskz_load_state(m, a + lda + k), cv, l1, m);
    l2 = _mm512_mask3_fmadd_ps(maskz_load_state(m, a + 2 * lda + k), cv, l2, m);
    l3 = _mm512_mask3_fmadd_ps(maskz_load_state(m, a + 3 * lda + k), cv, l3, m);
  }
  acc[0] = l0;
  acc[1] = l1;
  acc[2] = l2;
  acc[3] = l3;
}

// out[p] = dot16(S[p][:], c) for p < P (S rows of N values). S is the fp32 state or the bf16 one
// (widened in registers). The state streams through memory in order: an fp32 state one row after
// the other, a bf16 one four adjacent rows at a time (four dot chains side by side) where the stream
// plan says so (Zen 5; on the Zen 4 one row at a time, c in registers, was 10-14 % faster; fp32 rows
// four at a time measured slower on both); the 16 rows' lanes then fold together.
template <class T>
void dots_rows(const T* S, int P, int N, const float* c, float* out) {
  __m512 cv[kCachedDotN / kW] = {};
  if (N == kCachedDotN)
    #pragma GCC unroll 16
    for (int v = 0; v < kCachedDotN / kW; ++v) cv[v] = _mm512_loadu_ps(c + kW * v);
  const bool one_row = sizeof(T) == sizeof(float) || bf16_dot_rows() == 1;
  int p = 0;
  for (; p + 16 <= P; p += 16) {
    __m512 acc[16];
    if (sizeof(T) == sizeof(uint16_t) && !(one_row && N == kCachedDotN)) {
      #pragma GCC unroll 4
      for (int i = 0; i < 16; i += 4) {
        const T* rows = S + int64_t(p + i) * N;
        prefetch_span(rows, int64_t(4) * N * int64_t(sizeof(T)));  // four rows, contiguous
        dot16_lanes4(rows, N, c, N, acc + i);
      }
    } else if (N == kCachedDotN) {
      #pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        prefetch_span(S + int64_t(p + i) * N, int64_t(N) * int64_t(sizeof(T)));
        acc[i] = dot16_lanes_cached(S + int64_t(p + i) * N, cv);
      }
    } else {
      #pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        prefetch_span(S + int64_t(p + i) * N, int64_t(N) * int64_t(sizeof(T)));
        acc[i] = dot16_lanes(S + int64_t(p + i) * N, c, N);
      }
    }
    _mm512_storeu_ps(out + p, reduce16x16(acc));
  }
  for (; p < P; ++p) out[p] = reduce16(dot16_lanes(S + int64_t(p) * N, c, N));
}

// out[r][p] = dot16(S[p][:], c[r]) for four vectors c: each S load feeds four FMAs, which
// halves the loads per FMA compared with dots_rows (the row routine is load-bound there).
template <class T>
void dots_rows4(const T* S, int P, int N, const float* const* c, float* const* out) {
  int p = 0;
  for (; p + 4 <= P; p += 4) {
    __m512 acc[16];
    #pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
    const T* a0 = S + int64_t(p) * N;
    int k = 0;
    for (; k + kW <= N; k += kW) {
      __m512 sv[4];
      #pragma GCC unroll 16
      for (int i = 0; i < 4; ++i) sv[i] = load_state(a0 + int64_t(i) * N + k);
      #pragma GCC unroll 16
      for (int r = 0; r < 4; ++r) {
        const __m512 cv = _mm512_loadu_ps(c[r] + k);
        #pragma GCC unroll 16
        for (int i = 0; i < 4; ++i) acc[4 * r + i] = _mm512_fmadd_ps(sv[i], cv, acc[4 * r + i]);
      }
    }
    if (k < N) {
      const __mmask16 m = tail_mask(N - k);
      __m512 sv[4];
      #pragma GCC unroll 16
      for (int i = 0; i < 4; ++i) sv[i] = maskz_load_state(m, a0 + int64_t(i) * N + k);
      #pragma GCC unroll 16
      for (int r = 0; r < 4; ++r) {
        const __m512 cv = _mm512_maskz_loadu_ps(m, c[r] + k);
        #pragma GCC unroll 16
        for (int i = 0; i < 4; ++i) acc[4 * r + i] = _mm512_mask3_fmadd_ps(sv[i], cv, acc[4 * r + i], m);
      }
    }
    alignas(64) float res[16];
    _mm512_store_ps(res, reduce16x16(acc));
    #pragma GCC unroll 16
    for (int r = 0; r < 4; ++r)
      #pragma GCC unroll 16
      for (int i = 0; i < 4; ++i) out[r][p + i] = res[4 * r + i];
  }
  for (; p < P; ++p)
    #pragma GCC unroll 16
    for (int r = 0; r < 4; ++r) out[r][p] = dot16_one(S + int64_t(p) * N, c[r], N);
}

// SC of four rows from the boundary state, fp32 or bf16 (HeadChunk::Sb16).
inline void state_dots4(const HeadChunk& k, const float* const* c, float* const* out) {
  if (k.Sb16)
    dots_rows4(k.Sb16, k.P, k.N, c, out);
  else
    dots_rows4(k.Sb, k.P, k.N, c, out);
}


// The row routine, in three block sizes that share every per-element step: 1 row (decode),
// 4 rows (shared loads of x_s in the intra sum, interleaved decay chains), 16 rows (decay chains,
// decays and weights vectorised across the rows). Each row's arithmetic is the single-row
// sequence of ssd_internal.h whatever block it sits in.
//
// Intra sum and output for rows t0 .. t0+R-1, columns pc .. pc+16*NV-1 of head_dim. The weight
// of row r at s is w[r][s * ws].
template <int R, int NV>
void intra_and_output(const HeadChunk& k, int t0, const float* const* w, int ws, const float* const* sc,
                      const float* exp_cs, int pc) {
  __mmask16 m[NV];
  #pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) m[v] = tail_mask(k.P - pc - kW * v);
  __m512 acc[R][NV];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int s = 0; s <= t0; ++s) {
    const float* xs = k.x + s * k.ldx + pc;
    __m512 xv[NV];
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) xv[v] = _mm512_maskz_loadu_ps(m[v], xs + kW * v);
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 wb = _mm512_set1_ps(w[r][s * ws]);
      #pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(wb, xv[v], acc[r][v]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 1; r < R; ++r) {
    for (int s = t0 + 1; s <= t0 + r; ++s) {
      const float* xs = k.x + s * k.ldx + pc;
      const __m512 wb = _mm512_set1_ps(w[r][s * ws]);
      #pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(wb, _mm512_maskz_loadu_ps(m[v], xs + kW * v), acc[r][v]);
    }
  }
  const __m512 Dv = _mm512_set1_ps(k.D);
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const int t = t0 + r;
    const float* xt = k.x + t * k.ldx + pc;
    float* yt = k.yh + (k.out0 + t) * k.ldy + pc;
    const __m512 ec = _mm512_set1_ps(exp_cs[r]);
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      __m512 yv = _mm512_fmadd_ps(ec, _mm512_maskz_loadu_ps(m[v], sc[r] + pc + kW * v), acc[r][v]);
      yv = _mm512_fmadd_ps(Dv, _mm512_maskz_loadu_ps(m[v], xt + kW * v), yv);
      _mm512_mask_storeu_ps(yt + kW * v, m[v], yv);
    }
  }
}

template <int R>
void intra_all_columns(const HeadChunk& k, int t0, const float* const* w, int ws, const float* const* sc,
                       const float* exp_cs) {
  for (int pc = 0; pc < k.P; pc += 4 * kW) {
    const int nv = imin(4, (k.P - pc + kW - 1) / kW);
    switch (nv) {
      case 4: intra_and_output<R, 4>(k, t0, w, ws, sc, exp_cs, pc); break;
      case 3: intra_and_output<R, 3>(k, t0, w, ws, sc, exp_cs, pc); break;
      case 2: intra_and_output<R, 2>(k, t0, w, ws, sc, exp_cs, pc); break;
      default: intra_and_output<R, 1>(k, t0, w, ws, sc, exp_cs, pc); break;
    }
  }
}

// Rows t0..t0+R-1's decay sums, weights w[r][s] = CB(t, s)·decay·dt_s and exp(cs_t) (the row
// routine up to its state dots).
template <int R>
void row_weights(const HeadChunk& k, int t0, float* const* w, float* exp_cs) {
  const float* dA = k.dA;
  const float* dtc = k.dtc;
  float* sum[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) sum[r] = k.sum + int64_t(r) * k.lpad;
  // decay_sums() of each row, the R chains interleaved so their latencies overlap.
  float acc[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  #pragma GCC unroll 16
  for (int r = 1; r < R; ++r) {
    for (int s = t0 + r; s > t0; --s) {
      sum[r][s] = acc[r];
      acc[r] = acc[r] + dA[s];
    }
  }
  for (int s = t0; s >= 0; --s) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      sum[r][s] = acc[r];
      acc[r] = acc[r] + dA[s];
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const int t = t0 + r;
    exp_cs[r] = decay_one(acc[r]);
    const float* cbt = k.cb + int64_t(t) * k.ldcb;
    for (int s = 0; s <= t; s += kW) {
      const __mmask16 m = tail_mask(t + 1 - s);
      const __m512 e = decay16(_mm512_maskz_loadu_ps(m, sum[r] + s));
      const __m512 wv = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, cbt + s), e), _mm512_maskz_loadu_ps(m, dtc + s));
      _mm512_mask_storeu_ps(w[r] + s, m, wv);
    }
  }
}

template <int R>
void row_block(const HeadChunk& k, int t0) {
  float* w[R];
  float* sc[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    w[r] = k.w + int64_t(r) * k.lpad;
    sc[r] = k.sc + int64_t(r) * k.ppad;
  }
  float exp_cs[R];
  row_weights<R>(k, t0, w, exp_cs);
  const float* Ct[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) Ct[r] = k.Cg + (k.out0 + t0 + r) * k.ldb;
  if constexpr (R == 4) {
    state_dots4(k, Ct, sc);
  } else {
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      if (k.Sb16)
        dots_rows(k.Sb16, k.P, k.N, Ct[r], sc[r]);
      else
        dots_rows(k.Sb, k.P, k.N, Ct[r], sc[r]);
    }
  }
  intra_all_columns<R>(k, t0, w, 1, sc, exp_cs);
}

// Rows t0 .. t0+15 with CB in the transposed block layout of cb_block16_avx512: the sixteen
// decay chains run as the lanes of one vector (lane r joins at s = t0 + r, before which it holds
// 0 and is not added to), so the chain, its decays and the weights cost one vector operation per
// s for all sixteen rows. Sums and weights are stored [s][r].
void row_block16(const HeadChunk& k, int t0) {
  float* sum = k.sum;
  float* w = k.w;
  __m512 acc = _mm512_setzero_ps();
  for (int s = t0 + 15; s >= 0; --s) {
    _mm512_storeu_ps(sum + int64_t(s) * 16, acc);
    const __mmask16 active = s <= t0 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>(0xFFFFu << (s - t0));
    acc = _mm512_mask_add_ps(acc, active, acc, _mm512_set1_ps(k.dA[s]));
  }
  alignas(64) float exp_cs[16];
  _mm512_store_ps(exp_cs, decay16(acc));
  const float* cbt = k.cb + int64_t(t0) * k.ldcb;
  for (int s = 0; s <= t0 + 15; ++s) {
    const __m512 e = decay16(_mm512_loadu_ps(sum + int64_t(s) * 16));
    const __m512 wv = _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(cbt + int64_t(s) * 16), e), _mm512_set1_ps(k.dtc[s]));
    _mm512_storeu_ps(w + int64_t(s) * 16, wv);
  }
  for (int q = 0; q < 4; ++q) {
    const float* Ct[4];
    float* sc[4];
    const float* wr[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      Ct[r] = k.Cg + (k.out0 + t0 + 4 * q + r) * k.ldb;
      sc[r] = k.sc + int64_t(4 * q + r) * k.ppad;
      wr[r] = w + 4 * q + r;
    }
    state_dots4(k, Ct, sc);
    intra_all_columns<4>(k, t0 + 4 * q, wr, 16, sc, exp_cs + 4 * q);
  }
}

// Lines of HeadChunk::pf_next still to ask for, handed out a few per fold tile and one per s row
// inside it, so that the requests trickle out at about the pace the memory answers them.
struct FoldPrefetch {
  const char* at = nullptr;
  const char* end = nullptr;
  int per_tile = 0, quota = 0;
  bool l2 = false;  // into L2 rather than L1 (the stream plan's fold_next)
  void one() {
    if (at >= end) return;
    if (l2)
      _mm_prefetch(at, _MM_HINT_T1);
    else
      _mm_prefetch(at, _MM_HINT_T0);
    at += 64;
  }
};

// k.pf_next's lines spread evenly over a fold of `tiles` register tiles.
inline FoldPrefetch fold_prefetch(const HeadChunk& k, int tiles) {
  FoldPrefetch pf;
  const int where = fold_prefetch_next();
  if (k.pf_next && k.pf_bytes > 0 && where != 0) {
    pf.l2 = where == 2;
    const int64_t lines = (k.pf_bytes + 63) / 64;
    pf.at = static_cast<const char*>(k.pf_next);
    pf.end = pf.at + lines * 64;
    pf.per_tile = static_cast<int>((lines + tiles - 1) / tiles);
  }
  return pf;
}

// The fold's rank-1 updates of rows s_begin..s_end-1 in order into a PB x 16*NV tile held in registers
// (acc = fma(u_s[p], B_s, acc), the scalar sequence element by element), then the tile's stores; the
// prefetch quota issues a line a row and what is left after the stores.
template <int PB, int NV, bool kHw, class TD>
inline void fold_rows_and_store(const HeadChunk& k, const float* u, int ldu, TD* dst, int p0, int n0, int s_begin,
                                int s_end, const __mmask16 (&m)[NV], __m512 (&acc)[PB][NV], FoldPrefetch& pf) {
  for (int s = s_begin; s < s_end; ++s) {
    const float* bs = k.Bg + s * k.ldb + n0;
    __m512 bv[NV];
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_maskz_loadu_ps(m[v], bs + kW * v);
    if (pf.quota > 0) {
      pf.one();
      --pf.quota;
    }
    const float* us = u + int64_t(s) * ldu + p0;
    #pragma GCC unroll 16
    for (int i = 0; i < PB; ++i) {
      const __m512 ub = _mm512_set1_ps(us[i]);
      #pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ub, bv[v], acc[i][v]);
    }
  }
  #pragma GCC unroll 16
  for (int i = 0; i < PB; ++i) store_state_row<NV, kHw>(dst + int64_t(p0 + i) * k.N + n0, m, acc[i]);
  for (; pf.quota > 0; --pf.quota) pf.one();
}

// The fold on a PB x 16*NV tile of the state held in registers, rows s_begin..s_end-1 in order
// (fold_rows_and_store). E (non-null in the first s-tile) scales the boundary values as they are loaded.
template <int PB, int NV, bool kHw, class TS, class TD>
void fold_tile(const HeadChunk& k, const float* u, int ldu, const float* E, const TS* src, TD* dst, int p0,
               int n0, int s_begin, int s_end, FoldPrefetch& pf) {
  pf.quota = pf.per_tile;
  __mmask16 m[NV];
  #pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) m[v] = tail_mask(k.N - n0 - kW * v);
  __m512 acc[PB][NV];
  #pragma GCC unroll 16
  for (int i = 0; i < PB; ++i) {
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[i][v] = maskz_load_state(m[v], src + int64_t(p0 + i) * k.N + n0 + kW * v);
  }
  if (E) {
    const __m512 ev = _mm512_set1_ps(*E);
    #pragma GCC unroll 16
    for (int i = 0; i < PB; ++i) {
      #pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_mul_ps(ev, acc[i][v]);
    }
  }
  fold_rows_and_store<PB, NV, kHw>(k, u, ldu, dst, p0, n0, s_begin, s_end, m, acc, pf);
}

template <int PB, bool kHw, class TS, class TD>
void fold_tiles_n(const HeadChunk& k, const float* u, int ldu, const float* E, const TS* src, TD* dst, int p0,
                  int sb, int se, FoldPrefetch& pf) {
  for (int n0 = 0; n0 < k.N; n0 += 4 * kW) {
    const int nv = imin(4, (k.N - n0 + kW - 1) / kW);
    switch (nv) {
      case 4: fold_tile<PB, 4, kHw, TS, TD>(k, u, ldu, E, src, dst, p0, n0, sb, se, pf); break;
      case 3: fold_tile<PB, 3, kHw, TS, TD>(k, u, ldu, E, src, dst, p0, n0, sb, se, pf); break;
      case 2: fold_tile<PB, 2, kHw, TS, TD>(k, u, ldu, E, src, dst, p0, n0, sb, se, pf); break;
      default: fold_tile<PB, 1, kHw, TS, TD>(k, u, ldu, E, src, dst, p0, n0, sb, se, pf); break;
    }
  }
}

// One s-tile of the fold over every (p, n) tile of the state.
template <bool kHw, class TS, class TD>
void fold_stile(const HeadChunk& k, const float* u, int ldu, const float* E, const TS* src, TD* dst, int sb, int se,
                FoldPrefetch& pf) {
  int p0 = 0;
  for (; p0 + 4 <= k.P; p0 += 4) fold_tiles_n<4, kHw>(k, u, ldu, E, src, dst, p0, sb, se, pf);
  for (; p0 < k.P; ++p0) fold_tiles_n<1, kHw>(k, u, ldu, E, src, dst, p0, sb, se, pf);
}

// The fold routine: state after the chunk's Lc rows from the boundary state (k.Sb, or k.Sb16 when
// set) into dst (fp32), or into dst16 rounded to bf16 with fp32 work space `tmp` between s-tiles
// (needed only when Lc > kSTile). dst / dst16 may be the boundary state itself.
constexpr int kSTile = 32;
// The fold's factors (ssd_internal.h): e[s] = c_s = decay_f(sum[s]) * dt_s for s < Lc, e[Lc] = E =
// decay_f(sum[Lc]), with sum the decay sums of row Lc-1 (formed in e itself, sequentially from the
// last row down as decay_sums does), and u[s][p] = c_s * x_s[p] (ld k.ppad). e holds Lc + 1 floats.
void fold_factors(const HeadChunk& k, float* e, float* u) {
  const int Lc = k.Lc;
  float acc = 0.0f;
  for (int s = Lc - 1; s >= 0; --s) {
    e[s] = acc;
    acc = acc + k.dA[s];
  }
  e[Lc] = acc;
  for (int s = 0; s <= Lc; s += kW) {
    const __mmask16 m = tail_mask(Lc + 1 - s), mdt = lane_mask(Lc - s);
    const __m512 d = decay16(_mm512_maskz_loadu_ps(m, e + s));
    _mm512_mask_storeu_ps(e + s, m, _mm512_mask_mul_ps(d, mdt, d, _mm512_maskz_loadu_ps(mdt, k.dtc + s)));
  }
  for (int s = 0; s < Lc; ++s) {
    const __m512 d = _mm512_set1_ps(e[s]);
    const float* xs = k.x + s * k.ldx;
    for (int p = 0; p < k.P; p += kW) {
      const __mmask16 m = tail_mask(k.P - p);
      _mm512_mask_storeu_ps(u + int64_t(s) * k.ppad + p, m, _mm512_mul_ps(d, _mm512_maskz_loadu_ps(m, xs + p)));
    }
  }
}

template <bool kHw>
void fold(const HeadChunk& k, float* dst, uint16_t* dst16, float* tmp) {
  const int Lc = k.Lc;
  float* e = k.w;
  float* u = k.u;
  const int ldu = k.ppad;
  fold_factors(k, e, u);
  // s is cut into tiles so that the tile's B rows and u rows stay in L1 across all (p, n) blocks;
  // every state element still sees s in increasing order.
  float* work = dst16 ? tmp : dst;
  FoldPrefetch pf = fold_prefetch(k, (Lc + kSTile - 1) / kSTile * (k.P / 4 + k.P % 4) * ((k.N + 4 * kW - 1) / (4 * kW)));
  for (int sb = 0; sb < Lc; sb += kSTile) {
    const int se = imin(Lc, sb + kSTile);
    const bool first = sb == 0, last = se == Lc;
    if (dst16 && last) {
      if (!first)
        fold_stile<kHw>(k, u, ldu, nullptr, work, dst16, sb, se, pf);
      else if (k.Sb16)
        fold_stile<kHw>(k, u, ldu, e + Lc, k.Sb16, dst16, sb, se, pf);
      else
        fold_stile<kHw>(k, u, ldu, e + Lc, k.Sb, dst16, sb, se, pf);
    } else if (!first) {
      fold_stile<kHw>(k, u, ldu, nullptr, work, work, sb, se, pf);
    } else if (k.Sb16) {
      fold_stile<kHw>(k, u, ldu, e + Lc, k.Sb16, work, sb, se, pf);
    } else {
      fold_stile<kHw>(k, u, ldu, e + Lc, k.Sb, work, sb, se, pf);
    }
  }
}

// The fold tile of fold_tile with the state dots of one output row riding along: while the tile's
// PB x 16*NV boundary values sit in registers before the fold, they also enter lane accumulators
// of dot16(S[p][:], c) (lanes[i], one per row, carried from the n tile before in n order), the
// chain dot16_lanes runs. The values the dots read are the old ones, as the row routine needs.
template <int PB, int NV, bool kHw, class TS, class TD>
void fold_dot_tile(const HeadChunk& k, const float* u, int ldu, const float* E, const TS* src, TD* dst, int p0,
                   int n0, const float* c, __m512* lanes, FoldPrefetch& pf) {
  pf.quota = pf.per_tile;
  const __m512 ev = _mm512_set1_ps(*E);
  __mmask16 m[NV];
  #pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) m[v] = tail_mask(k.N - n0 - kW * v);
  __m512 cv[NV];
  #pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) cv[v] = _mm512_maskz_loadu_ps(m[v], c + n0 + kW * v);
  __m512 acc[PB][NV];
  #pragma GCC unroll 16
  for (int i = 0; i < PB; ++i) {
    const TS* row = src + int64_t(p0 + i) * k.N + n0;
    if (n0 == 0) prefetch_ahead(row, k.N);  // the state streams from memory: keep lines coming
    __m512 d = lanes[i];
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      acc[i][v] = maskz_load_state(m[v], row + kW * v);
      d = _mm512_mask3_fmadd_ps(acc[i][v], cv[v], d, m[v]);  // absent lanes keep their sum
      acc[i][v] = _mm512_mul_ps(ev, acc[i][v]);
    }
    lanes[i] = d;
  }
  fold_rows_and_store<PB, NV, kHw>(k, u, ldu, dst, p0, n0, 0, k.Lc, m, acc, pf);
}

template <int PB, bool kHw, class TS, class TD>
void fold_dot_rows(const HeadChunk& k, const float* u, int ldu, const float* E, const TS* src, TD* dst, int p0,
                   const float* c, __m512* lanes, FoldPrefetch& pf) {
  #pragma GCC unroll 4
  for (int i = 0; i < PB; ++i) lanes[i] = _mm512_setzero_ps();
  for (int n0 = 0; n0 < k.N; n0 += 4 * kW) {
    switch (imin(4, (k.N - n0 + kW - 1) / kW)) {
      case 4: fold_dot_tile<PB, 4, kHw>(k, u, ldu, E, src, dst, p0, n0, c, lanes, pf); break;
      case 3: fold_dot_tile<PB, 3, kHw>(k, u, ldu, E, src, dst, p0, n0, c, lanes, pf); break;
      case 2: fold_dot_tile<PB, 2, kHw>(k, u, ldu, E, src, dst, p0, n0, c, lanes, pf); break;
      default: fold_dot_tile<PB, 1, kHw>(k, u, ldu, E, src, dst, p0, n0, c, lanes, pf); break;
    }
  }
}

// Decode at a cell's last row: the row routine's output row and the fold, in one pass over the
// state (head_rows_avx512 + fold would read it twice: once from memory for the dots, then again for
// the fold, whose arithmetic then ran with no memory traffic in flight). Every value is computed
// by the same sequence as there: the dots by dot16_lanes' chain and the same fold tree, the fold
// by fold_tile's, so the bits are those of the two-pass path.
template <bool kHw, class T>
void row_and_fold(const HeadChunk& k, int t, T* state) {
  float* w[1] = {k.w + k.lpad};  // k.w's first row holds the fold's factors
  float exp_cs[1];
  row_weights<1>(k, t, w, exp_cs);
  float* e = k.w;
  fold_factors(k, e, k.u);
  const float* c = k.Cg + (k.out0 + t) * k.ldb;
  alignas(64) float lanes16[16 * 16];
  __m512* lanes = reinterpret_cast<__m512*>(lanes16);
  float* sc = k.sc;
  FoldPrefetch pf = fold_prefetch(k, (k.P / 4 + k.P % 4) * ((k.N + 4 * kW - 1) / (4 * kW)));
  int p0 = 0;
  for (; p0 + 16 <= k.P; p0 += 16) {
    for (int q = 0; q < 4; ++q) fold_dot_rows<4, kHw>(k, k.u, k.ppad, e + k.Lc, state, state, p0 + 4 * q, c, lanes + 4 * q, pf);
    _mm512_storeu_ps(sc + p0, reduce16x16(lanes));
  }
  for (; p0 < k.P; ++p0) {
    fold_dot_rows<1, kHw>(k, k.u, k.ppad, e + k.Lc, state, state, p0, c, lanes, pf);
    sc[p0] = reduce16(lanes[0]);
  }
  const float* scr[1] = {sc};
  const float* wr[1] = {w[0]};
  intra_all_columns<1>(k, t, wr, 1, scr, exp_cs);
}

}  // namespace

void cb_block16_avx512(const float* Bg, int64_t ldb, const float* C0, int N, int t0, float* out) {
  const float* crows[16];
  for (int i = 0; i < 16; ++i) crows[i] = C0 + i * ldb;
  for (int s = 0; s <= t0 + 15; ++s) dot16x16(crows, Bg + s * ldb, N, out + int64_t(s) * 16);
}

void cb_row_avx512(const float* Bg, int64_t ldb, const float* Ct, int N, int t, float* cbt) {
  for (int s0 = 0; s0 <= t; s0 += kW) {
    const float* brows[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) brows[i] = Bg + imin(s0 + i, t) * ldb;  // beyond t: computed, unused
    dot16x16(brows, Ct, N, cbt + s0);
  }
}

void cb_band_avx512(const float* Bg, int64_t ldb, const float* Ct, int N, int first_out, int rows, int width,
                    float* band) {
  alignas(64) float dots[16];
  for (int i = 0; i < rows; ++i) {
    const int t = first_out + i, s_lo = t - (width - 1);
    for (int j0 = 0; j0 < width; j0 += kW) {
      const float* brows[16];
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) {
        const int s = s_lo + j0 + q;
        brows[q] = Bg + (s < 0 ? 0 : imin(s, t)) * ldb;  // outside the band's rows: computed, unused
      }
      dot16x16(brows, Ct + int64_t(i) * ldb, N, dots);
      for (int q = 0; q < kW && j0 + q < width; ++q)
        if (s_lo + j0 + q >= 0) band[int64_t(i) * width + j0 + q] = dots[q];
    }
  }
}

void head_rows_avx512(const HeadChunk& k, int t_lo) {
  int t = t_lo;
  for (; t < rows16_end(t_lo, k.Lc); t += 16) row_block16(k, t);
  for (; t + kRowBlock <= k.Lc; t += kRowBlock) row_block<kRowBlock>(k, t);
  for (; t < k.Lc; ++t) row_block<1>(k, t);
}

void round_bf16_avx512(const float* in, uint16_t* out, int n, Bf16Rounding how) {
  for (int i = 0; i < n; i += 2 * kW) {
    const __mmask16 m[2] = {tail_mask(n - i), lane_mask(n - i - kW)};
    const __m512 v[2] = {_mm512_maskz_loadu_ps(m[0], in + i), _mm512_maskz_loadu_ps(m[1], in + i + kW)};
    if (how == Bf16Rounding::Integer) {
      store_state_row<2, false>(out + i, m, v);
    } else if (how == Bf16Rounding::Hardware) {
      store_state_row<2, true>(out + i, m, v);
    } else {
      const __mmask32 sm = static_cast<__mmask32>(m[0]) | static_cast<__mmask32>(m[1]) << 16;
      _mm512_mask_storeu_epi16(out + i, sm, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(v[1], v[0])));
    }
  }
}

void fold_avx512(const HeadChunk& k, float* dst) { fold<false>(k, dst, nullptr, nullptr); }

void fold_bf16_avx512(const HeadChunk& k, uint16_t* dst, float* tmp, bool hw_bf16) {
  if (hw_bf16)
    fold<true>(k, nullptr, dst, tmp);
  else
    fold<false>(k, nullptr, dst, tmp);
}

void row_and_fold_avx512(const HeadChunk& k, int t, float* state) { row_and_fold<false>(k, t, state); }

void row_and_fold_bf16_avx512(const HeadChunk& k, int t, uint16_t* state, bool hw_bf16) {
  if (hw_bf16)
    row_and_fold<true>(k, t, state);
  else
    row_and_fold<false>(k, t, state);
}

}  // namespace parity::kernels::ssd_detail
