#pragma once
// Lane-by-lane twins of math.h's exp_f, log_f, log1p_f, softplus_f and silu_f for 16 fp32 lanes. Include only from files
// compiled with AVX-512 flags (*_avx512.cpp). Every step mirrors the scalar sequence: the same
// constants, the same roundings, the same FMAs; out-of-range and NaN lanes are computed on
// garbage and then replaced, exactly as the scalar early returns do.
//
// Kept static inline (internal linkage) on purpose: an out-of-line copy with external linkage
// could be picked by the linker for a baseline translation unit and crash a CPU without AVX-512.
#include <immintrin.h>

#include "kernels/math.h"

namespace parity::kernels::v512 {

static inline __m512 exp(__m512 x) {
  using namespace mathc;
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);  // std::nearbyint
  // fma(-n, c, x): negating n is exact, so fnmadd (one rounding of x - n·c) is the same operation.
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kE7);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kE6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kE5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kE4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kE3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kE2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  // exp2i_scale: n1 = n / 2 truncated toward zero (C++ integer division), n2 = n - n1.
  const __m512i ni = _mm512_cvtps_epi32(n);  // n is integral: exact
  const __m512i n1 = _mm512_srai_epi32(_mm512_sub_epi32(ni, _mm512_srai_epi32(ni, 31)), 1);
  const __m512i n2 = _mm512_sub_epi32(ni, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  // The scalar early returns, in the same precedence: NaN, then > max, then < min.
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpMin), _CMP_LT_OQ), y, _mm512_setzero_ps());
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpMax), _CMP_GT_OQ), y,
                           _mm512_set1_ps(INFINITY));
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
  return y;
}

// log_f: subnormal inputs scaled by 2^23 first, the mantissa folded into [sqrt(1/2), sqrt(2)), the
// atanh series, then e·ln2 in two parts; every lane the scalar sequence (finite v > 0).
static inline __m512 log(__m512 v) {
  using namespace mathc;
  const __m512i expo_mask = _mm512_set1_epi32(0x7f800000);
  const __mmask16 sub = _mm512_testn_epi32_mask(_mm512_castps_si512(v), expo_mask);
  v = _mm512_mask_mul_ps(v, sub, v, _mm512_set1_ps(8388608.0f));
  const __m512i u = _mm512_castps_si512(v);
  __m512i e = _mm512_sub_epi32(_mm512_and_si512(_mm512_srli_epi32(u, 23), _mm512_set1_epi32(0xff)),
                               _mm512_set1_epi32(127));
  e = _mm512_mask_sub_epi32(e, sub, e, _mm512_set1_epi32(23));
  __m512 m = _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32(0x007fffff)), _mm512_set1_epi32(0x3f800000)));
  const __mmask16 fold = _mm512_cmp_ps_mask(m, _mm512_set1_ps(2.0f * kSqrtHalf), _CMP_GE_OQ);
  m = _mm512_mask_mul_ps(m, fold, m, _mm512_set1_ps(0.5f));
  e = _mm512_mask_add_epi32(e, fold, e, _mm512_set1_epi32(1));
  const __m512 f = _mm512_sub_ps(m, _mm512_set1_ps(1.0f));
  const __m512 sv = _mm512_div_ps(f, _mm512_add_ps(_mm512_set1_ps(2.0f), f));
  const __m512 s2 = _mm512_mul_ps(sv, sv);
  __m512 q = _mm512_set1_ps(kL9);
  q = _mm512_fmadd_ps(q, s2, _mm512_set1_ps(kL7));
  q = _mm512_fmadd_ps(q, s2, _mm512_set1_ps(kL5));
  q = _mm512_fmadd_ps(q, s2, _mm512_set1_ps(kL3));
  q = _mm512_mul_ps(q, s2);
  const __m512 two_s = _mm512_mul_ps(_mm512_set1_ps(2.0f), sv);
  const __m512 logm = _mm512_fmadd_ps(two_s, q, two_s);
  const __m512 fe = _mm512_cvtepi32_ps(e);
  return _mm512_fmadd_ps(fe, _mm512_set1_ps(kLn2Hi), _mm512_fmadd_ps(fe, _mm512_set1_ps(kLn2Lo), logm));
}

// log1p_f (y >= 0): y itself where 1 + y rounds to 1.
static inline __m512 log1p(__m512 y) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 u = _mm512_add_ps(one, y);
  const __m512 r = _mm512_sub_ps(log(u), _mm512_div_ps(_mm512_sub_ps(_mm512_sub_ps(u, one), y), u));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(u, one, _CMP_EQ_OQ), r, y);
}

// softplus_f: x itself above 20 (a NaN takes the log1p branch, as the scalar comparison does).
static inline __m512 softplus(__m512 x) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(20.0f), _CMP_GT_OQ), log1p(exp(x)), x);
}

// silu_f: x / (1 + exp_f(-x)).
static inline __m512 silu(__m512 x) {
  const __m512 neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp(neg)));
}

}  // namespace parity::kernels::v512
