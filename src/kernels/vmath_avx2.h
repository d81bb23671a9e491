#pragma once
// Lane-by-lane twins of math.h's exp_f and silu_f for 8 fp32 lanes (AVX2 + FMA). Include only
// from *_avx2.cpp. Same operation sequence as the scalar code and as vmath_avx512.h; see there
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

static inline __m256 silu(__m256 x) {
  const __m256 neg = _mm256_xor_ps(x, _mm256_set1_ps(-0.0f));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp(neg)));
}

}  // namespace parity::kernels::v256
