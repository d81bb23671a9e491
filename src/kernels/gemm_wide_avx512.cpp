// AVX-512 GEMM for many rows (prefill): the same per-element FMA chains as gemm_avx512.cpp, laid
// out for arithmetic throughput rather than weight bandwidth.
//
// The narrow kernel streams each weight k-row from L2 and widens bf16 in the loop: two integer
// operations per 16 columns compete with the FMAs for the same two vector ports, and the weight
// stream costs L2 bandwidth besides. Measured at M = 256 on a 2-core Xeon (Sapphire Rapids class),
// that kernel reached 70-73 % of the FMA peak at mamba2-130m's shapes. Here, for each panel and
// each block of kKc k-rows:
//  - the weight slice is widened once to fp32 into an L1-sized buffer (exact: bits unchanged),
//  - A was packed once per call (per chunk of rows that fits L2) into blocks of kMr rows, k-major
//    (kMr floats per k), so the broadcasts read one sequential stream,
//  - a kMr-row × 32-column register tile runs over the k-rows: 24 FMAs per two L1 weight loads and
//    no widening in the loop; the next tile's A block and the next weight slice are prefetched.
// The register tile alone runs at 95 % of the peak from L1; the whole GEMM, at M = 512, moved from
// 163-169 to 176-180 GFLOP/s (median, K = 768 and 1536, one thread, A/B in one process).
// Accumulators leave for C at the end of a k block and come back at the start of the next: a
// float store and reload are exact, so every element is still ONE fma chain over k = 0..K-1 from
// 0.0f, then + bias (gemm.h's contract), identical to the narrow kernel's.

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(): see gemm_avx512.cpp.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "common/aligned.h"
#include "kernels/gemm_internal.h"

namespace parity::kernels::detail {

namespace {

constexpr int kMr = 12;   // rows per register tile: 24 accumulators + 2 weights + 1 broadcast of 32 zmm
constexpr int kKc = 256;  // k-rows per block: the 32 KB fp32 weight slice and a 12 KB A block fit L1 (48 KB)

inline __mmask16 lane_mask(int valid) {
  if (valid >= 16) return 0xffff;
  if (valid <= 0) return 0;
  return static_cast<__mmask16>((1u << valid) - 1u);
}

// Rows [m0, m1) of A as blocks of kMr rows (the last one may hold fewer), each k-major: block b
// starts at b·kMr·K and holds, for each k, its rows' A[r][k] side by side.
template <int R>
inline void pack_block(const float* a, int lda, int K, float* blk) {
  const float* src[R];
  for (int r = 0; r < R; ++r) src[r] = a + static_cast<std::size_t>(r) * lda;
  for (int k = 0; k < K; ++k) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) blk[static_cast<std::size_t>(k) * R + r] = src[r][k];
  }
}

void pack_a(const float* a, int lda, int m0, int m1, int K, float* dst) {
  int b0 = m0;
  for (; b0 + kMr <= m1; b0 += kMr)
    pack_block<kMr>(a + static_cast<std::size_t>(b0) * lda, lda, K, dst + static_cast<std::size_t>(b0 - m0) * K);
  const int rows = m1 - b0;
  float* blk = dst + static_cast<std::size_t>(b0 - m0) * K;
  for (int k = 0; k < K; ++k)
    for (int r = 0; r < rows; ++r) blk[static_cast<std::size_t>(k) * rows + r] = a[static_cast<std::size_t>(b0 + r) * lda + k];
}

// k-rows [k0, k0 + kc) of one packed panel, widened to fp32 in column order (32 floats per k).
template <DType DT>
void widen_slice(const uint8_t* panel, int k0, int kc, float* dst) {
  for (int k = 0; k < kc; ++k) {
    __m512 lo, hi;
    if constexpr (DT == DType::BF16) {  // word i holds columns i and 16+i (packed_pos)
      const __m512i v = _mm512_loadu_si512(panel + static_cast<std::size_t>(k0 + k) * 64);
      lo = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      hi = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
    } else {
      const uint8_t* p = panel + static_cast<std::size_t>(k0 + k) * 64;
      lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      hi = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
    }
    _mm512_store_ps(dst + k * 32, lo);
    _mm512_store_ps(dst + k * 32 + 16, hi);
  }
}

