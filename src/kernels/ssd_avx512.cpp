// AVX-512 SSD scan and SSU step. Every output element goes through exactly the scalar sequence of
// ssd_internal.h; vectors only run many such sequences side by side (across head_dim in the row
// routine, across d_state in the fold, across dot products in the 16-lane dots), so the bits equal
// the scalar twin's. Compiled with AVX-512 flags: call only after active_isa() says so.
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its flow analysis reports
// once inlined (same false positive as in gemm_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <cstring>

#include "common/aligned.h"
#include "kernels/isa.h"
#include "kernels/math.h"
#include "kernels/ssd_internal.h"

namespace parity::kernels::ssd_detail {

namespace {

constexpr int kW = 16;

inline int round_up(int v, int m) { return (v + m - 1) / m * m; }

inline __mmask16 tail_mask(int count) {
  return count >= kW ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

// exp_f of math.h lane by lane: same clamps, same rounding of n, same FMAs, same two-step scaling.
inline __m512 exp16(__m512 x) {
  using namespace mathc;
  const __m512 vmax = _mm512_set1_ps(kExpMax), vmin = _mm512_set1_ps(kExpMin);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __mmask16 big = _mm512_cmp_ps_mask(x, vmax, _CMP_GT_OQ);
  const __mmask16 small = _mm512_cmp_ps_mask(x, vmin, _CMP_LT_OQ);
  // Out-of-range lanes are overwritten below; clamping keeps their integer scale in range.
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, vmin), vmax);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kE7);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kE6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kE5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kE4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kE3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kE2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  // C's n / 2 truncates toward zero; n * 0.5 is exact, so truncating it gives the same n1.
  const __m512 n1 = _mm512_roundscale_ps(_mm512_mul_ps(n, _mm512_set1_ps(0.5f)), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 n2 = _mm512_sub_ps(n, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 f1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n1), bias), 23));
  const __m512 f2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n2), bias), 23));
  __m512 e = _mm512_mul_ps(_mm512_mul_ps(p, f1), f2);
  e = _mm512_mask_mov_ps(e, big, _mm512_set1_ps(INFINITY));
  e = _mm512_mask_mov_ps(e, small, _mm512_setzero_ps());
  return _mm512_mask_mov_ps(e, nan, x);
}

// decay_f of ssd_internal.h lane by lane.
inline __m512 decay16(__m512 a) {
  const __mmask16 below = _mm512_cmp_ps_mask(a, _mm512_set1_ps(kDecayFloor), _CMP_LT_OQ);
  return _mm512_mask_mov_ps(exp16(a), below, _mm512_setzero_ps());
}

