#pragma once
// A cell's three products as one warp forms them on tensor cores: C·Sᵀ's quarters, the intra product and the
// fold. The walk (ssd_tc_walk.cu) and the one-row decode (ssd_tc_decode.cu) both call these, so a decoded
// row takes the same steps, in the same order, as the walk gives it: exact mode's one fold routine
// (DESIGN rule 6) on tensor cores. The warp's state layout is the walk's (ssd_tc_walk.cu's header).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/ssd_device.cuh"
#include "kernels_cuda/ssd_tc_cells.cuh"
#include "kernels_cuda/ssd_tc_steps.cuh"

namespace parity::cuda::ssd {
namespace {

// The warp's state between memory and the walk's layout: S[j][e] at p = prow + 8·(e / 2), n = 8·(nt0 + j) + 2q +
// e % 2 (prow: the lane's first row of p). A bf16 state widens exactly and is stored as it was folded (already
// bf16-exact). The walk and the one-row decode read and write a slot's state through these.
// f(j, e, i) for each pair S[j][e], S[j][e + 1] of the warp's layout, i its index in the slot's state.
template <int NT, typename F>
__device__ __forceinline__ void for_state_pairs(std::size_t sbase, int prow, int N, int nt0, int q, F&& f) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; e += 2) f(j, e, sbase + static_cast<std::size_t>(prow + 4 * e) * N + 8 * (nt0 + j) + 2 * q);
}
template <int NT>
__device__ __forceinline__ void load_state(const SsdState& st, std::size_t sbase, int prow, int N, int nt0, int q,
                                           float (&S)[NT][4]) {
  const bool bf16 = st.state_f32 == nullptr;
  for_state_pairs<NT>(sbase, prow, N, nt0, q, [&](int j, int e, std::size_t i) {
    float2 v;
    if (bf16) {
      const uint32_t u = *reinterpret_cast<const uint32_t*>(st.state_bf16 + i);
      v = make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
    } else {
      v = *reinterpret_cast<const float2*>(st.state_f32 + i);
    }
    S[j][e] = v.x;
    S[j][e + 1] = v.y;
  });
}
template <int NT>
__device__ __forceinline__ void store_state(const SsdState& st, std::size_t sbase, int prow, int N, int nt0, int q,
                                            const float (&S)[NT][4]) {
  const bool bf16 = st.state_f32 == nullptr;
  for_state_pairs<NT>(sbase, prow, N, nt0, q, [&](int j, int e, std::size_t i) {
    if (bf16)
      *reinterpret_cast<uint32_t*>(st.state_bf16 + i) =
          (__float_as_uint(S[j][e]) >> 16) | (__float_as_uint(S[j][e + 1]) & 0xffff0000u);
    else *reinterpret_cast<float2*>(st.state_f32 + i) = make_float2(S[j][e], S[j][e + 1]);
  });
}

