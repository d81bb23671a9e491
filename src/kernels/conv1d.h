#pragma once
// Causal depthwise conv1d (Mamba2's conv over xBC), one sequence at a time.
//
// Row t of the output is bias[c] followed by k FMAs over the window in order j = 0..k-1:
//   out[t][c] = fma(w[c][k-1], in[t][c], ... fma(w[c][0], in[t-k+1][c], bias[c]))
// where rows before the first input come from the carried-in state. The multi-row call and the
// one-token update use the same per-row routine, so prefill and decode agree bit for bit.
// SiLU is applied to the output when `apply_silu` (as Mamba2 does).
#include <vector>

namespace parity::kernels {

// in: n×ch (row stride ch). state: (k-1)×ch, the previous k-1 input rows, oldest first; it is
// read as the left context and then overwritten with the last k-1 rows of [state; in].
// w: ch×k (HF conv1d.weight [ch,1,k] flattened). bias: ch or null. out: n×ch. `ld_in`: the row
// stride of `in` when it is a column range of a wider matrix (0: ch).
void conv1d_causal(const float* in, int n, int ch, const float* w, const float* bias, int k,
                   float* state, bool apply_silu, float* out, int ld_in = 0);

// The weights tap-major (k×ch: taps[j·ch + c] = w[c·k + j]), so that a vector of channels reads one
// contiguous run per tap. A model makes them once at load; conv1d_causal makes them per call.
std::vector<float> conv1d_taps(const float* w, int ch, int k);

// conv1d_causal on tap-major weights: the same arithmetic, the same bits.
void conv1d_causal_taps(const float* in, int n, int ch, const float* taps, const float* bias, int k, float* state,
                        bool apply_silu, float* out, int ld_in = 0);

// Same result as conv1d_causal with n = 1 (the decode path).
void conv1d_update(const float* in_row, int ch, const float* w, const float* bias, int k, float* state,
                   bool apply_silu, float* out_row);

}  // namespace parity::kernels
