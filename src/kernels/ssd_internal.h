#pragma once
// Private to the SSD files: the scalar definitions every path must reproduce bit for bit (the
// 16-lane dot, the decay chain, the floored decay), the argument bundles, and the AVX-512 entry
// points that ssd.cpp's chunk loop calls.
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
//   fold:          the state at the end of rows 0..Lc-1 from S_b, weighted (every row's term scaled
//                  straight to the end, as the chunk-state step of the SSD algorithm does):
//                  sum = the decay sums of row t = Lc-1; E = decay_f(sum[Lc]);
//                  c_s = decay_f(sum[s]) * dt_s; u_s[p] = c_s * x_s[p];
//                  S[p][n] = E * S_b[p][n]; then for s = 0..Lc-1: S[p][n] = fma(u_s[p], B_s[n], S[p][n]).
//                  One multiply per element per fold and one FMA per element per row (a row-by-row
//                  recurrence, decay_f(dA_s) * S then the FMA, costs two per row: session 18
//                  measured the scan 13 % faster in prefill). A fold always covers a whole chunk or
//                  cell from its boundary (or, in plain mode, the call's last partial chunk);
//                  chunk_states take S at the end of every complete chunk, final_state after the
//                  call's last row.
//   SSU:           S[p][n] = fma(dt * x[p], B[n], exp_f(dt*A) * S[p][n]);
//                  y[p] = fma(D, x[p], dot16(S[p][:], C))
//                  plain mode's vLLM-equivalent one-token update; it has no bitwise tie to the
//                  exact path.
// Nothing here depends on how many rows a call holds, which rows produce output, the thread
// count or the vector width, which is what makes prefill, chunked prefill and decode agree.
#include <cmath>
#include <cstdint>

#include "kernels/math.h"
#include "kernels/ssd.h"