// Folds 16 lane accumulators to 16 dot results with the tree of ssd_internal.h (lane j + lane j+h
// for h = 8, 4, 2, 1), four tree levels shared by all 16 through shuffles. Result lane i holds
// the dot of acc[i].
inline __m512 reduce16x16(const __m512* acc) {
  __m512 l1[8], l2[4], l3[2];
  #pragma GCC unroll 16
  for (int i = 0; i < 8; ++i) {  // lanes 0..7: acc[2i] j + j+8; lanes 8..15: acc[2i+1]
    const __m512 lo = _mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 hi = _mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2));
    l1[i] = _mm512_add_ps(lo, hi);
  }
  #pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) {  // 128-bit quad q holds acc[4i+q], lanes j + j+4
    const __m512 lo = _mm512_shuffle_f32x4(l1[2 * i], l1[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 hi = _mm512_shuffle_f32x4(l1[2 * i], l1[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1));
    l2[i] = _mm512_add_ps(lo, hi);
  }
  #pragma GCC unroll 16
  for (int i = 0; i < 2; ++i) {  // quad q: lanes 0,1 from acc[8i+q], lanes 2,3 from acc[8i+4+q]
    const __m512 lo = _mm512_shuffle_ps(l2[2 * i], l2[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 hi = _mm512_shuffle_ps(l2[2 * i], l2[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2));
    l3[i] = _mm512_add_ps(lo, hi);
  }
  const __m512 lo = _mm512_shuffle_ps(l3[0], l3[1], _MM_SHUFFLE(2, 0, 2, 0));
  const __m512 hi = _mm512_shuffle_ps(l3[0], l3[1], _MM_SHUFFLE(3, 1, 3, 1));
  const __m512 z = _mm512_add_ps(lo, hi);  // lane 4q + m holds acc[q + 4m]
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(idx, z);
}

inline float reduce16(__m512 a) {
  const __m256 l1 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  const __m128 l2 = _mm_add_ps(_mm256_castps256_ps128(l1), _mm256_extractf128_ps(l1, 1));
  const __m128 l3 = _mm_add_ps(l2, _mm_movehl_ps(l2, l2));
  const __m128 l4 = _mm_add_ss(l3, _mm_shuffle_ps(l3, l3, 1));
  return _mm_cvtss_f32(l4);
}

// out[i] = dot16(rows[i], c) for i < 16.
inline void dot16x16(const float* const* rows, const float* c, int N, float* out) {
  __m512 acc[16];
  #pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  int k = 0;
  for (; k + kW <= N; k += kW) {
    const __m512 cv = _mm512_loadu_ps(c + k);
    #pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(rows[i] + k), cv, acc[i]);
  }
  if (k < N) {  // absent lanes keep their sum untouched, as in the scalar loop
    const __mmask16 m = tail_mask(N - k);
    const __m512 cv = _mm512_maskz_loadu_ps(m, c + k);
    #pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      acc[i] = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, rows[i] + k), cv, acc[i], m);
    }
  }
  _mm512_storeu_ps(out, reduce16x16(acc));
}

inline float dot16_one(const float* a, const float* b, int N) {
  __m512 acc = _mm512_setzero_ps();
  int k = 0;
  for (; k + kW <= N; k += kW) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc);
  if (k < N) {
    const __mmask16 m = tail_mask(N - k);
    acc = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k), acc, m);
  }
  return reduce16(acc);
}

// out[p] = dot16(S[p][:], c) for p < P (S rows of N floats).
void dots_rows(const float* S, int P, int N, const float* c, float* out) {
  int p = 0;
  for (; p + 16 <= P; p += 16) {
    const float* rows[16];
    #pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) rows[i] = S + int64_t(p + i) * N;
    dot16x16(rows, c, N, out + p);
  }
  for (; p < P; ++p) out[p] = dot16_one(S + int64_t(p) * N, c, N);
}