// The warp's part of C·Sᵀ for 16 rows (M) and its two p-tiles of 8 (N): quarters a_m of n (two k16 steps each
// from zero) over the warp's NT n-tiles from nt0, then (a_0 + a_1) + (a_2 + a_3), each pair added as soon as it
// is formed. V: the C tiles (head at V, rest at V + kRestAt); crow, ccol: the lane's ldmatrix row and column.
// sfrag(jl, pt): the state's k16n8 operand for n-tiles 2·jl, 2·jl + 1 of the warp's and p-tile pt, as
// state_fragment packs it (formed as it is used: two at once spilled the walk's 4 × 1 blocks). kRest: the state's rest is multiplied too (split products with an fp32 state).
template <int NT, bool kSplit, bool kRest, int kRestAt = 2 * kTile, class SFrag>
__device__ __forceinline__ void inter_quarters(const uint16_t* V, int crow, int ccol, int nt0, SFrag&& sfrag,
                                               float (&part)[2][4]) {
  constexpr int NQ = NT / 4;
  auto quarter = [&](int m, float (&acc)[2][4]) {
#pragma unroll
    for (int pt = 0; pt < 2; ++pt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[pt][e] = 0.0f;
#pragma unroll
    for (int s2 = 0; s2 < 2; ++s2) {
      const int jl = 2 * m + s2;  // local k-step: n-tiles 2·jl, 2·jl + 1 of the warp's
      const int off = crow * kVS + 8 * (nt0 + 2 * jl) + ccol;
      Frag4<kSplit> ca;
      ptx::ldmatrix_x4(V + off, ca.hi);
      if constexpr (kSplit) ptx::ldmatrix_x4(V + kRestAt + off, ca.lo);
#pragma unroll
      for (int pt = 0; pt < 2; ++pt) product<kSplit>(acc[pt], ca, sfrag(jl, pt), kRest);
    }
  };
  if constexpr (NQ == 1) {
    quarter(0, part);
  } else {
    float half[2][4];
#pragma unroll
    for (int hp = 0; hp < NQ / 2; ++hp) {
      float a0[2][4], a1[2][4];
      quarter(2 * hp, a0);
      quarter(2 * hp + 1, a1);
#pragma unroll
      for (int pt = 0; pt < 2; ++pt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float sum = a0[pt][e] + a1[pt][e];
          if (NQ == 2) part[pt][e] = sum;
          else if (hp == 0) half[pt][e] = sum;
          else part[pt][e] = half[pt][e] + sum;
        }
    }
  }
}

// The state's k16n8 operand of C·Sᵀ for n-tiles 2·jl, 2·jl + 1 and p-tile pt, packed from the warp's S (the
// relay's chain publishes exactly these words, so its cell warps multiply what the walk would).
template <bool kSplit, bool kRest, int NT>
__device__ __forceinline__ Frag2<kSplit> state_fragment(const float (&S)[NT][4], int jl, int pt) {
  Frag2<kRest> sb;
  sb.set(0, S[2 * jl][2 * pt], S[2 * jl][2 * pt + 1]);
  sb.set(1, S[2 * jl + 1][2 * pt], S[2 * jl + 1][2 * pt + 1]);
  Frag2<kSplit> b2;
  b2.hi[0] = sb.hi[0], b2.hi[1] = sb.hi[1];
  if constexpr (kRest) b2.lo[0] = sb.lo[0], b2.lo[1] = sb.lo[1];
  return b2;
}

template <int NT, bool kSplit, bool kRest>
__device__ __forceinline__ void inter_part(const uint16_t* V, int crow, int ccol, int nt0, const float (&S)[NT][4],
                                           float (&part)[2][4]) {
  inter_quarters<NT, kSplit, kRest>(
      V, crow, ccol, nt0, [&](int jl, int pt) { return state_fragment<kSplit, kRest>(S, jl, pt); }, part);
}

// The same, with the state's dtype chosen at run time (a bf16 state is exact in bf16: no rest to multiply).
template <int NT, bool kSplit>
__device__ __forceinline__ void inter_part(const uint16_t* V, int crow, int ccol, int nt0, const float (&S)[NT][4],
                                           bool bf16_state, float (&part)[2][4]) {
  if constexpr (!kSplit) inter_part<NT, false, false>(V, crow, ccol, nt0, S, part);  // one copy: no rest either way
  else if (bf16_state) inter_part<NT, true, false>(V, crow, ccol, nt0, S, part);
  else inter_part<NT, true, true>(V, crow, ccol, nt0, S, part);
}

// Y_intra of the warp's two p-tiles: the coef fragment (m16k16, rows t, columns i) times x[i][p] (xa[a][pt] at
// i = 2q + (a & 1) + 8·(a >> 1), p = the lane's column of p-tile pt), one k16 step from zero.
template <bool kSplit>
__device__ __forceinline__ void intra_product(const Frag4<kSplit>& fa, const float (&xa)[4][2], float (&ya)[2][4]) {
#pragma unroll
  for (int pt = 0; pt < 2; ++pt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) ya[pt][e] = 0.0f;
    Frag2<kSplit> xb;
    xb.set(0, xa[0][pt], xa[1][pt]);
    xb.set(1, xa[2][pt], xa[3][pt]);
    product<kSplit>(ya[pt], fa, xb);
  }
}

