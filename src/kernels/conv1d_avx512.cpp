// AVX-512 conv1d row: 16 channels per vector, taps in order, one FMA each (see conv1d.h).

// GCC 12 false positives on its own AVX-512 intrinsics: see gemm_avx512.cpp.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstddef>

#include "kernels/rowops_internal.h"
#include "kernels/vmath_avx512.h"

namespace parity::kernels::detail {

void conv_row_avx512(const float* const* win, int k, int ch, const float* wt, const float* bias, bool silu,
                     float* out) {
  for (int c = 0; c < ch; c += 16) {
    const int rem = ch - c;
    const __mmask16 m = rem >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << rem) - 1u);
    __m512 acc = bias ? _mm512_maskz_loadu_ps(m, bias + c) : _mm512_setzero_ps();
    for (int j = 0; j < k; ++j) {
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, wt + static_cast<std::size_t>(j) * ch + c),
                            _mm512_maskz_loadu_ps(m, win[j] + c), acc);
    }
    if (silu) acc = v512::silu(acc);
    _mm512_mask_storeu_ps(out + c, m, acc);
  }
}

}  // namespace parity::kernels::detail