// out[r][p] = dot16(S[p][:], c[r]) for four vectors c: each S load feeds four FMAs, which
// halves the loads per FMA compared with dots_rows (the row routine is load-bound there).
void dots_rows4(const float* S, int P, int N, const float* const* c, float* const* out) {
  int p = 0;
  for (; p + 4 <= P; p += 4) {
    __m512 acc[16];
    #pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
    const float* a0 = S + int64_t(p) * N;
    int k = 0;
    for (; k + kW <= N; k += kW) {
      __m512 sv[4];
      #pragma GCC unroll 16
      for (int i = 0; i < 4; ++i) sv[i] = _mm512_loadu_ps(a0 + int64_t(i) * N + k);
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
      for (int i = 0; i < 4; ++i) sv[i] = _mm512_maskz_loadu_ps(m, a0 + int64_t(i) * N + k);
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

// Per-thread scratch, grown on demand so that steady-state calls allocate nothing.
struct Scratch {
  static constexpr int kRows = 4;  // rows per block of the row routine
  AlignedBuffer<float> dA, dtc, sum, w, sc, u, xc;
  int lpad = 0, ppad = 0;
  void reserve(int L, int P) {
    const int lp = round_up(L + 2, kW), pp = round_up(P, kW);
    if (lp <= lpad && pp <= ppad && u.size() >= size_t(L) * pp) return;
    lpad = std::max(lp, lpad);
    ppad = std::max(pp, ppad);
    dA.resize(lpad);
    dtc.resize(lpad);
    sum.resize(size_t(kRows) * lpad);
    w.resize(size_t(kRows) * lpad);
    sc.resize(size_t(kRows) * ppad);
    u.resize(size_t(lpad) * ppad);
    xc.resize(size_t(lpad) * ppad);
  }
};

Scratch& thread_scratch() {
  thread_local Scratch s;
  return s;
}

// One head inside one chunk.
struct HeadChunk {
  int P, N, Lc;
  int64_t ldx, ldb, ldy;
  const float* x;    // chunk row 0 of this head (row stride ldx)
  const float* Bg;   // chunk row 0 of this head's group
  const float* Cg;   // C of this head's group; chunk row t is at row out0 + t
  float* yh;         // y of this head; chunk row t is at row out0 + t
  int64_t out0;      // c0 - first_out
  const float* cb;   // CB(t, s) at cb[t * ldcb + s]
  int ldcb;
  const float* Sb;   // boundary state of this head, [P][N]
  float D;
};

// The row routine for rows t0 .. t0+R-1 (all inside the chunk). Each row's arithmetic is the
// single-row sequence; a block only shares loads of x_s and interleaves independent chains.
template <int R, int NV>
void intra_and_output(const HeadChunk& k, int t0, float* const* w, float* const* sc, const float* exp_cs, int pc) {
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
      const __m512 wb = _mm512_set1_ps(w[r][s]);
      #pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(wb, xv[v], acc[r][v]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 1; r < R; ++r) {
    for (int s = t0 + 1; s <= t0 + r; ++s) {
      const float* xs = k.x + s * k.ldx + pc;
      const __m512 wb = _mm512_set1_ps(w[r][s]);
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
void row_block(const HeadChunk& k, Scratch& scr, int t0) {
  const float* dA = scr.dA.data();
  const float* dtc = scr.dtc.data();
  float* sum[R];
  float* w[R];
  float* sc[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    sum[r] = scr.sum.data() + size_t(r) * scr.lpad;
    w[r] = scr.w.data() + size_t(r) * scr.lpad;
    sc[r] = scr.sc.data() + size_t(r) * scr.ppad;
  }
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
  float exp_cs[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const int t = t0 + r;
    exp_cs[r] = decay_f(acc[r]);
    const float* cbt = k.cb + int64_t(t) * k.ldcb;
    for (int s = 0; s <= t; s += kW) {
      const __mmask16 m = tail_mask(t + 1 - s);
      const __m512 e = decay16(_mm512_maskz_loadu_ps(m, sum[r] + s));
      const __m512 wv = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, cbt + s), e), _mm512_maskz_loadu_ps(m, dtc + s));
      _mm512_mask_storeu_ps(w[r] + s, m, wv);
    }
  }
  const float* Ct[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) Ct[r] = k.Cg + (k.out0 + t0 + r) * k.ldb;
  if constexpr (R == 4) {
    dots_rows4(k.Sb, k.P, k.N, Ct, sc);
  } else {
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) dots_rows(k.Sb, k.P, k.N, Ct[r], sc[r]);
  }
  for (int pc = 0; pc < k.P; pc += 4 * kW) {
    const int nv = std::min(4, (k.P - pc + kW - 1) / kW);
    switch (nv) {
      case 4: intra_and_output<R, 4>(k, t0, w, sc, exp_cs, pc); break;
      case 3: intra_and_output<R, 3>(k, t0, w, sc, exp_cs, pc); break;
      case 2: intra_and_output<R, 2>(k, t0, w, sc, exp_cs, pc); break;
      default: intra_and_output<R, 1>(k, t0, w, sc, exp_cs, pc); break;
    }
  }
}

template <int PB, int NV>
void fold_tile(const HeadChunk& k, const float* u, int ldu, const float* src, float* dst, int p0, int n0, int s_begin,
               int s_end, bool first, float exp_total) {
  __mmask16 m[NV];
  #pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) m[v] = tail_mask(k.N - n0 - kW * v);
  __m512 acc[PB][NV];
  const __m512 et = _mm512_set1_ps(exp_total);
  #pragma GCC unroll 16
  for (int i = 0; i < PB; ++i) {
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const int64_t off = int64_t(p0 + i) * k.N + n0 + kW * v;
      acc[i][v] = first ? _mm512_mul_ps(et, _mm512_maskz_loadu_ps(m[v], src + off)) : _mm512_maskz_loadu_ps(m[v], dst + off);
    }
  }
  for (int s = s_begin; s < s_end; ++s) {
    const float* bs = k.Bg + s * k.ldb + n0;
    __m512 bv[NV];
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_maskz_loadu_ps(m[v], bs + kW * v);
    const float* us = u + int64_t(s) * ldu + p0;
    #pragma GCC unroll 16
    for (int i = 0; i < PB; ++i) {
      const __m512 ub = _mm512_set1_ps(us[i]);
      #pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ub, bv[v], acc[i][v]);
    }
  }
  #pragma GCC unroll 16
  for (int i = 0; i < PB; ++i) {
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      _mm512_mask_storeu_ps(dst + int64_t(p0 + i) * k.N + n0 + kW * v, m[v], acc[i][v]);
    }
  }
}

