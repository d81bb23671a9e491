#pragma once
// Mamba2 SSD (state-space duality) scan for one sequence segment, and the SSU recurrent update.
//
// Notation per head h: dA_t = dt_t · A_h (dt after softplus + clamp), state S ∈ R^{P×N}
// (P = head_dim, N = d_state), group g(h) = h / (H/G) owns B_t, C_t ∈ R^N.
//
// The chunked scan (DESIGN.md rules 6, 8). The rows passed in start at a chunk-grid boundary; the
// caller supplies the boundary state S0. Plain-mode prefill runs it with the grid restarting at
// the call's first row; exact mode runs the same row and fold routines on its own grid
// (ssd_grid.h). For row t (0-based inside its chunk, chunk boundary
// state S_b), with decay(t, s) = exp(Σ_{r=s+1..t} dA_r) summed sequentially from r = t down:
//   y_t = exp(Σ_{r=0..t} dA_r) · (S_b C_t) + Σ_{s=0..t} (C_t·B_s) · decay(t,s) · dt_s · x_s + D · x_t
// evaluated by ONE row routine (s visited in increasing order), whether the call holds one row or
// the whole chunk. The state at a chunk's end comes from ONE fold routine over the chunk's rows,
// every row's term weighted straight to the chunk's end (element-wise, no reduction):
//   S = decay_f(Σ_{r=0..L-1} dA_r) · S_b + Σ_{s=0..L-1} (decay_f(Σ_{r=s+1..L-1} dA_r) · dt_s · x_s) ⊗ B_s
// with s added in increasing order (decay_f = exp_f with the floor below; per element one multiply
// per fold and one FMA per row, ssd_internal.h). A fold always starts from a boundary: exact mode
// folds whole cells, plain mode also the call's last partial chunk. Decay factors below e^-60 are taken as 0
// in every path (see ssd_internal.h: subnormals cost microcode assists; the term is < 1e-26).
// Hence an output row depends only on (S_b, the chunk's rows ≤ t): prefix-, packing- and
// split-invariant by construction.
#include <cstdint>

namespace parity::kernels {

struct SsdShape {
  int nheads = 0;
  int headdim = 0;
  int ngroups = 0;
  int dstate = 0;
  int chunk_size = 0;
  int64_t state_elems() const { return int64_t(nheads) * headdim * dstate; }
};

// State layout everywhere: [nheads][headdim][dstate], fp32 (HF layout).
//
// Inputs (row-major, n rows):
//   x  [n][nheads*headdim]   dt [n][nheads] (already softplus'ed and clamped)   B [n][ngroups*dstate]
//   C  [n - first_out][ngroups*dstate]  (only rows that produce output need C)
//   A  [nheads] (negative), D [nheads]
// Row 0 is at a chunk boundary whose state is s0. Rows < first_out are re-fed (replayed): they
// enter the sums but produce no output. y is [n - first_out][nheads*headdim].
// chunk_states (nullable): receives the state at the end of every *complete* chunk, in order,
//   floor(n / chunk_size) states. final_state (nullable): the state after row n-1: the fold
//   recurrence continued over the trailing partial chunk (equals the last chunk state when n is a
//   multiple of chunk_size).
// x_stride: x's row stride in floats when x sits inside wider rows (the conv's x | B | C output,
//   read in place); 0 means nheads*headdim. y's stride is always nheads*headdim.
// Parallel over heads.
void ssd_scan(const SsdShape& shape, const float* x, const float* dt, const float* A, const float* B,
              const float* C, const float* D, int n, int first_out, const float* s0, float* y,
              float* chunk_states, float* final_state, int64_t x_stride = 0);

// Plain scalar twin of ssd_scan (same arithmetic, no SIMD); tests compare the two bitwise.
void ssd_scan_reference(const SsdShape& shape, const float* x, const float* dt, const float* A,
                        const float* B, const float* C, const float* D, int n, int first_out,
                        const float* s0, float* y, float* chunk_states, float* final_state,
                        int64_t x_stride = 0);

// SSU: the recurrent one-token update used by plain-mode decode (vLLM's selective_state_update):
//   S = exp(dt·A) · S + dt · x ⊗ B ;  y = S C + D · x
// Plain mode follows vLLM here; nothing ties its bits to the exact path's fold.
// state is updated in place (fp32). x [nheads*headdim], dt [nheads], B, C [ngroups*dstate].
void ssu_step(const SsdShape& shape, const float* x, const float* dt, const float* A, const float* B,
              const float* C, const float* D, float* state, float* y);

// ssu_step on a bf16 state (plain mode's default cache, as vLLM's): every element is widened,
// updated and y read exactly as ssu_step on an fp32 copy would, then rounded once to bf16 (nearest
// even) on store: the same bits as widen → ssu_step → round, without the fp32 copy's memory
// traffic.
void ssu_step_bf16(const SsdShape& shape, const float* x, const float* dt, const float* A, const float* B,
                   const float* C, const float* D, uint16_t* state, float* y);

}  // namespace parity::kernels
