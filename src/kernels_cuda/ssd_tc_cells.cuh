#pragma once
// A cell of the tensor-core walk in shared memory (ssd_tc_walk.cu): its coefficient table's layout (formed by
// ssd_tc_tables.cu), the copies of a cell's table, x, C and B, and C and B converted to the bf16 tiles the
// products read (also the one-row decode's, ssd_tc_decode.cu). Index arithmetic and rounding to bf16 only:
// which thread copies or converts what changes no value.
#include <cstddef>
#include <cstdint>

#include "kernels_cuda/ssd_cell_walk.cuh"
#include "kernels_cuda/ssd_copy_lanes.cuh"
#include "kernels_cuda/ssd_device.cuh"
#include "kernels_cuda/ssd_tc_kernels.h"
#include "kernels_cuda/ssd_tc_steps.cuh"

namespace parity::cuda::ssd {
namespace {

// A cell's table (32-bit words): the coef fragment's heads [32 lanes][4] | its rests [32][4] | w [16] |
// exp(cum) [16] | decay (+3).
constexpr int kTabWords = kSsdTcTableWords;
constexpr int kTabHi = 0, kTabLo = 128, kTabW = 256, kTabE = 272, kTabDecay = 288;
static_assert(kTabWords == kTabDecay + 4 && kTabWords % 4 == 0, "16-byte copies of a table");

constexpr int kRow = kN + 4;  // an fp32 C or B row in a stage (floats)

// A cell in shared memory: its table and x in a stage (floats: table | x [16][XS]), its fp32 C and B in a CB
// buffer (floats: C [16][kRow] | B [16][kRow]).
template <int W>
struct Stage {
  static constexpr int XS = 16 * W + 4;  // x row: the fragment reads x[2q..][g] in 32 distinct banks
  static constexpr int kTab = 0, kX = kTabWords;
  static constexpr int kFloats = kX + kG * XS;
  static_assert(kX % 4 == 0 && kFloats % 4 == 0, "16-byte aligned rows");
};
constexpr int kC = 0, kB = kG * kRow, kCBFloats = 2 * kG * kRow;

// Cell c's table and inputs into stage X: x rows < L of this block's columns (zeros past P and for rows ≥ L),
// C rows j0 .. L-1 (zeros elsewhere), and when the cell folds B rows < L (zeros after). Zeros where a product
// would otherwise read stale values: a stale NaN times a zero weight is still NaN inside an mma.
// The table and x part of it (the relay copies C and B as tiles formed before it: ssd_tc_tiles.cu).
template <int WP, int T>
__device__ void issue_table_x(const WalkCtx& b, const CellIn& c, const float* table, float* X, int tid) {
  using St = Stage<WP>;
  for (int u = tid; u < kTabWords / 4; u += T) cp16(X + St::kTab + 4 * u, table + 4 * u);
  const int xend = b.sh.P - b.p0;
  for (int u = tid; u < kG * 4 * WP; u += T) {
    const int i = u / (4 * WP), v = u % (4 * WP);
    float* dst = X + St::kX + i * St::XS + 4 * v;
    if (i < c.L) copy4(dst, b.src.x(b.h, c.cs + i) + b.p0, 4 * v, xend);
    else zero4(dst);
  }
}
template <int WP, int T>
__device__ void issue(const WalkCtx& b, const CellIn& c, const float* table, float* X, float* CB, int tid) {
  const int L = c.L, j0 = c.j0;
  issue_table_x<WP, T>(b, c, table, X, tid);
  for (int u = tid; u < kG * (kN / 4); u += T) {
    const int r = u / (kN / 4), v = u % (kN / 4);
    float* dC = CB + kC + r * kRow + 4 * v;
    if (r >= j0 && r < L) copy4(dC, b.src.C(b.grp, c.cs + r), 4 * v, kN);
    else zero4(dC);
    if (c.fold) {
      float* dB = CB + kB + r * kRow + 4 * v;
      if (r < L) copy4(dB, b.src.B(b.grp, c.cs + r), 4 * v, kN);  // ring rows first where the call starts inside
      else zero4(dB);
    }
  }
}

// A whole cell of the call's own rows (no ring rows, no rows past the call) on 16-byte aligned rows: a
// warp's copies take consecutive 16-byte units of a row (coalesced), a thread's next copy the same unit
// RS rows down, so its addresses step by a constant: no per-copy branch, row lookup or index arithmetic.
template <int WP, int T>
__device__ __forceinline__ void issue_rows(const float* rowp, int ld, int xoff, int coff, int boff, bool fold,
                                           const float* table, float* X, float* CB, int tid) {
  using St = Stage<WP>;
  constexpr int CR = kN / 4;                 // C (B) units a row
  constexpr int XR = 4 * WP;                 // x units a row
  constexpr int kTabUnits = kTabWords / 4;
  static_assert(T % CR == 0 && T % XR == 0 && kG % (T / CR) == 0, "whole rows");
#pragma unroll
  for (int j = 0; j < (kTabUnits + T - 1) / T; ++j) {
    const int u = tid + j * T;
    if (u < kTabUnits) cp16(X + St::kTab + 4 * u, table + 4 * u);
  }
  {
    constexpr int RS = T / XR;  // rows a round
    const int r = tid / XR, v = tid % XR;
    const float* sx = rowp + static_cast<std::ptrdiff_t>(r) * ld + xoff + 4 * v;
    const std::ptrdiff_t step = static_cast<std::ptrdiff_t>(RS) * ld;
    float* dx = X + St::kX + r * St::XS + 4 * v;
#pragma unroll
    for (int a = 0; a < (kG + RS - 1) / RS; ++a)
      if (kG % RS == 0 || r + a * RS < kG) cp16(dx + a * RS * St::XS, sx + a * step);
  }
  constexpr int RS = T / CR;
  const int r = tid / CR, v = tid % CR;
  const float* sr = rowp + static_cast<std::ptrdiff_t>(r) * ld + 4 * v;
  const std::ptrdiff_t step = static_cast<std::ptrdiff_t>(RS) * ld;
  float* dc = CB + kC + r * kRow + 4 * v;
#pragma unroll
  for (int a = 0; a < kG / RS; ++a) cp16(dc + a * RS * kRow, sr + coff + a * step);
  if (fold) {
#pragma unroll
    for (int a = 0; a < kG / RS; ++a) cp16(dc + (kB - kC) + a * RS * kRow, sr + boff + a * step);
  }
}


// The lane's coef fragment (the intra product's m16k16 operand) from a cell's table in a stage: the table pass
// stored it in fragment order, so a lane reads its four words (and their rests) as they are.
template <bool kSplit>
__device__ __forceinline__ Frag4<kSplit> coef_fragment(const float* F, int lane) {
  Frag4<kSplit> fa;
  const uint4 hv = *reinterpret_cast<const uint4*>(F + kTabHi + 4 * lane);
  fa.hi[0] = hv.x, fa.hi[1] = hv.y, fa.hi[2] = hv.z, fa.hi[3] = hv.w;
  if constexpr (kSplit) {
    const uint4 lv = *reinterpret_cast<const uint4*>(F + kTabLo + 4 * lane);
    fa.lo[0] = lv.x, fa.lo[1] = lv.y, fa.lo[2] = lv.z, fa.lo[3] = lv.w;
  }
  return fa;
}

// A cell's C and B as bf16 tiles for ldmatrix (the walk and the one-row decode convert them the same way).
constexpr int kVS = kN + 8;   // a converted row (bf16): ldmatrix's row addresses, 272 bytes apart, hit distinct banks
constexpr int kTile = kG * kVS;
// Converted tiles a parity: C head, B head (and C rest, B rest for split products).
template <bool kSplit>
constexpr int kParts = kSplit ? 4 : 2;
// A landed stage's C (and, where the cell folds, B) as bf16 tiles V[part][16][kVS]: parts 0 C head,
// 1 B head, 2 C rest, 3 B rest. pack / pack_rest (ssd_tc_steps.cuh).
template <bool kSplit>
__device__ __forceinline__ void convert_unit(const float* src, uint16_t* hi, uint16_t* lo) {
  const float4 f = *reinterpret_cast<const float4*>(src);
  *reinterpret_cast<uint2*>(hi) = make_uint2(pack(f.x, f.y), pack(f.z, f.w));
  if constexpr (kSplit) *reinterpret_cast<uint2*>(lo) = make_uint2(pack_rest(f.x, f.y), pack_rest(f.z, f.w));
}
// T threads convert, tid the caller's place among them (a block's, or a warp's lane: the relay's cell warps).
template <int T, bool kSplit>
__device__ __forceinline__ void convert(const float* CB, bool fold, uint16_t* V, int tid) {
  constexpr int kUnits = kG * (kN / 4);
  static_assert(kUnits % T == 0, "whole rounds");
#pragma unroll
  for (int j = 0; j < kUnits / T; ++j) {
    const int u = tid + j * T, r = u / (kN / 4), v = u % (kN / 4);
    convert_unit<kSplit>(CB + kC + r * kRow + 4 * v, V + r * kVS + 4 * v, V + 2 * kTile + r * kVS + 4 * v);
  }
  if (!fold) return;  // B not copied: its delta is not kept
#pragma unroll
  for (int j = 0; j < kUnits / T; ++j) {
    const int u = tid + j * T, r = u / (kN / 4), v = u % (kN / 4);
    convert_unit<kSplit>(CB + kB + r * kRow + 4 * v, V + kTile + r * kVS + 4 * v, V + 3 * kTile + r * kVS + 4 * v);
  }
}

}  // namespace
}  // namespace parity::cuda::ssd