template <int PB>
void fold_tiles_n(const HeadChunk& k, const float* u, int ldu, const float* src, float* dst, int p0, int sb, int se,
                  bool first, float et) {
  for (int n0 = 0; n0 < k.N; n0 += 4 * kW) {
    const int nv = std::min(4, (k.N - n0 + kW - 1) / kW);
    switch (nv) {
      case 4: fold_tile<PB, 4>(k, u, ldu, src, dst, p0, n0, sb, se, first, et); break;
      case 3: fold_tile<PB, 3>(k, u, ldu, src, dst, p0, n0, sb, se, first, et); break;
      case 2: fold_tile<PB, 2>(k, u, ldu, src, dst, p0, n0, sb, se, first, et); break;
      default: fold_tile<PB, 1>(k, u, ldu, src, dst, p0, n0, sb, se, first, et); break;
    }
  }
}

// The fold routine: state after the chunk's Lc rows from k.Sb into dst (dst may equal k.Sb).
void fold(const HeadChunk& k, Scratch& scr, float* dst) {
  const int T = k.Lc - 1;
  float* sum = scr.sum.data();
  float* coef = scr.w.data();
  decay_sums(scr.dA.data(), T, sum);
  const float exp_total = decay_f(sum[T + 1]);
  for (int s = 0; s <= T; s += kW) {
    const __mmask16 m = tail_mask(T + 1 - s);
    const __m512 c = _mm512_mul_ps(decay16(_mm512_maskz_loadu_ps(m, sum + s)), _mm512_maskz_loadu_ps(m, scr.dtc.data() + s));
    _mm512_mask_storeu_ps(coef + s, m, c);
  }
  float* u = scr.u.data();
  const int ldu = scr.ppad;
  for (int s = 0; s <= T; ++s) {
    const __m512 c = _mm512_set1_ps(coef[s]);
    const float* xs = k.x + s * k.ldx;
    for (int p = 0; p < k.P; p += kW) {
      const __mmask16 m = tail_mask(k.P - p);
      _mm512_mask_storeu_ps(u + int64_t(s) * ldu + p, m, _mm512_mul_ps(c, _mm512_maskz_loadu_ps(m, xs + p)));
    }
  }
  // s is cut into tiles so that the tile's B rows and u rows stay in L1 across all (p, n) blocks;
  // every state element still sees s in increasing order.
  constexpr int kSTile = 32;
  for (int sb = 0; sb <= T; sb += kSTile) {
    const int se = std::min(T + 1, sb + kSTile);
    const bool first = sb == 0;
    int p0 = 0;
    for (; p0 + 4 <= k.P; p0 += 4) fold_tiles_n<4>(k, u, ldu, k.Sb, dst, p0, sb, se, first, exp_total);
    for (; p0 < k.P; ++p0) fold_tiles_n<1>(k, u, ldu, k.Sb, dst, p0, sb, se, first, exp_total);
  }
}

}  // namespace

