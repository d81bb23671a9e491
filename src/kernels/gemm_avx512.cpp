// AVX-512 GEMM micro-kernels. Each accumulator register holds 16 output columns of one row and
// receives exactly one FMA per k, in k order: the contract's chain, lane by lane.

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its own flow analysis then
// reports as "(maybe) used uninitialized" once inlined into our code: a known false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstddef>

#include "kernels/gemm_internal.h"
#include "kernels/stream_plan.h"

namespace parity::kernels::detail {

namespace {

// Each panel is its own sequential stream (four at once at one row). Whether asking for each stream's
// line `ahead` bytes on helps depends on the machine (kernels/stream_plan.h: 2 KiB on Zen 5, none
// on Zen 4). A prefetch moves no arithmetic: the bits are the same.

template <DType DT>
struct Panel;

template <>
struct Panel<DType::F32> {
  static constexpr int kRowBytes = kNr * 4;
  static inline void load(const uint8_t* p, __m512& lo, __m512& hi) {
    lo = _mm512_loadu_ps(reinterpret_cast<const float*>(p));
    hi = _mm512_loadu_ps(reinterpret_cast<const float*>(p) + 16);
  }
};

template <>
struct Panel<DType::BF16> {
  static constexpr int kRowBytes = kNr * 2;
  // Word i holds columns i (low half) and 16+i (high half): see packed_pos.
  static inline void load(const uint8_t* p, __m512& lo, __m512& hi) {
    const __m512i v = _mm512_loadu_si512(p);
    lo = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    hi = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
};

template <>
struct Panel<DType::F16> {
  static constexpr int kRowBytes = kNr * 2;
  static inline void load(const uint8_t* p, __m512& lo, __m512& hi) {
    lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    hi = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
  }
};

inline __mmask16 lane_mask(int valid) {
  if (valid >= 16) return 0xffff;
  if (valid <= 0) return 0;
  return static_cast<__mmask16>((1u << valid) - 1u);
}

// MR rows × NP panels (2·MR·NP zmm accumulators). `w` points at the first panel's k = 0 row;
// `ncols` is the number of valid columns from the first panel on (may exceed 32·NP). If `pf` is
// set, the same k-rows of the panels at `pf` are prefetched into L2 as the loop goes (the next
// panel group, so that later row blocks find it there instead of waiting on memory).
template <int MR, int NP, DType DT>
__attribute__((always_inline)) inline void micro(const float* a, int lda, const uint8_t* w, std::size_t pstride,
                                                  int K, const float* bias, float* c, int ldc, int ncols,
                                                  const uint8_t* pf, std::size_t ahead) {
  using P = Panel<DT>;
  __m512 acc[MR][NP][2];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) acc[r][q][0] = acc[r][q][1] = _mm512_setzero_ps();

  const float* ar[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) ar[r] = a + static_cast<std::size_t>(r) * lda;

  for (int k = 0; k < K; ++k) {
    __m512 wv[NP][2];
    const uint8_t* wk = w + static_cast<std::size_t>(k) * P::kRowBytes;
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) P::load(wk + q * pstride, wv[q][0], wv[q][1]);
    if (ahead) {
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) {
        const char* line = reinterpret_cast<const char*>(wk + q * pstride + ahead);
        _mm_prefetch(line, _MM_HINT_T0);
        if constexpr (P::kRowBytes > 64) _mm_prefetch(line + 64, _MM_HINT_T0);
      }
    }
    if (pf) {
      const char* f = reinterpret_cast<const char*>(pf + static_cast<std::size_t>(k) * P::kRowBytes);
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) {
        _mm_prefetch(f + q * pstride, _MM_HINT_T1);
        if constexpr (P::kRowBytes > 64) _mm_prefetch(f + q * pstride + 64, _MM_HINT_T1);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 b = _mm512_set1_ps(ar[r][k]);
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) {
        acc[r][q][0] = _mm512_fmadd_ps(b, wv[q][0], acc[r][q][0]);
        acc[r][q][1] = _mm512_fmadd_ps(b, wv[q][1], acc[r][q][1]);
      }
    }
  }

#pragma GCC unroll 8
  for (int q = 0; q < NP; ++q) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int off = q * kNr + h * 16;
      const int valid = ncols - off;
      if (valid >= 16) {
        const __m512 bv = bias ? _mm512_loadu_ps(bias + off) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const __m512 v = bias ? _mm512_add_ps(acc[r][q][h], bv) : acc[r][q][h];
          _mm512_storeu_ps(c + static_cast<std::size_t>(r) * ldc + off, v);
        }
      } else if (valid > 0) {
        const __mmask16 mk = lane_mask(valid);
        const __m512 bv = bias ? _mm512_maskz_loadu_ps(mk, bias + off) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const __m512 v = bias ? _mm512_add_ps(acc[r][q][h], bv) : acc[r][q][h];
          _mm512_mask_storeu_ps(c + static_cast<std::size_t>(r) * ldc + off, mk, v);
        }
      }
    }
  }
}

