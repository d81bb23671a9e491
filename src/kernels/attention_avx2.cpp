// AVX2 attention task: attention_avx512.cpp's scheme with each 16-lane key block held in two ymm
// registers (keys 0–7 and 8–15), so the contract's tree (lane i + lane i+8 first) is simply
// low half + high half. Every score, weight and value lane runs the scalar sequence of
// attention.h. Compiled with AVX2 + FMA flags: call only after active_isa() says so.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention_internal.h"
#include "kernels/vmath_avx2.h"

namespace parity::kernels::attn_detail {

namespace {

constexpr int kKb = 16;  // keys per key block
constexpr int kW = 8;    // lanes per ymm
constexpr int kVc = 8;   // value vectors held in registers at once (64 dims)

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// All-ones in lanes lo .. lo + 7 that are < count (maskload/maskstore take the sign bit).
inline __m256i lanes_mask(int count, int lo) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count - lo), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The block-sum tree on (keys 0–7, keys 8–15): i + i+8, then i + i+4, i + i+2, 0 + 1.
inline float tree16(__m256 lo, __m256 hi) {
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// Max is exact, so any combine order gives the same value (the caller canonicalises ±0).
inline float hmax(__m256 v) {
  const __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 b = _mm_max_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_max_ss(b, _mm_shuffle_ps(b, b, 1)));
}

inline float exp1(float x) { return _mm256_cvtss_f32(v256::exp(_mm256_set1_ps(x))); }

struct HeadState {
  float m, l;
  float* acc;
};

inline void pv_update(float* acc, int hd, const float* vp, const float* e, int c, float alpha, bool first) {
  const int nvec = (hd + kW - 1) / kW;
  const __m256 va = _mm256_set1_ps(alpha);
  for (int v0 = 0; v0 < nvec; v0 += kVc) {
    const int nv = nvec - v0 < kVc ? nvec - v0 : kVc;
    __m256i mk[kVc];
    __m256 a[kVc];
#pragma GCC unroll 8
    for (int v = 0; v < kVc; ++v) {
      const int d0 = (v0 + v) * kW;
      mk[v] = lanes_mask(hd, d0);
      a[v] = (first || v >= nv) ? _mm256_setzero_ps() : _mm256_mul_ps(_mm256_loadu_ps(acc + d0), va);
    }
    for (int t = 0; t < c; ++t) {
      const __m256 eb = _mm256_set1_ps(e[t]);
      const float* vr = vp + int64_t(t) * hd + v0 * kW;
#pragma GCC unroll 8
      for (int v = 0; v < kVc; ++v) {
        if (v < nv) a[v] = _mm256_fmadd_ps(eb, _mm256_maskload_ps(vr + v * kW, mk[v]), a[v]);
      }
    }
#pragma GCC unroll 8
    for (int v = 0; v < kVc; ++v) {
      if (v < nv) _mm256_storeu_ps(acc + (v0 + v) * kW, a[v]);
    }
  }
}

template <int NH, int NKB>
void run_heads(const RowTask& T, int h0) {
  const int hd = T.head_dim, bs = T.block_size;
  const int64_t p = T.pos;
  const int64_t nblocks = p / kKb + 1;
  alignas(32) float accbuf[NH][kMaxHeadDim];
  HeadState st[NH];
  const float* q[NH];
  for (int h = 0; h < NH; ++h) {
    st[h] = HeadState{0.0f, 0.0f, accbuf[h]};
    q[h] = T.q + int64_t(h0 + h) * hd;
  }
  const float* kbase = T.k_cache + int64_t(T.kv_head) * hd * bs;
  const float* vbase = T.v_cache + int64_t(T.kv_head) * bs * hd;
  const __m256 vscale = _mm256_set1_ps(T.scale);
  for (int64_t kb0 = 0; kb0 < nblocks; kb0 += NKB) {
    const int nkb = static_cast<int>(min64(NKB, nblocks - kb0));
    const float* kp[NKB];
    const float* vp[NKB];
    for (int b = 0; b < NKB; ++b) {
      const int64_t pos0 = (kb0 + (b < nkb ? b : nkb - 1)) * kKb;
      const int64_t off = int64_t(T.block_table[pos0 / bs]) * T.block_floats;
      const int slot0 = static_cast<int>(pos0 % bs);
      kp[b] = kbase + off + slot0;
      vp[b] = vbase + off + int64_t(slot0) * hd;
    }
    __m256 s[NH][NKB][2];
#pragma GCC unroll 4
    for (int h = 0; h < NH; ++h)
#pragma GCC unroll 4
      for (int b = 0; b < NKB; ++b) s[h][b][0] = s[h][b][1] = _mm256_setzero_ps();
    for (int d = 0; d < hd; ++d) {
      __m256 k0[NKB], k1[NKB];
#pragma GCC unroll 4
      for (int b = 0; b < NKB; ++b) {
        k0[b] = _mm256_loadu_ps(kp[b] + int64_t(d) * bs);
        k1[b] = _mm256_loadu_ps(kp[b] + int64_t(d) * bs + kW);
      }
#pragma GCC unroll 4
      for (int h = 0; h < NH; ++h) {
        const __m256 qb = _mm256_set1_ps(q[h][d]);
#pragma GCC unroll 4
        for (int b = 0; b < NKB; ++b) {
          s[h][b][0] = _mm256_fmadd_ps(qb, k0[b], s[h][b][0]);
          s[h][b][1] = _mm256_fmadd_ps(qb, k1[b], s[h][b][1]);
        }
      }
    }
    for (int b = 0; b < nkb; ++b) {
      const int64_t kb = kb0 + b;
      const int c = static_cast<int>(min64(kKb, p - kb * kKb + 1));
      const __m256 valid0 = _mm256_castsi256_ps(lanes_mask(c, 0)), valid1 = _mm256_castsi256_ps(lanes_mask(c, kW));
      const __m256 ninf = _mm256_set1_ps(-INFINITY);
      for (int h = 0; h < NH; ++h) {
        HeadState& H = st[h];
        const __m256 sc0 = _mm256_mul_ps(s[h][b][0], vscale), sc1 = _mm256_mul_ps(s[h][b][1], vscale);
        float mb = hmax(_mm256_max_ps(_mm256_blendv_ps(ninf, sc0, valid0), _mm256_blendv_ps(ninf, sc1, valid1)));
        mb = mb + 0.0f;
        const float mn = kb == 0 ? mb : (mb > H.m ? mb : H.m);
        const __m256 vm = _mm256_set1_ps(mn);
        const __m256 e0 = _mm256_and_ps(valid0, v256::exp(_mm256_sub_ps(sc0, vm)));
        const __m256 e1 = _mm256_and_ps(valid1, v256::exp(_mm256_sub_ps(sc1, vm)));
        const float bsum = tree16(e0, e1);
        alignas(32) float ev[kKb];
        _mm256_store_ps(ev, e0);
        _mm256_store_ps(ev + kW, e1);
        float alpha = 1.0f;
        if (kb == 0) {
          H.l = bsum;
        } else {
          alpha = exp1(H.m - mn);
          H.l = H.l * alpha;
          H.l = H.l + bsum;
        }
        pv_update(H.acc, hd, vp[b], ev, c, alpha, kb == 0);
        H.m = mn;
      }
    }
  }
  for (int h = 0; h < NH; ++h) {
    const __m256 vl = _mm256_set1_ps(st[h].l);
    float* o = T.out + int64_t(h0 + h) * hd;
    for (int d0 = 0; d0 < hd; d0 += kW) {
      _mm256_maskstore_ps(o + d0, lanes_mask(hd, d0), _mm256_div_ps(_mm256_loadu_ps(st[h].acc + d0), vl));
    }
  }
}

}  // namespace

void row_task_avx2(const RowTask& T) {
  int h = 0;
  for (; h + 4 <= T.heads; h += 4) run_heads<4, 1>(T, h);
  switch (T.heads - h) {
    case 3: run_heads<3, 1>(T, h); break;
    case 2: run_heads<2, 2>(T, h); break;
    case 1: run_heads<1, 4>(T, h); break;
    default: break;
  }
}

}  // namespace parity::kernels::attn_detail