void scan_avx512(const ScanArgs& a) {
  const SsdShape& sh = a.shape;
  const int H = sh.nheads, P = sh.headdim, G = sh.ngroups, N = sh.dstate, L = sh.chunk_size;
  const int hpg = H / G;
  const int64_t ldx = int64_t(H) * P, ldb = int64_t(G) * N, pn = int64_t(P) * N, hpn = int64_t(H) * pn;
  const int nthreads = kernels::num_threads();
  if (a.n == 0) {
    if (a.final_state) std::memcpy(a.final_state, a.s0, sizeof(float) * hpn);
    return;
  }
  const int nchunks = (a.n + L - 1) / L;
  const int ldcb = round_up(L, kW);
  // Buffers of the calling thread, shared read-only (CB) or by disjoint head slices (state).
  thread_local AlignedBuffer<float> cb_buf, work;
  const bool any_out = a.first_out < a.n;
  if (any_out && cb_buf.size() < size_t(G) * L * ldcb) cb_buf.resize(size_t(G) * L * ldcb);
  // Inside the parallel regions a thread_local name would mean the worker's own copy: pass pointers.
  float* const cb_all = cb_buf.data();

  const float* Sb = a.s0;
  for (int c = 0; c < nchunks; ++c) {
    const int c0 = c * L;
    const int Lc = std::min(L, a.n - c0);
    const bool last = c == nchunks - 1, complete = Lc == L;
    const int t_lo = std::max(0, a.first_out - c0);
    const bool do_fold = complete ? (!last || a.chunk_states || a.final_state) : a.final_state != nullptr;
    float* dst = nullptr;
    if (do_fold) {
      if (complete && a.chunk_states) {
        dst = a.chunk_states + int64_t(c) * hpn;
      } else if (last) {
        dst = a.final_state;
      } else {
        if (work.size() < size_t(hpn)) work.resize(hpn);
        dst = work.data();
      }
    }
    const int64_t out0 = int64_t(c0) - a.first_out;

    if (t_lo < Lc) {
      // CB(t, s) per group, shared by the group's heads; rows are independent items.
      const int rows = Lc - t_lo;
      const int items = G * rows;
      const double work_est = double(items) * (t_lo + rows / 2 + 16) * N;
#pragma omp parallel for num_threads(nthreads) schedule(static, 1) if (work_est > 65536.0)
      for (int it = 0; it < items; ++it) {
        const int g = it / rows, t = t_lo + it % rows;
        const float* Bg = a.B + int64_t(c0) * ldb + int64_t(g) * N;
        const float* Ct = a.C + (out0 + t) * ldb + int64_t(g) * N;
        float* cbt = cb_all + (size_t(g) * L + t) * ldcb;
        for (int s0 = 0; s0 <= t; s0 += kW) {
          const float* brows[16];
          #pragma GCC unroll 16
          for (int i = 0; i < 16; ++i) brows[i] = Bg + std::min(s0 + i, t) * ldb;  // beyond t: unused
          dot16x16(brows, Ct, N, cbt + s0);
        }
      }
    }

    if (t_lo < Lc || do_fold) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
      for (int h = 0; h < H; ++h) {
        Scratch& scr = thread_scratch();
        scr.reserve(L, P);
        const int g = h / hpg;
        const float Ah = a.A[h];
        for (int s = 0; s < Lc; ++s) {
          const float d = a.dt[int64_t(c0 + s) * H + h];
          scr.dtc[s] = d;
          scr.dA[s] = d * Ah;
        }
        HeadChunk k;
        k.P = P;
        k.N = N;
        k.Lc = Lc;
        k.ldx = ldx;
        k.ldy = ldx;
        k.ldb = ldb;
        k.x = a.x + int64_t(c0) * ldx + int64_t(h) * P;
        if (Lc - t_lo >= 16 || do_fold) {
          // Many passes over this head's x rows follow: gather them into one contiguous block
          // (the input rows are H*P floats apart, a stride the prefetchers do not follow).
          float* xc = scr.xc.data();
          for (int s = 0; s < Lc; ++s) {
            for (int p = 0; p < P; p += kW) {
              const __mmask16 m = tail_mask(P - p);
              _mm512_mask_storeu_ps(xc + int64_t(s) * scr.ppad + p, m, _mm512_maskz_loadu_ps(m, k.x + s * ldx + p));
            }
          }
          k.x = xc;
          k.ldx = scr.ppad;
        }
        k.Bg = a.B + int64_t(c0) * ldb + int64_t(g) * N;
        k.Cg = a.C + int64_t(g) * N;
        k.yh = a.y + int64_t(h) * P;
        k.out0 = out0;
        k.cb = cb_all + size_t(g) * L * ldcb;
        k.ldcb = ldcb;
        k.Sb = Sb + int64_t(h) * pn;
        k.D = a.D[h];
        int t = t_lo;
        for (; t + Scratch::kRows <= Lc; t += Scratch::kRows) row_block<Scratch::kRows>(k, scr, t);
        for (; t < Lc; ++t) row_block<1>(k, scr, t);
        if (do_fold) fold(k, scr, dst + int64_t(h) * pn);
      }
    }
    Sb = dst;
  }
  const bool last_complete = a.n % L == 0;
  if (a.final_state && last_complete && a.chunk_states) {
    std::memcpy(a.final_state, a.chunk_states + int64_t(nchunks - 1) * hpn, sizeof(float) * hpn);
  }
}

