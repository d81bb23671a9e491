// AVX-512 SSU step: plain mode's one-token decode (DESIGN.md rule 8), the state updated in place,
// fp32 or bf16. Every output element goes through the scalar sequence of ssd_internal.h's reference
// step; vectors run many of them side by side (across d_state), so the bits equal the scalar
// twin's. Compiled with AVX-512 flags (and AVX512-BF16's, used behind kernels::avx512_bf16_active()):
// call only after active_isa() says so.
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its flow analysis reports
// once inlined (same false positive as in gemm_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cstdint>

#include "kernels/ssd_avx512_lanes.h"
#include "kernels/ssd_internal.h"

namespace parity::kernels::ssd_detail {

void ssu_head_avx512(int P, int N, const float* x, float dt, float A, float D, const float* B, const float* C,
                     float* S, float* y) {
  const __m512 decay = _mm512_set1_ps(exp_one(dt * A));
  // The state row is updated and immediately read back for its dot, while still in L1.
  // At N = kCachedDotN, B stays in registers for every row: one load per FMA (on the Zen 4 a
  // 512-bit load takes both load ports).
  __m512 bv[kCachedDotN / kW] = {};
  const bool cached = N == kCachedDotN;
  if (cached)
    #pragma GCC unroll 16
    for (int v = 0; v < kCachedDotN / kW; ++v) bv[v] = _mm512_loadu_ps(B + kW * v);
  auto update_row = [&](int p) {
    const __m512 u = _mm512_set1_ps(dt * x[p]);
    float* Sp = S + int64_t(p) * N;
    prefetch_span(Sp, int64_t(N) * int64_t(sizeof(float)));
    if (cached) {
      #pragma GCC unroll 16
      for (int v = 0; v < kCachedDotN / kW; ++v)
        _mm512_storeu_ps(Sp + kW * v, _mm512_fmadd_ps(u, bv[v], _mm512_mul_ps(decay, _mm512_loadu_ps(Sp + kW * v))));
      return;
    }
    for (int k = 0; k < N; k += kW) {
      const __mmask16 m = tail_mask(N - k);
      const __m512 s = _mm512_fmadd_ps(u, _mm512_maskz_loadu_ps(m, B + k), _mm512_mul_ps(decay, _mm512_maskz_loadu_ps(m, Sp + k)));
      _mm512_mask_storeu_ps(Sp + k, m, s);
    }
  };
  int p = 0;
  for (; p + 16 <= P; p += 16) {
    const float* rows[16];
    for (int i = 0; i < 16; ++i) {
      update_row(p + i);
      rows[i] = S + int64_t(p + i) * N;
    }
    alignas(64) float dots[16];
    dot16x16(rows, C, N, dots);
    for (int i = 0; i < 16; ++i) y[p + i] = fma_one(D, x[p + i], dots[i]);
  }
  for (; p < P; ++p) {
    update_row(p);
    y[p] = fma_one(D, x[p], dot16_one(S + int64_t(p) * N, C, N));
  }
}

namespace {

// Columns k .. k+16*NV-1 of one bf16 state row (rem of them present when kTail): widened, updated
// (s = fma(u, B, decay * S)), the unrounded s accumulated into the row's dot16 lanes (acc, lane j
// takes n = j, j+16, ... in increasing n), then rounded and stored. A NaN in s makes its acc lane
// NaN, so the per-lane NaN handling runs only when acc shows one. kHw: rounded by narrow32's
// vcvtne2ps2bf16 (the same bits; at batch 1 the state sits in L3 and the integer rounding's ~8
// operations per 16 values were what bound the step).
template <bool kHw, int NV, bool kTail>
inline void ssu_bf16_cols(uint16_t* Sp, const float* B, const float* C, __m512 u, __m512 decay, int rem,
                          __m512& acc) {
  __mmask16 m[NV];
  __m512 sv[NV];
  #pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) {
    m[v] = kTail ? lane_mask(rem - kW * v) : static_cast<__mmask16>(0xFFFF);
    const __m512 old = widen_bf16(kTail ? _mm256_maskz_loadu_epi16(m[v], Sp + kW * v)
                                        : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(Sp + kW * v)));
    const __m512 bv = kTail ? _mm512_maskz_loadu_ps(m[v], B + kW * v) : _mm512_loadu_ps(B + kW * v);
    sv[v] = _mm512_fmadd_ps(u, bv, _mm512_mul_ps(decay, old));
    if (kTail)
      acc = _mm512_mask3_fmadd_ps(sv[v], _mm512_maskz_loadu_ps(m[v], C + kW * v), acc, m[v]);
    else
      acc = _mm512_fmadd_ps(sv[v], _mm512_loadu_ps(C + kW * v), acc);
  }
  if constexpr (kHw && !kTail && NV % 2 == 0) {
    // A whole block: one subnormal test for all NV vectors (narrow32 tests by pairs; a pair without
    // a subnormal gets the same bits either way), so the common case is NV/2 conversions and stores.
    constexpr int kSubnormal = 0x20;  // vfpclassps category
    __mmask16 sub = 0;
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) sub |= _mm512_fpclass_ps_mask(sv[v], kSubnormal);
    if (__builtin_expect(sub == 0, 1)) {
      #pragma GCC unroll 16
      for (int v = 0; v < NV; v += 2)
        _mm512_storeu_si512(Sp + kW * v, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(sv[v + 1], sv[v])));
      return;
    }
  }
  const bool nan = !kHw && _mm512_cmp_ps_mask(acc, acc, _CMP_UNORD_Q) != 0;
  #pragma GCC unroll 16
  for (int v = 0; v < NV; v += 2) {
    const int v1 = v + 1 < NV ? v + 1 : v;
    __m512i packed;
    if constexpr (kHw) {
      packed = narrow32<true>(sv[v], sv[v1]);
    } else {
      const __m512i t0 = nan ? round_hi_bf16_nan(sv[v]) : round_hi_bf16(sv[v]);
      const __m512i t1 = nan ? round_hi_bf16_nan(sv[v1]) : round_hi_bf16(sv[v1]);
      packed = pack_hi16(t0, t1);
    }
    if (kTail || v1 == v) {
      const __mmask32 sm = static_cast<__mmask32>(m[v]) | (v1 != v ? static_cast<__mmask32>(m[v1]) << 16 : 0u);
      _mm512_mask_storeu_epi16(Sp + kW * v, sm, packed);
    } else {
      _mm512_storeu_si512(Sp + kW * v, packed);
    }
  }
}