// MR rows × 32 columns over kc k-rows. `ap`: the packed A block at its first k-row (MR floats per
// k); `w`: the fp32 slice (32 floats per k). `first`: the chain starts here from 0.0f, otherwise it
// continues from C; `bias` (only on the last block) is added after the chain.
// `ap_next` / `c_next`: the next tile's A block and C rows, prefetched meanwhile (A from L2 or L3
// at the pace this tile consumes its own; C, 12 rows of 128 bytes, at the start).
template <int MR>
__attribute__((always_inline)) inline void micro(const float* ap, const float* w, int kc, float* c, int ldc,
                                                  int ncols, bool first, const float* bias, const float* ap_next,
                                                  const float* c_next, const uint8_t* w_next, int w_step) {
  const __mmask16 m0 = lane_mask(ncols), m1 = lane_mask(ncols - 16);
#pragma GCC unroll 16
  for (int r = 0; r < kMr; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c_next + static_cast<std::size_t>(r) * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c_next + static_cast<std::size_t>(r) * ldc + 16), _MM_HINT_T0);
  }
  __m512 acc[MR][2];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (first) {
      acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    } else {
      acc[r][0] = _mm512_maskz_loadu_ps(m0, c + static_cast<std::size_t>(r) * ldc);
      acc[r][1] = _mm512_maskz_loadu_ps(m1, c + static_cast<std::size_t>(r) * ldc + 16);
    }
  }
  for (int k = 0; k < kc; ++k) {
    const __m512 w0 = _mm512_load_ps(w + k * 32), w1 = _mm512_load_ps(w + k * 32 + 16);
    const float* ak = ap + k * MR;
    _mm_prefetch(reinterpret_cast<const char*>(ap_next + k * MR), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w_next + k * w_step), _MM_HINT_T1);
    if (w_step > 64) _mm_prefetch(reinterpret_cast<const char*>(w_next + k * w_step + 64), _MM_HINT_T1);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 b = _mm512_set1_ps(ak[r]);
      acc[r][0] = _mm512_fmadd_ps(b, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(b, w1, acc[r][1]);
    }
  }
  __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
  if (bias) {
    b0 = _mm512_maskz_loadu_ps(m0, bias);
    b1 = _mm512_maskz_loadu_ps(m1, bias + 16);
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    float* cr = c + static_cast<std::size_t>(r) * ldc;
    _mm512_mask_storeu_ps(cr, m0, bias ? _mm512_add_ps(acc[r][0], b0) : acc[r][0]);
    _mm512_mask_storeu_ps(cr + 16, m1, bias ? _mm512_add_ps(acc[r][1], b1) : acc[r][1]);
  }
}

template <int... R>
void micro_rows(int rows, const float* ap, const float* w, int kc, float* c, int ldc, int ncols, bool first,
                const float* bias, const float* ap_next, const float* c_next, const uint8_t* w_next,
                int w_step, std::integer_sequence<int, R...>) {
  ((rows == R + 1 ? micro<R + 1>(ap, w, kc, c, ldc, ncols, first, bias, ap_next, c_next, w_next, w_step) : void()), ...);
}

// Panels [p0, p1) over rows [m0, m1) whose A is already packed in `apack` (pack_a of those rows).
template <DType DT>
void panels_of_chunk(const float* apack, const PackedWeight& w, const float* bias, float* c, int ldc, int m0,
                     int m1, int p0, int p1) {
  const int K = w.k, M = m1 - m0;
  constexpr std::size_t kElem = DT == DType::F32 ? 4 : 2;
  thread_local AlignedBuffer<float> wbuf;
  if (DT != DType::F32 && wbuf.size() < static_cast<std::size_t>(kKc) * kNr) wbuf.resize(static_cast<std::size_t>(kKc) * kNr);

  for (int p = p0; p < p1; ++p) {
    const uint8_t* panel = w.data.data() + static_cast<std::size_t>(p) * K * kNr * kElem;
    const int col = p * kNr, ncols = std::min(kNr, w.n - col);
    for (int k0 = 0; k0 < K; k0 += kKc) {
      const int kc = std::min(kKc, K - k0);
      const float* ws;
      if constexpr (DT == DType::F32) {
        ws = reinterpret_cast<const float*>(panel) + static_cast<std::size_t>(k0) * kNr;
      } else {
        widen_slice<DT>(panel, k0, kc, wbuf.data());
        ws = wbuf.data();
      }
      const bool first = k0 == 0;
      // The weights' next kKc k-rows in memory (this panel's next k block or the next panel's first):
      // every micro call of this block touches one line of them per k, so they wait in L2.
      const uint8_t* wn = panel + (static_cast<std::size_t>(k0) + kc) * kNr * kElem;
      const float* bk = (k0 + kc == K && bias) ? bias + col : nullptr;
      for (int b0 = m0; b0 < m1; b0 += kMr) {
        const int rows = std::min(kMr, m1 - b0);
        const float* ap = apack + static_cast<std::size_t>(b0 - m0) * K + static_cast<std::size_t>(k0) * rows;
        float* cb = c + static_cast<std::size_t>(b0) * ldc + col;
        // The next row block, or this panel's first block for the next k block (its C rows are
        // already cached; its A block is the one to fetch).
        const bool last = b0 + kMr >= m1;
        const int nrows = last ? std::min(kMr, M) : std::min(kMr, m1 - b0 - kMr);
        const int nk0 = last ? std::min(k0 + kc, K - 1) : k0;
        const float* an = apack + (last ? 0 : static_cast<std::size_t>(b0 + kMr - m0) * K) +
                          static_cast<std::size_t>(nk0) * nrows;
        const float* cn = last ? cb : cb + static_cast<std::size_t>(kMr) * ldc;
        if (rows == kMr) {
          micro<kMr>(ap, ws, kc, cb, ldc, ncols, first, bk, an, cn, wn, kNr * kElem);
        } else {
          micro_rows(rows, ap, ws, kc, cb, ldc, ncols, first, bk, an, cn, wn, kNr * kElem, std::make_integer_sequence<int, kMr - 1>{});
        }
      }
    }
  }
}