void ssu_avx512(const SsuArgs& a) {
  const SsdShape& sh = a.shape;
  const int H = sh.nheads, P = sh.headdim, N = sh.dstate;
  const int hpg = H / sh.ngroups;
#pragma omp parallel for num_threads(kernels::num_threads()) schedule(static)
  for (int h = 0; h < H; ++h) {
    const int g = h / hpg;
    const float dth = a.dt[h];
    const __m512 decay = _mm512_set1_ps(exp_f(dth * a.A[h]));
    const float* Bg = a.B + int64_t(g) * N;
    const float* Cg = a.C + int64_t(g) * N;
    const float* xh = a.x + int64_t(h) * P;
    float* yh = a.y + int64_t(h) * P;
    float* Sh = a.state + int64_t(h) * P * N;
    // The state row is updated and immediately read back for its dot, while still in L1.
    auto update_row = [&](int p) {
      const __m512 u = _mm512_set1_ps(dth * xh[p]);
      float* Sp = Sh + int64_t(p) * N;
      for (int k = 0; k < N; k += kW) {
        const __mmask16 m = tail_mask(N - k);
        const __m512 s = _mm512_fmadd_ps(u, _mm512_maskz_loadu_ps(m, Bg + k), _mm512_mul_ps(decay, _mm512_maskz_loadu_ps(m, Sp + k)));
        _mm512_mask_storeu_ps(Sp + k, m, s);
      }
    };
    int p = 0;
    for (; p + 16 <= P; p += 16) {
      const float* rows[16];
      #pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        update_row(p + i);
        rows[i] = Sh + int64_t(p + i) * N;
      }
      float dots[16];
      dot16x16(rows, Cg, N, dots);
      #pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) yh[p + i] = std::fma(a.D[h], xh[p + i], dots[i]);
    }
    for (; p < P; ++p) {
      update_row(p);
      yh[p] = std::fma(a.D[h], xh[p], dot16_one(Sh + int64_t(p) * N, Cg, N));
    }
  }
}

}  // namespace parity::kernels::ssd_detail
