// AVX2 SwiGLU row: silu through vmath_avx2.h's lane-by-lane twin of silu_f, then one multiply.
#include <immintrin.h>

#include "kernels/moe_internal.h"
#include "kernels/vmath_avx2.h"

namespace parity::kernels::moe_detail {

void swiglu_row_avx2(const float* g, const float* u, int F, float* out) {
  int i = 0;
  for (; i + 8 <= F; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_mul_ps(v256::silu(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
  }
  if (i < F) {
    // Lanes i < rem are all ones (sign bit set) for maskload/maskstore.
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(F - i), lane);
    const __m256 v = _mm256_mul_ps(v256::silu(_mm256_maskload_ps(g + i, m)), _mm256_maskload_ps(u + i, m));
    _mm256_maskstore_ps(out + i, m, v);
  }
}

}  // namespace parity::kernels::moe_detail
