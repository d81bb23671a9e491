// AVX2 row operations for the norms, and the array forms of the vector transcendentals. The 16
// lane partials of the sum of squares live in two ymm registers (lanes 0-7 and 8-15), so the
// order is the one defined in norm.cpp, as in the AVX-512 and portable code.
#include <immintrin.h>

#include "kernels/rowops_internal.h"
#include "kernels/vmath_avx2.h"

namespace parity::kernels::detail {

namespace {

inline __m256i tail_mask(int rem) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// A scalar FMA that cannot turn into an out-of-line std::fma copy compiled for AVX2.
inline float fma1(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

float sumsq(const float* x, int n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  const int nb = n / 16;
  for (int b = 0; b < nb; ++b) {
    const __m256 a = _mm256_loadu_ps(x + 16 * b), c = _mm256_loadu_ps(x + 16 * b + 8);
    lo = _mm256_fmadd_ps(a, a, lo);
    hi = _mm256_fmadd_ps(c, c, hi);
  }
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  float s = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  for (int t = nb * 16; t < n; ++t) s = fma1(x[t], x[t], s);
  return s;
}

void scale(const float* x, float r, const float* w, int n, float* out) {
  const __m256 rv = _mm256_set1_ps(r);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), rv), _mm256_loadu_ps(w + i)));
  }
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i, m), rv), _mm256_maskload_ps(w + i, m));
    _mm256_maskstore_ps(out + i, m, v);
  }
}

void gate_mul(const float* y, const float* z, int n, float* out) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), v256::silu(_mm256_loadu_ps(z + i))));
  }
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    const __m256 v = _mm256_mul_ps(_mm256_maskload_ps(y + i, m), v256::silu(_mm256_maskload_ps(z + i, m)));
    _mm256_maskstore_ps(out + i, m, v);
  }
}

void scale_gate(const float* y, float r, const float* w, const float* z, int n, float* out) {
  const __m256 rv = _mm256_set1_ps(r);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(y + i), rv), _mm256_loadu_ps(w + i));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(v, v256::silu(_mm256_loadu_ps(z + i))));
  }
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(y + i, m), rv), _mm256_maskload_ps(w + i, m));
    _mm256_maskstore_ps(out + i, m, _mm256_mul_ps(v, v256::silu(_mm256_maskload_ps(z + i, m))));
  }
}

// The clamp as std::min(std::max(v, lo), hi) (see norm_avx512.cpp).
inline __m256 clamp_like_std(__m256 v, __m256 lo, __m256 hi) {
  v = _mm256_blendv_ps(v, lo, _mm256_cmp_ps(v, lo, _CMP_LT_OQ));
  return _mm256_blendv_ps(v, hi, _mm256_cmp_ps(hi, v, _CMP_LT_OQ));
}

void dt_row(const float* raw, const float* bias, int n, float lo, float hi, float* out) {
  const __m256 lv = _mm256_set1_ps(lo), hv = _mm256_set1_ps(hi);
  for (int i = 0; i < n; i += 8) {
    const __m256i m = tail_mask(n - i);
    const __m256 v = _mm256_add_ps(_mm256_maskload_ps(raw + i, m), _mm256_maskload_ps(bias + i, m));
    _mm256_maskstore_ps(out + i, m, clamp_like_std(v256::softplus(v), lv, hv));
  }
}

template <bool kSilu>
void map_array(const float* x, int n, float* y) {
  auto f = [](__m256 v) { return kSilu ? v256::silu(v) : v256::exp(v); };
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, m, f(_mm256_maskload_ps(x + i, m)));
  }
}

}  // namespace

extern const RowOps kRowOpsAvx2 = {sumsq,  scale,            gate_mul,       scale_gate, conv_row_avx2,
                                   dt_row, map_array<false>, map_array<true>};

}  // namespace parity::kernels::detail