// One row of ssu_head_bf16_avx512; returns its dot16 lanes against C.
template <bool kHw>
inline __m512 ssu_bf16_row(uint16_t* Sp, int N, const float* B, const float* C, __m512 u, __m512 decay) {
  __m512 acc = _mm512_setzero_ps();
  int k = 0;
  for (; k + 8 * kW <= N; k += 8 * kW) {
    prefetch_span(Sp + k, 8 * kW * int64_t(sizeof(uint16_t)));
    ssu_bf16_cols<kHw, 8, false>(Sp + k, B + k, C + k, u, decay, 8 * kW, acc);
  }
  if (k < N) prefetch_span(Sp + k, (N - k) * int64_t(sizeof(uint16_t)));
  const int rem = N - k;
  switch ((rem + kW - 1) / kW) {
    case 0: break;
    case 1: ssu_bf16_cols<kHw, 1, true>(Sp + k, B + k, C + k, u, decay, rem, acc); break;
    case 2: ssu_bf16_cols<kHw, 2, true>(Sp + k, B + k, C + k, u, decay, rem, acc); break;
    case 3: ssu_bf16_cols<kHw, 3, true>(Sp + k, B + k, C + k, u, decay, rem, acc); break;
    case 4: ssu_bf16_cols<kHw, 4, true>(Sp + k, B + k, C + k, u, decay, rem, acc); break;
    case 5: ssu_bf16_cols<kHw, 5, true>(Sp + k, B + k, C + k, u, decay, rem, acc); break;
    case 6: ssu_bf16_cols<kHw, 6, true>(Sp + k, B + k, C + k, u, decay, rem, acc); break;
    case 7: ssu_bf16_cols<kHw, 7, true>(Sp + k, B + k, C + k, u, decay, rem, acc); break;
    default: ssu_bf16_cols<kHw, 8, true>(Sp + k, B + k, C + k, u, decay, rem, acc); break;
  }
  return acc;
}

