// AVX2 GEMM micro-kernels: 4 ymm accumulators per row per panel, one FMA per k each, in k
// order, so every lane runs the contract's chain exactly as the AVX-512 and portable paths do.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/gemm_internal.h"

namespace parity::kernels::detail {

namespace {

// Accumulator v of a row covers columns 8v..8v+7. A k-row is consumed in two halves h: half h
// yields columns 8h.. (accumulator h) and 16+8h.. (accumulator 2+h). Working by halves keeps
// 12 accumulators + 2 weights + 1 broadcast within the 16 ymm registers.
template <DType DT>
struct Half;

template <>
struct Half<DType::F32> {
  static constexpr int kRowBytes = kNr * 4;
  static inline void load(const uint8_t* p, int h, __m256& lo, __m256& hi) {
    const float* f = reinterpret_cast<const float*>(p);
    lo = _mm256_loadu_ps(f + 8 * h);
    hi = _mm256_loadu_ps(f + 16 + 8 * h);
  }
};

template <>
struct Half<DType::BF16> {
  static constexpr int kRowBytes = kNr * 2;
  // Words 8h..8h+7 hold columns 8h+i (low halves) and 16+8h+i (high halves): see packed_pos.
  static inline void load(const uint8_t* p, int h, __m256& lo, __m256& hi) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * h));
    lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    hi = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
};

template <>
struct Half<DType::F16> {
  static constexpr int kRowBytes = kNr * 2;
  static inline void load(const uint8_t* p, int h, __m256& lo, __m256& hi) {
    lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
    hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 + 16 * h)));
  }
};

inline __m256i lane_mask(int valid) {
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), iota);
}

template <int MR, int NP, DType DT>
__attribute__((always_inline)) inline void micro(const float* a, int lda, const uint8_t* w, std::size_t pstride,
                                                  int K, const float* bias, float* c, int ldc, int ncols) {
  using P = Half<DT>;
  __m256 acc[MR][NP][4];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q)
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[r][q][v] = _mm256_setzero_ps();

  const float* ar[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) ar[r] = a + static_cast<std::size_t>(r) * lda;

  for (int k = 0; k < K; ++k) {
    const uint8_t* wk = w + static_cast<std::size_t>(k) * P::kRowBytes;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256 lo[NP], hi[NP];
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) P::load(wk + q * pstride, h, lo[q], hi[q]);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m256 b = _mm256_broadcast_ss(ar[r] + k);
#pragma GCC unroll 8
        for (int q = 0; q < NP; ++q) {
          acc[r][q][h] = _mm256_fmadd_ps(b, lo[q], acc[r][q][h]);
          acc[r][q][2 + h] = _mm256_fmadd_ps(b, hi[q], acc[r][q][2 + h]);
        }
      }
    }
  }

#pragma GCC unroll 8
  for (int q = 0; q < NP; ++q) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const int off = q * kNr + v * 8;
      const int valid = ncols - off;
      if (valid >= 8) {
        const __m256 bv = bias ? _mm256_loadu_ps(bias + off) : _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const __m256 x = bias ? _mm256_add_ps(acc[r][q][v], bv) : acc[r][q][v];
          _mm256_storeu_ps(c + static_cast<std::size_t>(r) * ldc + off, x);
        }
      } else if (valid > 0) {
        const __m256i mk = lane_mask(valid);
        const __m256 bv = bias ? _mm256_maskload_ps(bias + off, mk) : _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const __m256 x = bias ? _mm256_add_ps(acc[r][q][v], bv) : acc[r][q][v];
          _mm256_maskstore_ps(c + static_cast<std::size_t>(r) * ldc + off, mk, x);
        }
      }
    }
  }
}

template <int MR, DType DT>
inline void rows_over_panels(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc,
                             int p, int np) {
  const std::size_t ps = static_cast<std::size_t>(w.k) * Half<DT>::kRowBytes;
  const uint8_t* base = w.data.data();
  auto call = [&]<int NP>(int q) {
    const int col = (p + q) * kNr;
    micro<MR, NP, DT>(a, lda, base + static_cast<std::size_t>(p + q) * ps, ps, w.k, bias ? bias + col : nullptr,
                      c + col, ldc, w.n - col);
  };
  int q = 0;
  if constexpr (MR == 1) {
    for (; q + 2 <= np; q += 2) call.template operator()<2>(q);
  }
  for (; q < np; ++q) call.template operator()<1>(q);
}

// Row block: 3 rows (12 accumulators) for fp32, whose weights the FMAs can take straight from
// memory; 2 rows for 16-bit weights, whose widened vectors and the bf16 mask need registers too
// (with 3 rows GCC spills an accumulator and the store/reload lands on its FMA chain).
template <DType DT>
void tile(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc, int m0, int m1,
          int p0, int p1) {
  constexpr int kMr = DT == DType::F32 ? 3 : 2;
  for (int p = p0; p < p1; p += 4) {
    const int np = std::min(4, p1 - p);
    int i = m0;
    for (; i + kMr <= m1; i += kMr) {
      rows_over_panels<kMr, DT>(a + static_cast<std::size_t>(i) * lda, lda, w, bias,
                                c + static_cast<std::size_t>(i) * ldc, ldc, p, np);
    }
    const float* ai = a + static_cast<std::size_t>(i) * lda;
    float* ci = c + static_cast<std::size_t>(i) * ldc;
    switch (m1 - i) {
      case 1: rows_over_panels<1, DT>(ai, lda, w, bias, ci, ldc, p, np); break;
      case 2: rows_over_panels<2, DT>(ai, lda, w, bias, ci, ldc, p, np); break;
      default: break;
    }
  }
}

}  // namespace

void gemm_tile_avx2(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc, int m0,
                    int m1, int p0, int p1) {
  switch (w.dtype) {
    case DType::F32: tile<DType::F32>(a, lda, w, bias, c, ldc, m0, m1, p0, p1); break;
    case DType::BF16: tile<DType::BF16>(a, lda, w, bias, c, ldc, m0, m1, p0, p1); break;
    case DType::F16: tile<DType::F16>(a, lda, w, bias, c, ldc, m0, m1, p0, p1); break;
    default: break;
  }
}

}  // namespace parity::kernels::detail