namespace parity::kernels::ssd_detail {

inline constexpr int kDotLanes = 16;


// Decay factors below e^-60 (~1e-26) are taken as exactly 0. Without the floor, fast heads
// produce decays and products in the subnormal range for a band of (t, s) pairs in every chunk,
// and on Intel cores each vector operation touching a subnormal takes a microcode assist (the
// fold of a full chunk measured 7x slower). A dropped term is at most 1e-26 of its row's scale,
// far below fp32 resolution; every path applies the same floor, so the bits stay identical.
inline constexpr float kDecayFloor = -60.0f;

// The helpers below are static: this header is also compiled with AVX-512 flags, and an
// out-of-line copy with external linkage could be picked by the linker for baseline code. For
// the same reason the ISA files never call math.h's (external inline) functions.
static inline float decay_f(float a) { return a < kDecayFloor ? 0.0f : exp_f(a); }

static inline float dot16(const float* a, const float* b, int n) {
  float lane[kDotLanes] = {};
  for (int i = 0; i < n; ++i) lane[i % kDotLanes] = std::fma(a[i], b[i], lane[i % kDotLanes]);
  for (int h = kDotLanes / 2; h >= 1; h /= 2) {
    for (int j = 0; j < h; ++j) lane[j] = lane[j] + lane[j + h];
  }
  return lane[0];
}

// sum[0..t+1] as described above; the caller provides t + 2 floats.
static inline void decay_sums(const float* dA, int t, float* sum) {
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
  int64_t ldx;  // x's row stride (y's is nheads·headdim)
};

// The optimized row routine takes output rows t_lo.. in blocks of 16 up to rows16_end, then in
// blocks of kRowBlock and single rows; CB is laid out per block accordingly (see HeadChunk::cb).
inline constexpr int kRowBlock = 4;
static inline int rows16_end(int t_lo, int Lc) { return t_lo + (Lc - t_lo) / 16 * 16; }

// One head inside one chunk, as the optimized kernels see it.
struct HeadChunk {
  int P, N, Lc;
  int64_t ldx;       // row stride of x
  int64_t ldb;       // row stride of B and C
  int64_t ldy;       // row stride of y
  const float* x;    // chunk row 0 of this head
  const float* Bg;   // chunk row 0 of this head's group
  const float* Cg;   // C of this head's group; chunk row t is at row out0 + t
  float* yh;         // y of this head; chunk row t is at row out0 + t
  int64_t out0;      // chunk start - first_out
  // CB(t, s) at cb[t * ldcb + s] for rows from rows16_end on; for a 16-row block starting at
  // t0 before that, CB(t0 + r, s) at cb[t0 * ldcb + s * 16 + r] (ldcb >= chunk size).
  const float* cb;
  int ldcb;
  const float* Sb;   // boundary state of this head, [P][N]
  const uint16_t* Sb16;  // when set, the boundary state in bf16 (read widened; Sb is unused)
  float D;
  const float* dA;   // dt_s * A for the chunk's rows
  const float* dtc;  // dt_s for the chunk's rows
  // Scratch owned by the calling thread: sum and w hold 16 * lpad floats, sc 16 rows of ppad
  // floats, u lpad rows of ppad floats. lpad >= Lc + 2 and both are multiples of 16.
  float* sum;
  float* w;
  float* sc;
  float* u;
  int lpad, ppad;
  // Memory the caller reads next (decode: the next head's state), asked for during the fold, whose
  // arithmetic would otherwise run with no memory traffic in flight. Prefetches only.
  const void* pf_next = nullptr;
  int64_t pf_bytes = 0;
};

// AVX-512 kernels; call only after kernels::active_isa() reports AVX-512.
// CB(t, s) = dot16(C_t, B_s) for s = 0..t into cbt[0..t] (cbt has room for round_up(t+1, 16)).
// cb_block16: CB(t0 + r, s) for r < 16, s <= t0 + 15 into out[s * 16 + r]; C0 is C_t0.
void cb_block16_avx512(const float* Bg, int64_t ldb, const float* C0, int N, int t0, float* out);
void cb_row_avx512(const float* Bg, int64_t ldb, const float* Ct, int N, int t, float* cbt);
// The band of CB a call's heads share on a grid of `width`-row cells: for each output row t,
// band[t * width + j] = CB(t, s) of s = t - (width - 1) + j (the dot16 of cb_row_avx512; entries of
// s < 0 are left as they are). Bg is row 0 of the group's B, Ct the group's C of output row 0,
// which is call row first_out; rows rows of C.
void cb_band_avx512(const float* Bg, int64_t ldb, const float* Ct, int N, int first_out, int rows, int width,
                    float* band);
// Output rows t_lo..Lc-1 of one head by the row routine.
void head_rows_avx512(const HeadChunk& k, int t_lo);
// The fold routine: the state after the chunk's Lc rows, from k.Sb into dst (may equal k.Sb).
// Uses k.x/ldx, k.Bg/ldb, k.dA, k.dtc and the scratch k.u (u[s][p] = c_s * x_s[p], ld k.ppad)
// and k.w (c_s, then E at Lc).
void fold_avx512(const HeadChunk& k, float* dst);
// The fold into a bf16 state: dst [P][N] rounded (f32_to_bf16) once, at the end; the rows in
// between stay fp32 (in tmp, P·N floats, needed only for Lc > 32). Reads k.Sb16 when set.
// hw_bf16: round with AVX512-BF16's instruction (the same bits; only when avx512_bf16_active()).
void fold_bf16_avx512(const HeadChunk& k, uint16_t* dst, float* tmp, bool hw_bf16);
// Decode at the last row t = Lc-1 of a cell of at most 32 rows: head_rows_avx512(k, t) then the fold
// into `state` (the boundary state k.Sb / k.Sb16 itself), the same bits, in one pass over the state.
void row_and_fold_avx512(const HeadChunk& k, int t, float* state);
void row_and_fold_bf16_avx512(const HeadChunk& k, int t, uint16_t* state, bool hw_bf16);
// fp32 → bf16 of n values as the bf16 state kernels store them, for tests: Integer is the
// integer sequence, Hardware the AVX512-BF16 path with its fallback (both f32_to_bf16's bits),
// RawInstruction the instruction alone (subnormals flushed; the tests' companion). The last two
// only when kernels::avx512_bf16_detected().
enum class Bf16Rounding { Integer, Hardware, RawInstruction };
void round_bf16_avx512(const float* in, uint16_t* out, int n, Bf16Rounding how);
// One SSU step of one head: S [P][N] in place, y [P].
void ssu_head_avx512(int P, int N, const float* x, float dt, float A, float D, const float* B, const float* C,
                     float* S, float* y);

// ssu_head_avx512 on a bf16 state: widened on load, rounded (common/dtype.h's f32_to_bf16) on store;
// y reads the unrounded update. hw: round with AVX512-BF16 (only when kernels::avx512_bf16_active()).
void ssu_head_bf16_avx512(int P, int N, const float* x, float dt, float A, float D, const float* B, const float* C,
                          uint16_t* S, float* y, bool hw);

}  // namespace parity::kernels::ssd_detail
