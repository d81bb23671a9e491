// AVX-512 SwiGLU row: silu through vmath_avx512.h's lane-by-lane twin of silu_f, then one multiply.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "kernels/moe_internal.h"
#include "kernels/vmath_avx512.h"

namespace parity::kernels::moe_detail {

void swiglu_row_avx512(const float* g, const float* u, int F, float* out) {
  int i = 0;
  for (; i + 16 <= F; i += 16) {
    _mm512_storeu_ps(out + i, _mm512_mul_ps(v512::silu(_mm512_loadu_ps(g + i)), _mm512_loadu_ps(u + i)));
  }
  if (i < F) {
    const __mmask16 m = static_cast<__mmask16>((1u << (F - i)) - 1u);
    const __m512 v = _mm512_mul_ps(v512::silu(_mm512_maskz_loadu_ps(m, g + i)), _mm512_maskz_loadu_ps(m, u + i));
    _mm512_mask_storeu_ps(out + i, m, v);
  }
}

}  // namespace parity::kernels::moe_detail
