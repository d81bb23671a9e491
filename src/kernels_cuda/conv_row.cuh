#pragma once
// One conv channel of a row whose window is held in registers (conv1d.cu's held path, and in_proj's
// conv epilogue, conv_epilogue.h): one copy of the arithmetic, so both give the same bits.
#include "kernels/math.h"
#include "kernels_cuda/conv_epilogue.h"
#include "kernels_cuda/norm_row.cuh"

namespace parity::cuda {

// acc (the channel's bias, or 0), then fmaf(w[i], win[i], acc) over the taps i < K ascending: conv_at's
// order, the CPU's (kernels/conv1d.cpp).
template <int kTaps>
__device__ __forceinline__ float conv_held_sum(const float (&wk)[kTaps], const float (&win)[kTaps], int K, float acc) {
#pragma unroll
  for (int i = 0; i < kTaps; ++i)
    if (i < K) acc = fmaf(wk[i], win[i], acc);
  return acc;
}

// What in_proj's epilogue needs for one output column n, for the two rows m_first, m_first + 1 a lane
// holds (NT = 8: rows 2q, 2q + 1 of the n8 tile), read before the GEMM's chain.
struct ConvColumn {
  int kind = 0;  // 0: none, 1: conv channel idx, 2: dt of head idx, 3: gate factor of z column idx
  int idx = 0;
  float w[kConvEpilogueTaps];
  float b = 0.0f;
  float win[2][kConvEpilogueTaps];
  float* st[2] = {nullptr, nullptr};  // the row's slot's state for channel idx (element i at st[i * ch])
};

__device__ __forceinline__ void conv_column_load(const ConvEpilogue& ep, int M, int m_first, int n, ConvColumn& cc) {
  if (n >= ep.col0 && n < ep.col0 + ep.ch) {
    const int c = n - ep.col0;
    cc.kind = 1;
    cc.idx = c;
#pragma unroll
    for (int i = 0; i < kConvEpilogueTaps; ++i) cc.w[i] = i < ep.K ? ep.w[static_cast<std::size_t>(c) * ep.K + i] : 0.0f;
    cc.b = ep.bias ? ep.bias[c] : 0.0f;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int m = m_first + e;
      if (m >= M) continue;
      float* st = ep.state + static_cast<std::size_t>(ep.slot[ep.row_seq[m]]) * (ep.K - 1) * ep.ch + c;
      cc.st[e] = st;
#pragma unroll
      for (int i = 0; i + 1 < kConvEpilogueTaps; ++i)
        if (i + 1 < ep.K) cc.win[e][i] = st[static_cast<std::size_t>(i) * ep.ch];
    }
  } else if (n >= ep.dt_col0 && n < ep.dt_col0 + ep.dt.H) {
    cc.kind = 2;
    cc.idx = n - ep.dt_col0;
    cc.b = ep.dt.bias[cc.idx];
  } else if (ep.gate != nullptr && n < ep.gate_width) {
    cc.kind = 3;
    cc.idx = n;
  }
}

// Row m's (the lane's row e) in_proj value v of the column: the channel's output and new state, dt, or
// the gate factor (conv1d's GateJob: the same function of the same float).
__device__ __forceinline__ void conv_column_store(const ConvEpilogue& ep, ConvColumn& cc, int e, int m, float v) {
  if (cc.kind == 1) {
#pragma unroll
    for (int i = 0; i < kConvEpilogueTaps; ++i)
      if (i + 1 == ep.K) cc.win[e][i] = v;
    const float acc = conv_held_sum(cc.w, cc.win[e], ep.K, cc.b);
    ep.out[static_cast<std::size_t>(m) * ep.ch + cc.idx] = ep.silu ? kernels::silu_f(acc) : acc;
#pragma unroll
    for (int i = 0; i + 1 < kConvEpilogueTaps; ++i)
      if (i + 1 < ep.K) cc.st[e][static_cast<std::size_t>(i) * ep.ch] = cc.win[e][i + 1];
  } else if (cc.kind == 2) {
    ep.dt.dt[static_cast<std::size_t>(m) * ep.dt.H + cc.idx] = dt_value(v, cc.b, ep.dt.lo, ep.dt.hi);
  } else if (cc.kind == 3) {
    ep.gate[static_cast<std::size_t>(m) * ep.gate_width + cc.idx] = norm_row::gate_factor(v, false);
  }
}

}  // namespace parity::cuda