// Two adjacent rows of ssu_head_bf16_avx512 side by side (N a multiple of 128): each row's values
// and its dot lanes follow ssu_bf16_row's sequence; the two dot chains overlap instead of one row
// waiting on its own FMA latency.
template <bool kHw>
inline void ssu_bf16_row2(uint16_t* Sp, int N, const float* B, const float* C, __m512 u0, __m512 u1,
                          __m512 decay, __m512& acc0, __m512& acc1) {
  acc0 = _mm512_setzero_ps();
  acc1 = _mm512_setzero_ps();
  uint16_t* Sq = Sp + N;
  for (int k = 0; k < N; k += 8 * kW) {
    prefetch_span(Sp + k, 8 * kW * int64_t(sizeof(uint16_t)));
    prefetch_span(Sq + k, 8 * kW * int64_t(sizeof(uint16_t)));
    ssu_bf16_cols<kHw, 8, false>(Sp + k, B + k, C + k, u0, decay, 8 * kW, acc0);
    ssu_bf16_cols<kHw, 8, false>(Sq + k, B + k, C + k, u1, decay, 8 * kW, acc1);
  }
}

template <bool kHw>
void ssu_head_bf16(int P, int N, const float* x, float dt, float A, float D, const float* B, const float* C,
                   uint16_t* S, float* y) {
  const __m512 decay = _mm512_set1_ps(exp_one(dt * A));
  // Each state row is widened, updated and stored rounded in one pass; its dot reads the
  // unrounded update from registers (as when the update runs on an fp32 copy).
  int p = 0;
  for (; p + 16 <= P; p += 16) {
    __m512 acc[16];
    if (N % (8 * kW) == 0) {
      #pragma GCC unroll 1
      for (int i = 0; i < 16; i += 2)
        ssu_bf16_row2<kHw>(S + int64_t(p + i) * N, N, B, C, _mm512_set1_ps(dt * x[p + i]),
                           _mm512_set1_ps(dt * x[p + i + 1]), decay, acc[i], acc[i + 1]);
    } else {
      #pragma GCC unroll 1
      for (int i = 0; i < 16; ++i)
        acc[i] = ssu_bf16_row<kHw>(S + int64_t(p + i) * N, N, B, C, _mm512_set1_ps(dt * x[p + i]), decay);
    }
    const __m512 xv = _mm512_loadu_ps(x + p);
    _mm512_storeu_ps(y + p, _mm512_fmadd_ps(_mm512_set1_ps(D), xv, reduce16x16(acc)));
  }
  for (; p < P; ++p)
    y[p] = fma_one(D, x[p], reduce16(ssu_bf16_row<kHw>(S + int64_t(p) * N, N, B, C, _mm512_set1_ps(dt * x[p]), decay)));
}

}  // namespace

void ssu_head_bf16_avx512(int P, int N, const float* x, float dt, float A, float D, const float* B, const float* C,
                          uint16_t* S, float* y, bool hw) {
  if (hw)
    ssu_head_bf16<true>(P, N, x, dt, A, D, B, C, S, y);
  else
    ssu_head_bf16<false>(P, N, x, dt, A, D, B, C, S, y);
}

}  // namespace parity::kernels::ssd_detail