// MR rows over panels [p, p + np): the widest panel group whose accumulators and widened weights
// fit in the 32 zmm registers without spilling, then narrower ones for the rest.
template <int MR, DType DT>
inline void rows_over_panels(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc,
                             int p, int np, bool prefetch_next, std::size_t ahead) {
  const std::size_t ps = static_cast<std::size_t>(w.k) * Panel<DT>::kRowBytes;
  const uint8_t* base = w.data.data();
  auto call = [&]<int NP>(int q) {
    const int col = (p + q) * kNr;
    const uint8_t* pf = prefetch_next ? base + static_cast<std::size_t>(p + q + 4) * ps : nullptr;
    micro<MR, NP, DT>(a, lda, base + static_cast<std::size_t>(p + q) * ps, ps, w.k, bias ? bias + col : nullptr,
                      c + col, ldc, w.n - col, pf, ahead);
  };
  int q = 0;
  if constexpr (MR <= 2) {  // 3 rows × 4 panels would need 8 weight registers on top of 24 accumulators
    for (; q + 4 <= np; q += 4) call.template operator()<4>(q);
  }
  for (; q + 2 <= np; q += 2) call.template operator()<2>(q);
  for (; q < np; ++q) call.template operator()<1>(q);
}

template <DType DT>
void tile(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc, int m0, int m1,
          int p0, int p1) {
  // Panels in groups of 4 (4·K·128 bytes at most: 786 KB for fp32 at K = 1536, within a 1 MB L2)
  // while all rows of the tile pass over them, so the weights come from memory once per tile and
  // the row blocks after the first read them from L2.
  //
  // With several row blocks, the first block's pass also pulls the next group into L2. Measured
  // on Zen 5 at M = 8..16 this gains 10-20% for 16-bit weights; for fp32 (twice the bytes, two
  // groups crowd the L2) it lost a little, so it is limited to groups of at most 400 KB of 16-bit
  // weights. A single row block streams anyway and gains nothing from it.
  constexpr bool kNarrow = DT != DType::F32;
  const std::size_t ahead = static_cast<std::size_t>(gemm_prefetch_ahead());
  const bool prefetch = kNarrow && m1 - m0 > 5 && static_cast<std::size_t>(w.k) * 4 * Panel<DT>::kRowBytes <= 400 * 1024;
  for (int p = p0; p < p1; p += 4) {
    const int np = std::min(4, p1 - p);
    const bool next = prefetch && p + 8 <= p1;
    int i = m0;
    for (; i + 6 <= m1; i += 6) {
      rows_over_panels<6, DT>(a + static_cast<std::size_t>(i) * lda, lda, w, bias,
                              c + static_cast<std::size_t>(i) * ldc, ldc, p, np, next && i == m0, ahead);
    }
    const float* ai = a + static_cast<std::size_t>(i) * lda;
    float* ci = c + static_cast<std::size_t>(i) * ldc;
    const bool pf = next && i == m0;
    switch (m1 - i) {
      case 1: rows_over_panels<1, DT>(ai, lda, w, bias, ci, ldc, p, np, pf, ahead); break;
      case 2: rows_over_panels<2, DT>(ai, lda, w, bias, ci, ldc, p, np, pf, ahead); break;
      case 3: rows_over_panels<3, DT>(ai, lda, w, bias, ci, ldc, p, np, pf, ahead); break;
      case 4: rows_over_panels<4, DT>(ai, lda, w, bias, ci, ldc, p, np, pf, ahead); break;
      case 5: rows_over_panels<5, DT>(ai, lda, w, bias, ci, ldc, p, np, pf, ahead); break;
      default: break;
    }
  }
}

}  // namespace

void gemm_tile_avx512(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc, int m0,
                      int m1, int p0, int p1) {
  if (m1 - m0 >= kWideRows) {
    gemm_tile_wide_avx512(a, lda, w, bias, c, ldc, m0, m1, p0, p1);
    return;
  }
  switch (w.dtype) {
    case DType::F32: tile<DType::F32>(a, lda, w, bias, c, ldc, m0, m1, p0, p1); break;
    case DType::BF16: tile<DType::BF16>(a, lda, w, bias, c, ldc, m0, m1, p0, p1); break;
    case DType::F16: tile<DType::F16>(a, lda, w, bias, c, ldc, m0, m1, p0, p1); break;
    default: break;
  }
}

}  // namespace parity::kernels::detail
