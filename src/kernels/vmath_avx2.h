#pragma once
// Lane-by-lane twins of math.h's exp_f, log_f, log1p_f, softplus_f and silu_f for 8 fp32 lanes
// (AVX2 + FMA). Include only from *_avx2.cpp. Same operation sequence as the scalar code and as vmath_avx512.h; see there
// for why these are static inline.
#include <immintrin.h>

#include "kernels/math.h"

namespace parity::kernels::v256 {

static inline __m256 exp(__m256 x) {
  using namespace mathc;
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);  // std::nearbyint
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kE7);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kE6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kE5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kE4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kE3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kE2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(_mm256_sub_epi32(ni, _mm256_srai_epi32(ni, 31)), 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(kExpMin), _CMP_LT_OQ));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(kExpMax), _CMP_GT_OQ));
  y = _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return y;
}

// log_f, log1p_f and softplus_f lane by lane: see vmath_avx512.h.
static inline __m256 log(__m256 v) {
  using namespace mathc;
  const __m256i expo_mask = _mm256_set1_epi32(0x7f800000);
  const __m256 sub = _mm256_castsi256_ps(
      _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), expo_mask), _mm256_setzero_si256()));
  v = _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(8388608.0f)), sub);
  const __m256i u = _mm256_castps_si256(v);
  __m256i e = _mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(u, 23), _mm256_set1_epi32(0xff)),
                               _mm256_set1_epi32(127));
  e = _mm256_sub_epi32(e, _mm256_and_si256(_mm256_castps_si256(sub), _mm256_set1_epi32(23)));
  __m256 m = _mm256_castsi256_ps(
      _mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f800000)));
  const __m256 fold = _mm256_cmp_ps(m, _mm256_set1_ps(2.0f * kSqrtHalf), _CMP_GE_OQ);
  m = _mm256_blendv_ps(m, _mm256_mul_ps(m, _mm256_set1_ps(0.5f)), fold);
  e = _mm256_add_epi32(e, _mm256_and_si256(_mm256_castps_si256(fold), _mm256_set1_epi32(1)));
  const __m256 f = _mm256_sub_ps(m, _mm256_set1_ps(1.0f));
  const __m256 sv = _mm256_div_ps(f, _mm256_add_ps(_mm256_set1_ps(2.0f), f));
  const __m256 s2 = _mm256_mul_ps(sv, sv);
  __m256 q = _mm256_set1_ps(kL9);
  q = _mm256_fmadd_ps(q, s2, _mm256_set1_ps(kL7));
  q = _mm256_fmadd_ps(q, s2, _mm256_set1_ps(kL5));
  q = _mm256_fmadd_ps(q, s2, _mm256_set1_ps(kL3));
  q = _mm256_mul_ps(q, s2);
  const __m256 two_s = _mm256_mul_ps(_mm256_set1_ps(2.0f), sv);
  const __m256 logm = _mm256_fmadd_ps(two_s, q, two_s);
  const __m256 fe = _mm256_cvtepi32_ps(e);
  return _mm256_fmadd_ps(fe, _mm256_set1_ps(kLn2Hi), _mm256_fmadd_ps(fe, _mm256_set1_ps(kLn2Lo), logm));
}

static inline __m256 log1p(__m256 y) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 u = _mm256_add_ps(one, y);
  const __m256 r = _mm256_sub_ps(log(u), _mm256_div_ps(_mm256_sub_ps(_mm256_sub_ps(u, one), y), u));
  return _mm256_blendv_ps(r, y, _mm256_cmp_ps(u, one, _CMP_EQ_OQ));
}

static inline __m256 softplus(__m256 x) {
  return _mm256_blendv_ps(log1p(exp(x)), x, _mm256_cmp_ps(x, _mm256_set1_ps(20.0f), _CMP_GT_OQ));
}

static inline __m256 silu(__m256 x) {
  const __m256 neg = _mm256_xor_ps(x, _mm256_set1_ps(-0.0f));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp(neg)));
}

}  // namespace parity::kernels::v256
