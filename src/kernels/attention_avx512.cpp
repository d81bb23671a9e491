// AVX-512 attention task: the order of attention.h with one zmm lane per key of a 16-key block
// (scores) and one lane per head dimension (values). Each score lane runs the same FMA chain over
// head_dim as the scalar code; several heads and key blocks are scored side by side only to hide
// FMA latency, and the softmax updates still run block by block in order. Compiled with AVX-512
// flags: call only after active_isa() says so.
#include <immintrin.h>

// GCC 12 false positives on its own AVX-512 intrinsics: see gemm_avx512.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cmath>
#include <cstdint>

#include "kernels/attention_internal.h"
#include "kernels/vmath_avx512.h"

namespace parity::kernels::attn_detail {

namespace {

constexpr int kW = 16;   // keys per key block = lanes per zmm
constexpr int kVc = 8;   // value vectors held in registers at once (128 dims)

// Local on purpose: std::min is an external inline template (see ssd_internal.h).
inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

inline __mmask16 lanes_mask(int count) {
  return count >= kW ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

// The contract's block-sum tree: lanes i + i+8, i + i+4, i + i+2, then 0 + 1.
inline float tree16(__m512 e) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(e), _mm512_extractf32x8_ps(e, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// exp_f of one scalar through the vector twin (math.h's inline exp_f must not be instantiated here).
inline float exp1(float x) { return _mm512_cvtss_f32(v512::exp(_mm512_set1_ps(x))); }

struct HeadState {
  float m, l;
  float* acc;  // head_dim rounded up to 16 floats
};

// acc = (first ? 0 : acc · alpha), then acc[d] = fma(e[t], v_t[d], acc[d]) for t < c in order.
// vp: key t's value row at vp + t · hd.
inline void pv_update(float* acc, int hd, const float* vp, const float* e, int c, float alpha, bool first) {
  const int nvec = (hd + kW - 1) / kW;
  const __m512 va = _mm512_set1_ps(alpha);
  for (int v0 = 0; v0 < nvec; v0 += kVc) {
    const int nv = nvec - v0 < kVc ? nvec - v0 : kVc;
    __mmask16 mk[kVc];
    __m512 a[kVc];
#pragma GCC unroll 8
    for (int v = 0; v < kVc; ++v) {
      const int d0 = (v0 + v) * kW;
      mk[v] = v < nv ? lanes_mask(hd - d0) : static_cast<__mmask16>(0);
      a[v] = (first || v >= nv) ? _mm512_setzero_ps() : _mm512_mul_ps(_mm512_loadu_ps(acc + d0), va);
    }
    for (int t = 0; t < c; ++t) {
      const __m512 eb = _mm512_set1_ps(e[t]);
      const float* vr = vp + int64_t(t) * hd + v0 * kW;
#pragma GCC unroll 8
      for (int v = 0; v < kVc; ++v) {
        if (v < nv) a[v] = _mm512_fmadd_ps(eb, _mm512_maskz_loadu_ps(mk[v], vr + v * kW), a[v]);
      }
    }
#pragma GCC unroll 8
    for (int v = 0; v < kVc; ++v) {
      if (v < nv) _mm512_storeu_ps(acc + (v0 + v) * kW, a[v]);
    }
  }
}

// NH heads × up to NKB key blocks per step: NH · NKB independent score chains.
template <int NH, int NKB>
void run_heads(const RowTask& T, int h0) {
  const int hd = T.head_dim, bs = T.block_size;
  const int64_t p = T.pos;
  const int64_t nblocks = p / kW + 1;
  alignas(64) float accbuf[NH][kMaxHeadDim];
  HeadState st[NH];
  const float* q[NH];
  for (int h = 0; h < NH; ++h) {
    st[h] = HeadState{0.0f, 0.0f, accbuf[h]};
    q[h] = T.q + int64_t(h0 + h) * hd;
  }
  const float* kbase = T.k_cache + int64_t(T.kv_head) * hd * bs;
  const float* vbase = T.v_cache + int64_t(T.kv_head) * bs * hd;
  const __m512 vscale = _mm512_set1_ps(T.scale);
  for (int64_t kb0 = 0; kb0 < nblocks; kb0 += NKB) {
    const int nkb = static_cast<int>(min64(NKB, nblocks - kb0));
    const float* kp[NKB];
    const float* vp[NKB];
    for (int b = 0; b < NKB; ++b) {
      // Steps past the last block re-read the last one; those lanes are never used.
      const int64_t pos0 = (kb0 + (b < nkb ? b : nkb - 1)) * kW;
      const int64_t off = int64_t(T.block_table[pos0 / bs]) * T.block_floats;
      const int slot0 = static_cast<int>(pos0 % bs);
      kp[b] = kbase + off + slot0;
      vp[b] = vbase + off + int64_t(slot0) * hd;
    }
    __m512 s[NH][NKB];
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h)
#pragma GCC unroll 8
      for (int b = 0; b < NKB; ++b) s[h][b] = _mm512_setzero_ps();
    for (int d = 0; d < hd; ++d) {
      __m512 kv[NKB];
#pragma GCC unroll 8
      for (int b = 0; b < NKB; ++b) kv[b] = _mm512_loadu_ps(kp[b] + int64_t(d) * bs);
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h) {
        const __m512 qb = _mm512_set1_ps(q[h][d]);
#pragma GCC unroll 8
        for (int b = 0; b < NKB; ++b) s[h][b] = _mm512_fmadd_ps(qb, kv[b], s[h][b]);
      }
    }
    for (int b = 0; b < nkb; ++b) {
      const int64_t kb = kb0 + b;
      const int c = static_cast<int>(min64(kW, p - kb * kW + 1));
      const __mmask16 valid = lanes_mask(c);
      for (int h = 0; h < NH; ++h) {
        HeadState& H = st[h];
        const __m512 sc = _mm512_mul_ps(s[h][b], vscale);
        // Lanes past the query position hold scores of unwritten or later keys: out of the max,
        // and their weights are forced to +0 below.
        float mb = _mm512_reduce_max_ps(_mm512_mask_blend_ps(valid, _mm512_set1_ps(-INFINITY), sc));
        mb = mb + 0.0f;
        const float mn = kb == 0 ? mb : (mb > H.m ? mb : H.m);
        const __m512 e = _mm512_maskz_mov_ps(valid, v512::exp(_mm512_sub_ps(sc, _mm512_set1_ps(mn))));
        const float bsum = tree16(e);
        alignas(64) float ev[kW];
        _mm512_store_ps(ev, e);
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
    const __m512 vl = _mm512_set1_ps(st[h].l);
    float* o = T.out + int64_t(h0 + h) * hd;
    for (int d0 = 0; d0 < hd; d0 += kW) {
      const __mmask16 mk = lanes_mask(hd - d0);
      _mm512_mask_storeu_ps(o + d0, mk, _mm512_div_ps(_mm512_loadu_ps(st[h].acc + d0), vl));
    }
  }
}

}  // namespace

void row_task_avx512(const RowTask& T) {
  int h = 0;
  for (; h + 4 <= T.heads; h += 4) run_heads<4, 2>(T, h);
  switch (T.heads - h) {
    case 3: run_heads<3, 2>(T, h); break;
    case 2: run_heads<2, 4>(T, h); break;
    case 1: run_heads<1, 8>(T, h); break;
    default: break;
  }
}

}  // namespace parity::kernels::attn_detail