// This thread's packed A (the rows of one chunk), grown as needed.
float* apack_buffer(std::size_t floats) {
  thread_local AlignedBuffer<float> apack;
  if (apack.size() < floats) apack.resize(floats);
  return apack.data();
}

// Rows in chunks whose packed A stays in L2 (about 768 KB of it): every panel re-reads the whole
// chunk, which from L3 cost more than re-widening the weights once per chunk.
int chunk_rows(int m, int k) {
  constexpr std::size_t kChunkBytes = 768 * 1024;
  const int max_rows = std::max(kMr, static_cast<int>(kChunkBytes / (static_cast<std::size_t>(std::max(k, 1)) * 4)));
  const int chunks = (m + max_rows - 1) / max_rows;
  const int rows = (m + chunks - 1) / chunks;
  return (rows + kMr - 1) / kMr * kMr;
}

template <DType DT>
void tile(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc, int m0, int m1,
          int p0, int p1) {
  const int rows = chunk_rows(m1 - m0, w.k);
  for (int r0 = m0; r0 < m1; r0 += rows) {
    const int r1 = std::min(m1, r0 + rows);
    float* apack = apack_buffer(static_cast<std::size_t>(r1 - r0) * w.k);
    pack_a(a, lda, r0, r1, w.k, apack);
    panels_of_chunk<DT>(apack, w, bias, c, ldc, r0, r1, p0, p1);
  }
}

// Every row chunk's panels in units of a few panels, handed out in chunk-major order to whichever
// thread asks next. A thread packs a chunk's A when its first unit of that chunk arrives (so each
// chunk is packed at most once a thread, as with the static split), and a core that runs slower
// (another tenant on its sibling, a smaller core) takes fewer units instead of holding the rest at
// the barrier. Which thread computes an element does not touch its chain.
template <DType DT>
void dynamic(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc, int m, int nt,
             int units_per_thread) {
  const int panels = (w.n + kNr - 1) / kNr;
  const int rows = chunk_rows(m, w.k), chunks = (m + rows - 1) / rows;
  const int per_unit = std::max(1, panels / (units_per_thread * nt));
  const int units = (panels + per_unit - 1) / per_unit;
  std::atomic<int> next{0};
#pragma omp parallel num_threads(nt)
  {
    int packed = -1;
    float* apack = nullptr;
    for (int u = next.fetch_add(1, std::memory_order_relaxed); u < chunks * units;
         u = next.fetch_add(1, std::memory_order_relaxed)) {
      const int ch = u / units, g = u % units;
      const int r0 = ch * rows, r1 = std::min(m, r0 + rows);
      if (ch != packed) {
        apack = apack_buffer(static_cast<std::size_t>(r1 - r0) * w.k);
        pack_a(a, lda, r0, r1, w.k, apack);
        packed = ch;
      }
      panels_of_chunk<DT>(apack, w, bias, c, ldc, r0, r1, g * per_unit, std::min(panels, (g + 1) * per_unit));
    }
  }
}

}  // namespace

void gemm_tile_wide_avx512(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc,
                           int m0, int m1, int p0, int p1) {
  switch (w.dtype) {
    case DType::F32: tile<DType::F32>(a, lda, w, bias, c, ldc, m0, m1, p0, p1); break;
    case DType::BF16: tile<DType::BF16>(a, lda, w, bias, c, ldc, m0, m1, p0, p1); break;
    case DType::F16: tile<DType::F16>(a, lda, w, bias, c, ldc, m0, m1, p0, p1); break;
    default: break;
  }
}

void gemm_wide_avx512_dynamic(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc,
                              int m, int nt, int units_per_thread) {
  switch (w.dtype) {
    case DType::F32: dynamic<DType::F32>(a, lda, w, bias, c, ldc, m, nt, units_per_thread); break;
    case DType::BF16: dynamic<DType::BF16>(a, lda, w, bias, c, ldc, m, nt, units_per_thread); break;
    case DType::F16: dynamic<DType::F16>(a, lda, w, bias, c, ldc, m, nt, units_per_thread); break;
    default: break;
  }
}

}  // namespace parity::kernels::detail
