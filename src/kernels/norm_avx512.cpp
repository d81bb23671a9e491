// AVX-512 row operations for the norms, and the array forms of the vector transcendentals.
// The reduction order is the one defined in norm.cpp; one zmm register holds the 16 lane partials.

// GCC 12 false positives on its own AVX-512 intrinsics: see gemm_avx512.cpp.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/rowops_internal.h"
#include "kernels/vmath_avx512.h"

namespace parity::kernels::detail {

namespace {

inline __mmask16 tail_mask(int rem) { return static_cast<__mmask16>((1u << rem) - 1u); }

// A scalar FMA that cannot turn into an out-of-line std::fma copy compiled for AVX-512.
inline float fma1(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

float sumsq(const float* x, int n) {
  __m512 acc = _mm512_setzero_ps();
  const int nb = n / 16;
  for (int b = 0; b < nb; ++b) {
    const __m512 v = _mm512_loadu_ps(x + 16 * b);
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  // Tree: lanes j + j+8, then j + j+4, then j + j+2, then 0 + 1.
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  float s = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  for (int t = nb * 16; t < n; ++t) s = fma1(x[t], x[t], s);
  return s;
}

void scale(const float* x, float r, const float* w, int n, float* out) {
  const __m512 rv = _mm512_set1_ps(r);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), rv), _mm512_loadu_ps(w + i)));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), rv), _mm512_maskz_loadu_ps(m, w + i));
    _mm512_mask_storeu_ps(out + i, m, v);
  }
}

void gate_mul(const float* y, const float* z, int n, float* out) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), v512::silu(_mm512_loadu_ps(z + i))));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), v512::silu(_mm512_maskz_loadu_ps(m, z + i)));
    _mm512_mask_storeu_ps(out + i, m, v);
  }
}

void scale_gate(const float* y, float r, const float* w, const float* z, int n, float* out) {
  const __m512 rv = _mm512_set1_ps(r);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(y + i), rv), _mm512_loadu_ps(w + i));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(v, v512::silu(_mm512_loadu_ps(z + i))));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), rv), _mm512_maskz_loadu_ps(m, w + i));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(v, v512::silu(_mm512_maskz_loadu_ps(m, z + i))));
  }
}

// The clamp as std::min(std::max(v, lo), hi): max(v, lo) is lo only where v < lo, min(., hi) is hi
// only where hi < v, so a NaN passes through.
inline __m512 clamp_like_std(__m512 v, __m512 lo, __m512 hi) {
  v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), v, lo);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(hi, v, _CMP_LT_OQ), v, hi);
}

void dt_row(const float* raw, const float* bias, int n, float lo, float hi, float* out) {
  const __m512 lv = _mm512_set1_ps(lo), hv = _mm512_set1_ps(hi);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : tail_mask(n - i);
    const __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, raw + i), _mm512_maskz_loadu_ps(m, bias + i));
    _mm512_mask_storeu_ps(out + i, m, clamp_like_std(v512::softplus(v), lv, hv));
  }
}

template <bool kSilu>
void map_array(const float* x, int n, float* y) {
  auto f = [](__m512 v) { return kSilu ? v512::silu(v) : v512::exp(v); };
  int i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace

extern const RowOps kRowOpsAvx512 = {sumsq,  scale,            gate_mul,       scale_gate, conv_row_avx512,
                                     dt_row, map_array<false>, map_array<true>};

}  // namespace parity::kernels::detail
