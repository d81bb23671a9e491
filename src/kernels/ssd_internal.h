#pragma once
// Private to the SSD files: the two scalar definitions every path must reproduce bit for bit
// (the 16-lane dot and the decay chain), the argument bundle, and the per-ISA entry points that
// ssd.cpp dispatches to.
//
// Evaluation order (the contract ssd.cpp, ssd_avx512.cpp and the scalar reference all follow).
// Per head h, chunk rows 0..Lc-1, dA_s = dt_s * A_h (one fp32 multiply):
//   dot16(a, b):   lane j = 0..15 accumulates n = j, j+16, j+32, ... < N in increasing n as
//                  lane = fma(a[n], b[n], lane) from +0.0f; then lanes fold as a fixed tree
//                  l[j] = l[j] + l[j+h] for h = 8, 4, 2, 1; the result is l[0].
//   decay sums of row t: acc = 0; for s = t down to 0: sum[s] = acc; acc = acc + dA_s;
//                  then sum[t+1] = acc (the boundary exponent Σ_{r=0..t} dA_r).
//                  decay(t,s) = decay_f(sum[s]); exp_cs_t = decay_f(sum[t+1]), where
//                  decay_f(a) = a < kDecayFloor ? 0 : exp_f(a) (see kDecayFloor).
//   CB(t,s)      = dot16(C_t, B_s)
//   w(t,s)       = (CB(t,s) * decay(t,s)) * dt_s
//   intra[p]     = 0; for s = 0..t: intra[p] = fma(w(t,s), x_s[p], intra[p])
//   SC[p]        = dot16(S_b[p][:], C_t)
//   y_t[p]       = fma(D, x_t[p], fma(exp_cs_t, SC[p], intra[p]))
//   fold (row T = Lc-1): S[p][n] = exp_cs_T * S_b[p][n];
//                  for s = 0..T: u = (decay(T,s) * dt_s) * x_s[p]; S[p][n] = fma(u, B_s[n], S[p][n])
//   SSU:           S[p][n] = fma(dt * x[p], B[n], exp_f(dt*A) * S[p][n]);
//                  y[p] = fma(D, x[p], dot16(S[p][:], C))
// Nothing here depends on how many rows a call holds, which rows produce output, the thread
// count or the vector width, which is what makes prefill, chunked prefill and decode agree.
#include <cstdint>

#include "kernels/math.h"
#include "kernels/ssd.h"

namespace parity::kernels::ssd_detail {

inline constexpr int kDotLanes = 16;

// Decay factors below e^-60 (~1e-26) are taken as exactly 0. Without the floor, fast heads
// produce decays and products in the subnormal range for a band of (t, s) pairs in every chunk,
// and on Intel cores each vector operation touching a subnormal takes a microcode assist: the
// fold ran 8x slower there. A dropped term is at most 1e-26 of its row's scale, far below fp32
// resolution; every path applies the same floor, so the bits stay identical.
inline constexpr float kDecayFloor = -60.0f;

inline float decay_f(float a) { return a < kDecayFloor ? 0.0f : exp_f(a); }

inline float dot16(const float* a, const float* b, int n) {
  float lane[kDotLanes] = {};
  for (int i = 0; i < n; ++i) lane[i % kDotLanes] = std::fma(a[i], b[i], lane[i % kDotLanes]);
  for (int h = kDotLanes / 2; h >= 1; h /= 2) {
    for (int j = 0; j < h; ++j) lane[j] = lane[j] + lane[j + h];
  }
  return lane[0];
}

// sum[0..t+1] as described above; the caller provides t + 2 floats.
inline void decay_sums(const float* dA, int t, float* sum) {
  float acc = 0.0f;
  for (int s = t; s >= 0; --s) {
    sum[s] = acc;
    acc = acc + dA[s];
  }
  sum[t + 1] = acc;
}

struct ScanArgs {
  SsdShape shape;
  const float* x;
  const float* dt;
  const float* A;
  const float* B;
  const float* C;
  const float* D;
  int n;
  int first_out;
  const float* s0;
  float* y;
  float* chunk_states;
  float* final_state;
};

struct SsuArgs {
  SsdShape shape;
  const float* x;
  const float* dt;
  const float* A;
  const float* B;
  const float* C;
  const float* D;
  float* state;
  float* y;
};

// Only call after kernels::active_isa() reports AVX-512.
void scan_avx512(const ScanArgs& a);
void ssu_avx512(const SsuArgs& a);

}  // namespace parity::kernels::ssd_detail
