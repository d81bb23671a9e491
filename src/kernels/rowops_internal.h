#pragma once
// Private to the norm and conv1d files: the per-row building blocks, one set per instruction
// set. Each set computes bit-identical results (see the order definitions in norm.cpp and
// conv1d.h); the dispatchers pick one set per call, so a row never mixes sets.
#include "kernels/isa.h"

namespace parity::kernels::detail {

struct RowOps {
  // Σ x[i]^2 in the fixed order of norm.cpp (16 lane partials, pairwise tree, tail in order).
  float (*sumsq)(const float* x, int n);
  // out[i] = (x[i] * r) * w[i]
  void (*scale)(const float* x, float r, const float* w, int n, float* out);
  // out[i] = y[i] * silu_f(z[i])
  void (*gate_mul)(const float* y, const float* z, int n, float* out);
  // out[i] = ((y[i] * r) * w[i]) * silu_f(z[i])
  void (*scale_gate)(const float* y, float r, const float* w, const float* z, int n, float* out);
  // One conv1d output row: win[j] is the input row at window position j (oldest first), wt is
  // the k×ch transposed weight (wt[j*ch + c] = w[c*k + j]).
  //   out[c] = fma(wt[k-1][c], win[k-1][c], ... fma(wt[0][c], win[0][c], bias ? bias[c] : 0))
  // then silu_f if asked.
  void (*conv_row)(const float* const* win, int k, int ch, const float* wt, const float* bias, bool silu,
                   float* out);
  // Mamba2's dt of one row: out[i] = min(max(softplus_f(raw[i] + bias[i]), lo), hi), the clamp as
  // std::min(std::max(v, lo), hi) does it (a NaN stays NaN).
  void (*dt_row)(const float* raw, const float* bias, int n, float lo, float hi, float* out);
  // Array forms of the vector exp_f / silu_f, for the tests that compare them with math.h.
  void (*exp_array)(const float* x, int n, float* y);
  void (*silu_array)(const float* x, int n, float* y);
};

extern const RowOps kRowOpsPortable;
extern const RowOps kRowOpsAvx2;
extern const RowOps kRowOpsAvx512;

inline const RowOps& row_ops(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return kRowOpsAvx512;
    case Isa::Avx2: return kRowOpsAvx2;
    case Isa::Portable: break;
  }
  return kRowOpsPortable;
}

// The conv rows of each set (defined in conv1d*.cpp, gathered into the tables above).
void conv_row_portable(const float* const* win, int k, int ch, const float* wt, const float* bias, bool silu,
                       float* out);
void conv_row_avx2(const float* const* win, int k, int ch, const float* wt, const float* bias, bool silu,
                   float* out);
void conv_row_avx512(const float* const* win, int k, int ch, const float* wt, const float* bias, bool silu,
                     float* out);

}  // namespace parity::kernels::detail