// The cell's delta over the warp's NT n-tiles from nt0: delta = (w∘x)ᵀ·B over the cell's 16 rows, one k16 step
// from zero an n-tile, B's tiles transposed by ldmatrix from VB (head at VB, rest at VB + kRestAt); wv[a]: w at
// the rows of xa[a]. use(j, dl) takes n-tile j's delta (dl[e] in the state layout's S[j][e]). kLoadFirst: every
// B fragment is read before the first product, for a use() that stores to shared memory (the relay's delta
// warps): ptxas keeps a shared load after an earlier shared store it cannot tell apart, so read as used, each
// ldmatrix waited for the store before it and each product for its ldmatrix (session 50, ncu: 44 % of a delta
// warp's time). The walk's folds keep the fragments as they are used (their registers are the state's).
template <int NT, bool kSplit, int kRestAt = 2 * kTile, bool kLoadFirst = false, class Use>
__device__ __forceinline__ void delta_tiles(const uint16_t* VB, int brow, int bcol, int nt0, const float (&xa)[4][2],
                                            const float (&wv)[4], Use&& use) {
  Frag4<kSplit> xw;  // (w_i·x[i][p]) at p = gi (+8), i = 2q.. (+8)
  xw.set(0, wv[0] * xa[0][0], wv[1] * xa[1][0]);
  xw.set(1, wv[0] * xa[0][1], wv[1] * xa[1][1]);
  xw.set(2, wv[2] * xa[2][0], wv[3] * xa[3][0]);
  xw.set(3, wv[2] * xa[2][1], wv[3] * xa[3][1]);
  // n-tiles j, j + 1's operands (B transposed by ldmatrix).
  auto load = [&](int j, Frag2<kSplit> (&bb)[2]) {
    const int off = brow * kVS + 8 * (nt0 + j) + bcol;
    uint32_t r[4];
    ptx::ldmatrix_x4_trans(ptx::smem_addr(VB + off), r);
    bb[0].hi[0] = r[0], bb[0].hi[1] = r[1], bb[1].hi[0] = r[2], bb[1].hi[1] = r[3];
    if constexpr (kSplit) {
      ptx::ldmatrix_x4_trans(ptx::smem_addr(VB + kRestAt + off), r);
      bb[0].lo[0] = r[0], bb[0].lo[1] = r[1], bb[1].lo[0] = r[2], bb[1].lo[1] = r[3];
    }
  };
  auto form = [&](int j, const Frag2<kSplit> (&bb)[2]) {
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      float dl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      product<kSplit>(dl, xw, bb[jj]);
      use(j + jj, dl);
    }
  };
  if constexpr (kLoadFirst) {
    Frag2<kSplit> all[NT / 2][2];
#pragma unroll
    for (int j = 0; j < NT; j += 2) load(j, all[j / 2]);
#pragma unroll
    for (int j = 0; j < NT; j += 2) form(j, all[j / 2]);
  } else {
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      Frag2<kSplit> bb[2];
      load(j, bb);
      form(j, bb);
    }
  }
}

// The fold of the warp's state: the cell's delta (delta_tiles), then S ← fold_element(decay, S, delta).
template <int NT, bool kSplit>
__device__ __forceinline__ void fold_state(const uint16_t* VB, int brow, int bcol, int nt0, const float (&xa)[4][2],
                                           const float (&wv)[4], float decay, bool bf16_state, float (&S)[NT][4]) {
  // The state's dtype as a constant of each copy of the loop: no branch between its tensor-core steps.
  auto fold_tiles = [&](auto bf16c) {
    delta_tiles<NT, kSplit>(VB, brow, bcol, nt0, xa, wv, [&](int j, const float (&dl)[4]) {
#pragma unroll
      for (int e = 0; e < 4; ++e) S[j][e] = fold_element(decay, S[j][e], dl[e], decltype(bf16c)::value);
    });
  };
  if (bf16_state) fold_tiles(std::true_type{});
  else fold_tiles(std::false_type{});
}

}  // namespace
}  // namespace parity::cuda::ssd
