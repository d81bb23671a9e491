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

// Cell c's table and x into stage X: x rows < L of this block's columns (zeros past P and for rows ≥ L). Zeros
// where a product would otherwise read stale values: a stale NaN times a zero weight is still NaN inside an mma
// (C and B come as bf16 tiles with their own zeros: issue_tiles below).
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
// A whole cell of the call's own rows on 16-byte aligned rows: its table and x without a branch or a row lookup
// a copy. A warp's copies take consecutive 16-byte units of a row (coalesced), a thread's next copy the same unit
// RS rows down, so its addresses step by a constant.
template <int WP, int T>
__device__ __forceinline__ void issue_table_x_rows(const float* rowp, int ld, int xoff, const float* table, float* X,
                                                   int tid) {
  using St = Stage<WP>;
  constexpr int XR = 4 * WP;  // x units a row
  constexpr int kTabUnits = kTabWords / 4;
  static_assert(T % XR == 0, "whole rows");
#pragma unroll
  for (int j = 0; j < (kTabUnits + T - 1) / T; ++j) {
    const int u = tid + j * T;
    if (u < kTabUnits) cp16(X + St::kTab + 4 * u, table + 4 * u);
  }
  constexpr int RS = T / XR;  // rows a round
  const int r = tid / XR, v = tid % XR;
  const float* sx = rowp + static_cast<std::ptrdiff_t>(r) * ld + xoff + 4 * v;
  const std::ptrdiff_t step = static_cast<std::ptrdiff_t>(RS) * ld;
  float* dx = X + St::kX + r * St::XS + 4 * v;
#pragma unroll
  for (int a = 0; a < (kG + RS - 1) / RS; ++a)
    if (kG % RS == 0 || r + a * RS < kG) cp16(dx + a * RS * St::XS, sx + a * step);
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

// 16 bytes, or 16 zero bytes where !valid (src is then not read).
__device__ __forceinline__ void cp16z(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr(dst)), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
// Cell c's C (and where it folds, B) into V[part][16][kVS] from the band's bf16 rows (ssd_tc_kernels.h), with
// convert()'s zeros: C rows outside j0 .. L-1, B rows from L. Row slot: the call's packed row, or before the
// call's start the ring's (ring_slot: the sequence's first).
template <int T, bool kSplit>
__device__ __forceinline__ void issue_tiles(const uint16_t* rows16, int groups, int grp, int64_t start, int row0,
                                            int ring_slot, const CellIn& c, uint16_t* V, int tid) {
  constexpr int kUnits = kParts<kSplit> * kG * 16;  // 16 units of 8 values a row
  static_assert(kUnits % T == 0, "whole rounds");
#pragma unroll
  for (int j = 0; j < kUnits / T; ++j) {
    const int u = tid + j * T, v = u % 16, r = (u / 16) % kG, part = u / (16 * kG);
    const bool is_b = (part & 1) != 0;
    if (is_b && !c.fold) continue;  // B not copied: its delta is not kept
    const bool use = r < c.L && (is_b || r >= c.j0);
    const int64_t pos = c.cs + r;
    const int slot = pos >= start ? row0 + static_cast<int>(pos - start)
                                  : ring_slot + kSsdTcRingRows + static_cast<int>(pos - start);
    const uint16_t* src = rows16 + ssd_tc_row16_offset(groups, use ? slot : 0, grp, part, kSplit) + 8 * v;
    cp16z(V + part * kTile + r * kVS + 8 * v, src, use);
  }
}

// Which of a cell's tiles the copies into tiles apart take: C and B, or (the relay at 4 cells a round, which
// copies C rounds after B to fit its stages) C only or B only.
enum class TileSet { kCB, kC, kB };
template <bool kSplit, TileSet kWhich>
constexpr int kCopiedParts = kWhich == TileSet::kCB ? kParts<kSplit> : kParts<kSplit> / 2;
// The part (issue_tiles' numbering) of the i-th part a copy takes: C's are the even ones, B's the odd.
template <TileSet kWhich>
__device__ __forceinline__ int copied_part(int i) {
  return kWhich == TileSet::kCB ? i : 2 * i + (kWhich == TileSet::kB ? 1 : 0);
}

// The same copies with C and B in tiles apart (the relay holds C two rounds longer than B): heads at VC and VB,
// rests kRestAt values after each (kWhich: C only leaves VB unused, B only VC). A copy of issue_tiles rather than
// its generalisation: the walk's 4 × 1 blocks spilled with the second pointer.
template <int T, bool kSplit, int kRestAt = 2 * kTile, TileSet kWhich = TileSet::kCB>
__device__ __forceinline__ void issue_tiles_apart(const uint16_t* rows16, int groups, int grp, int64_t start, int row0,
                                            int ring_slot, const CellIn& c, uint16_t* VC, uint16_t* VB, int tid) {
  constexpr int kUnits = kCopiedParts<kSplit, kWhich> * kG * 16;  // 16 units of 8 values a row
  static_assert(kUnits % T == 0, "whole rounds");
#pragma unroll
  for (int j = 0; j < kUnits / T; ++j) {
    const int u = tid + j * T, v = u % 16, r = (u / 16) % kG, part = copied_part<kWhich>(u / (16 * kG));
    const bool is_b = (part & 1) != 0;
    if (is_b && !c.fold) continue;  // B not copied: its delta is not kept
    const bool use = r < c.L && (is_b || r >= c.j0);
    const int64_t pos = c.cs + r;
    const int slot = pos >= start ? row0 + static_cast<int>(pos - start)
                                  : ring_slot + kSsdTcRingRows + static_cast<int>(pos - start);
    const uint16_t* src = rows16 + ssd_tc_row16_offset(groups, use ? slot : 0, grp, part, kSplit) + 8 * v;
    cp16z((is_b ? VB : VC) + (part >> 1) * kRestAt + r * kVS + 8 * v, src, use);
  }
}

// A whole cell of the call's own rows (j0 = 0, 16 rows, all after the call's start) into the tiles apart: every
// row is copied and its slot follows the row before's, so a copy's source steps by a constant (issue_tiles_apart
// takes a 64-bit position, a slot and an offset per 16 bytes: most of a relay delta warp's instructions a round).
// first: the cell's first row's head of C (ssd_tc_row16_offset of its slot, part 0; B only too); the same bytes
// land where issue_tiles_apart puts them. kGroups > 0: the model's groups, known when compiled (then `groups` is
// unused), so each copy's source is `first` plus a constant a lane's copies address with one register pair and
// immediate offsets; 0: `groups` at run time.
template <int T, bool kSplit, int kRestAt = 2 * kTile, TileSet kWhich = TileSet::kCB, int kGroups = 0>
__device__ __forceinline__ void issue_tiles_rows(const uint16_t* first, int groups, uint16_t* VC, uint16_t* VB,
                                                 int tid) {
  constexpr int kUnits = kCopiedParts<kSplit, kWhich> * kG * 16;  // 16 units of 8 values a row
  static_assert(kUnits % T == 0 && T % 16 == 0, "whole rounds of whole rows");
  constexpr int RS = T / 16;  // rows a round
  const std::ptrdiff_t slot_step = static_cast<std::ptrdiff_t>(kGroups > 0 ? kGroups : groups) * kParts<kSplit> * 128;
  const int v = tid % 16, r0 = tid / 16;
  const uint16_t* const src0 = first + r0 * slot_step + 8 * v;
#pragma unroll
  for (int j = 0; j < kUnits / T; ++j) {
    constexpr int kPerPart = kG / RS;
    const int part = copied_part<kWhich>(j / kPerPart), r = r0 + RS * (j % kPerPart);
    const bool is_b = (part & 1) != 0;
    cp16z((is_b ? VB : VC) + (part >> 1) * kRestAt + r * kVS + 8 * v,
          src0 + (RS * (j % kPerPart)) * slot_step + part * 128, true);
  }
}
}  // namespace
}  // namespace parity::cuda::ssd
