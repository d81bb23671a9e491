// AVX2 conv1d row: 8 channels per vector, taps in order, one FMA each (see conv1d.h).
#include <immintrin.h>

#include <cstddef>

#include "kernels/rowops_internal.h"
#include "kernels/vmath_avx2.h"

namespace parity::kernels::detail {

void conv_row_avx2(const float* const* win, int k, int ch, const float* wt, const float* bias, bool silu,
                   float* out) {
  int c = 0;
  for (; c + 8 <= ch; c += 8) {
    __m256 acc = bias ? _mm256_loadu_ps(bias + c) : _mm256_setzero_ps();
    for (int j = 0; j < k; ++j) {
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(wt + static_cast<std::size_t>(j) * ch + c), _mm256_loadu_ps(win[j] + c),
                            acc);
    }
    if (silu) acc = v256::silu(acc);
    _mm256_storeu_ps(out + c, acc);
  }
  if (c < ch) {  // the same lane arithmetic on the last ch % 8 channels (masked-off lanes read 0)
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(ch - c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 acc = bias ? _mm256_maskload_ps(bias + c, m) : _mm256_setzero_ps();
    for (int j = 0; j < k; ++j) {
      acc = _mm256_fmadd_ps(_mm256_maskload_ps(wt + static_cast<std::size_t>(j) * ch + c, m),
                            _mm256_maskload_ps(win[j] + c, m), acc);
    }
    if (silu) acc = v256::silu(acc);
    _mm256_maskstore_ps(out + c, m, acc);
  }
}

}  // namespace parity::kernels::detail
