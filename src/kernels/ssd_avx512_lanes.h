#pragma once
// The AVX-512 pieces the exact grid's kernels (ssd_avx512.cpp) and plain decode's SSU step
// (ssu_avx512.cpp) share: lane masks, exp / decay lane by lane, the 16-lane dot chains and their
// fixed fold tree, bf16 widening and rounding, the stream plan's prefetches. Each reproduces the
// scalar sequence of ssd_internal.h element by element. Include it only from *_avx512.cpp files:
// everything here has internal linkage (docs/numerics.md: an inline function with external linkage
// compiled for two instruction sets may be merged into one by the linker).
#include <immintrin.h>

#include <cstdint>

#include "kernels/ssd_internal.h"  // the scalar sequences and their constants
#include "kernels/stream_plan.h"
#include "kernels/vmath_avx512.h"

namespace parity::kernels::ssd_detail {
namespace {

constexpr int kW = 16;

// Local on purpose: std::min and friends are external inline templates (see ssd_internal.h).
inline int imin(int a, int b) { return a < b ? a : b; }

inline __mmask16 tail_mask(int count) {
  return count >= kW ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}
// tail_mask for a count that may be zero or negative (no lanes).
inline __mmask16 lane_mask(int count) { return count <= 0 ? static_cast<__mmask16>(0) : tail_mask(count); }

// decay_f of ssd_internal.h lane by lane (exp_f's lanes: vmath_avx512.h).
inline __m512 decay16(__m512 a) {
  const __mmask16 below = _mm512_cmp_ps_mask(a, _mm512_set1_ps(kDecayFloor), _CMP_LT_OQ);
  return _mm512_mask_mov_ps(v512::exp(a), below, _mm512_setzero_ps());
}

// Folds 16 lane accumulators to 16 dot results with the tree of ssd_internal.h (lane j + lane j+h
// for h = 8, 4, 2, 1), four tree levels shared by all 16 through shuffles. Result lane i holds
// the dot of acc[i].
inline __m512 reduce16x16(const __m512* acc) {
  __m512 l1[8], l2[4], l3[2];
  #pragma GCC unroll 16
  for (int i = 0; i < 8; ++i) {  // lanes 0..7: acc[2i] j + j+8; lanes 8..15: acc[2i+1]
    const __m512 lo = _mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 hi = _mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2));
    l1[i] = _mm512_add_ps(lo, hi);
  }
  #pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) {  // 128-bit quad q holds acc[4i+q], lanes j + j+4
    const __m512 lo = _mm512_shuffle_f32x4(l1[2 * i], l1[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 hi = _mm512_shuffle_f32x4(l1[2 * i], l1[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1));
    l2[i] = _mm512_add_ps(lo, hi);
  }
  #pragma GCC unroll 16
  for (int i = 0; i < 2; ++i) {  // quad q: lanes 0,1 from acc[8i+q], lanes 2,3 from acc[8i+4+q]
    const __m512 lo = _mm512_shuffle_ps(l2[2 * i], l2[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 hi = _mm512_shuffle_ps(l2[2 * i], l2[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2));
    l3[i] = _mm512_add_ps(lo, hi);
  }
  const __m512 lo = _mm512_shuffle_ps(l3[0], l3[1], _MM_SHUFFLE(2, 0, 2, 0));
  const __m512 hi = _mm512_shuffle_ps(l3[0], l3[1], _MM_SHUFFLE(3, 1, 3, 1));
  const __m512 z = _mm512_add_ps(lo, hi);  // lane 4q + m holds acc[q + 4m]
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(idx, z);
}

inline float reduce16(__m512 a) {
  const __m256 l1 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  const __m128 l2 = _mm_add_ps(_mm256_castps256_ps128(l1), _mm256_extractf128_ps(l1, 1));
  const __m128 l3 = _mm_add_ps(l2, _mm_movehl_ps(l2, l2));
  const __m128 l4 = _mm_add_ss(l3, _mm_shuffle_ps(l3, l3, 1));
  return _mm_cvtss_f32(l4);
}

// bf16 → fp32 (exact: a shift) and fp32 → bf16 with common/dtype.h's rounding: nearest-even on
// the integer image, NaNs kept quiet NaNs.
inline __m512 widen_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

// The rounded value in the high 16 bits of each lane, for a lane that is not NaN: the integer
// image plus 0x7fff plus the lsb of the kept half (f32_to_bf16's u + 0x7fff + ((u >> 16) & 1)).
inline __m512i round_hi_bf16(__m512 f) {
  const __m512i u = _mm512_castps_si512(f);
  const __mmask16 odd = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x10000));
  const __m512i t = _mm512_add_epi32(u, _mm512_set1_epi32(0x7fff));
  return _mm512_mask_add_epi32(t, odd, t, _mm512_set1_epi32(1));
}
// round_hi_bf16 with NaN lanes replaced by the quiet NaN (u >> 16) | 0x40 (in the high half).
inline __m512i round_hi_bf16_nan(__m512 f) {
  const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(round_hi_bf16(f), nan, _mm512_castps_si512(f), _mm512_set1_epi32(0x400000));
}
// The high halves of a (words 0..15) and b (words 16..31): one shuffle for 32 values.
inline __m512i pack_hi16(__m512i a, __m512i b) {
  alignas(64) static const uint16_t kOdd[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
                                                33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  return _mm512_permutex2var_epi16(a, _mm512_load_si512(kOdd), b);
}


// A state vector as fp32: an fp32 state is loaded, a bf16 one widened in registers (exact).
inline __m512 load_state(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load_state(const uint16_t* p) {
  return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 maskz_load_state(__mmask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 maskz_load_state(__mmask16 m, const uint16_t* p) { return widen_bf16(_mm256_maskz_loadu_epi16(m, p)); }

// 32 values rounded to bf16 (a: words 0..15, b: words 16..31) with f32_to_bf16's bits. kHw uses
// AVX512-BF16's vcvtne2ps2bf16 (one instruction for 32 values instead of about eight integer
// operations per 16): it rounds to nearest even on the integer image and quiets NaNs as
// f32_to_bf16 does, but flushes subnormal inputs to a signed zero, so a pair holding a subnormal
// takes the integer sequence instead. Call kHw only when the CPU has AVX512-BF16
// (kernels::avx512_bf16_active()).
template <bool kHw>
inline __m512i narrow32(__m512 a, __m512 b) {
  if constexpr (kHw) {
    constexpr int kSubnormal = 0x20;  // vfpclassps category
    if (__builtin_expect((_mm512_fpclass_ps_mask(a, kSubnormal) | _mm512_fpclass_ps_mask(b, kSubnormal)) == 0, 1))
      return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
  }
  return pack_hi16(round_hi_bf16_nan(a), round_hi_bf16_nan(b));
}

// Stores NV vectors of one state row, the lanes of m[v] of vector v, at p: fp32 as is, bf16
// rounded by pairs of vectors through narrow32.
template <int NV, bool kHw>
inline void store_state_row(float* p, const __mmask16* m, const __m512* v) {
  #pragma GCC unroll 16
  for (int i = 0; i < NV; ++i) _mm512_mask_storeu_ps(p + kW * i, m[i], v[i]);
}
template <int NV, bool kHw>
inline void store_state_row(uint16_t* p, const __mmask16* m, const __m512* v) {
  #pragma GCC unroll 16
  for (int i = 0; i < NV; i += 2) {
    const bool pair = i + 1 < NV;
    const __m512i w = narrow32<kHw>(v[i], pair ? v[i + 1] : _mm512_setzero_ps());
    const __mmask32 sm = static_cast<__mmask32>(m[i]) | (pair ? static_cast<__mmask32>(m[i + 1]) << 16 : 0u);
    _mm512_mask_storeu_epi16(p + kW * i, sm, w);
  }
}

// out[i] = dot16(rows[i], c) for i < 16.
template <class T>
inline void dot16x16(const T* const* rows, const float* c, int N, float* out) {
  __m512 acc[16];
  #pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  int k = 0;
  for (; k + kW <= N; k += kW) {
    const __m512 cv = _mm512_loadu_ps(c + k);
    #pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(load_state(rows[i] + k), cv, acc[i]);
  }
  if (k < N) {  // absent lanes keep their sum untouched, as in the scalar loop
    const __mmask16 m = tail_mask(N - k);
    const __m512 cv = _mm512_maskz_loadu_ps(m, c + k);
    #pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      acc[i] = _mm512_mask3_fmadd_ps(maskz_load_state(m, rows[i] + k), cv, acc[i], m);
    }
  }
  _mm512_storeu_ps(out, reduce16x16(acc));
}

// The 16 lane accumulators of dot16(a, c) before the fold tree.
template <class T>
inline __m512 dot16_lanes(const T* a, const float* c, int N) {
  __m512 acc = _mm512_setzero_ps();
  int k = 0;
  for (; k + kW <= N; k += kW) acc = _mm512_fmadd_ps(load_state(a + k), _mm512_loadu_ps(c + k), acc);
  if (k < N) {
    const __mmask16 m = tail_mask(N - k);
    acc = _mm512_mask3_fmadd_ps(maskz_load_state(m, a + k), _mm512_maskz_loadu_ps(m, c + k), acc, m);
  }
  return acc;
}

template <class T>
inline float dot16_one(const T* a, const float* b, int N) {
  return reduce16(dot16_lanes(a, b, N));
}

// Software prefetch at decode (kernels/stream_plan.h: the distances are the machine's). The state
// of a head is read once, from memory (or, at batch 1, from L3); on the Intel Xeon and the Zen 5 the
// hardware prefetchers restart at every 4 KiB page and pause during the work between heads, so each
// row read asks for the lines `near` bytes ahead into L1, and a bf16 state also `far` bytes ahead
// into the outer caches (_MM_HINT_T2: more lines in flight than the L1 fill buffers hold). The
// stream runs on into the next head's state, contiguous in the cache. Zen 5 (session 16): 8192 /
// 16384 took exact fp32's SSM part from ~1.2-1.3x its floor to ~1.0x and the whole step's
// exact/plain from 1.02-1.14 to 0.98-1.02 (fp32), and an Emerald Rapids Xeon is faster with them
// than with session 11's Xeon's 768 / 2048; Zen 4 (session 25): none, both modes faster without.
// The bits do not depend on them: prefetches only.
template <class T>
inline void prefetch_ahead(const T* row, int N) {
  const int near = state_prefetch_near();
  if (near == 0) return;
  const char* b = reinterpret_cast<const char*>(row) + near;
  for (int64_t o = 0; o < int64_t(N) * int64_t(sizeof(T)); o += 64) _mm_prefetch(b + o, _MM_HINT_T0);
}
// prefetch_ahead of `bytes` contiguous bytes at `at` and, for a bf16 state, the far request too,
// unrolled: per-row prefetch loops cost a fifth of a decode row's instructions.
template <class T>
inline void prefetch_span(const T* at, int64_t bytes) {
  const int near = state_prefetch_near(), far = sizeof(T) == sizeof(uint16_t) ? state_prefetch_far() : 0;
  if (near == 0 && far == 0) return;
  const char* b = reinterpret_cast<const char*>(at);
  #pragma GCC unroll 8
  for (int64_t o = 0; o < bytes; o += 64) {
    if (near) _mm_prefetch(b + near + o, _MM_HINT_T0);
    if (far) _mm_prefetch(b + far + o, _MM_HINT_T2);
  }
}

// dot16_lanes at N = kCachedDotN (every Mamba2 checkpoint's state size) with c already in registers:
// one load per FMA instead of two (on the Zen 4 a 512-bit load takes both load ports). The same
// chain, so the same bits.
constexpr int kCachedDotN = 128;
template <class T>
inline __m512 dot16_lanes_cached(const T* a, const __m512* cv) {
  __m512 acc = _mm512_setzero_ps();
  #pragma GCC unroll 16
  for (int v = 0; v < kCachedDotN / kW; ++v) acc = _mm512_fmadd_ps(load_state(a + kW * v), cv[v], acc);
  return acc;
}


// decay_f and exp_f for one value, through the vector code (same bits; see the note on
// external inline functions in ssd_internal.h).
inline float decay_one(float a) { return _mm_cvtss_f32(_mm512_castps512_ps128(decay16(_mm512_set1_ps(a)))); }
inline float exp_one(float a) { return _mm_cvtss_f32(_mm512_castps512_ps128(v512::exp(_mm512_set1_ps(a)))); }
inline float fma_one(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

}  // namespace
}  // namespace parity::kernels::ssd_detail
