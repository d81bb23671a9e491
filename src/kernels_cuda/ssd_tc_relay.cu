// The relay: the tensor-core walk (ssd_tc_walk.cu) with a call's cells formed in parallel and only the fold
// chained, for passes of few sequences, where the walk's blocks are too few to hide a cell's latency.
//
// Only S depends on the cells before: a cell's delta and its intra product depend on its own rows, and its
// outputs on its rows and S_start. So one block per (sequence, head, 16 columns of p) has W delta warps, W
// output warps and KC chain warps. Rounds of W cells, one block barrier a round; cell k of round r = k / W:
// - round r: its delta warp (k % W) forms the delta of the cell copied A rounds before (by its output warp with
//   bf16 products, by itself with split) with delta_tiles, the fold's own mma steps, and leaves it in shared
//   memory in the state's register layout;
// - round r + 1: the chain warps, which hold S in the walk's KS = 1 layout (each a KC-th of n), publish S_start
//   of the cell (the state's words of C·Sᵀ as the walk packs them, state_fragment) and fold:
//   S ← fold_element(decay, S, delta);
// - round r + 2: its output warp forms the intra product, C·Sᵀ from the published words (inter_quarters) and
//   the outputs (finish).
// The chain's serial work a cell is the fold and the packing of S; the walk's also held the copies' wait, the
// delta, C·Sᵀ and the outputs. Each value comes from the walk's own functions on the same operands, so the
// relay gives the walk's bits (CudaSsdTc.TheRelayHasTheWalksBits); only where and when a warp forms them differs.
// The blocks also write the pass's replay ring (ssd_ring.cuh), so a relay pass has no ring launch.
// History (H100, 1 × 2048, bf16 products, device µs of the whole pass): session 47's first relay copied fp32 C
// and B and converted them in each cell warp (it lost to the walk); its second took bf16 tiles from a pass of
// their own (146); session 48's took the band launch's bf16 rows (120-126), with its one chain warp also forming
// C·Sᵀ and the outputs, 0.93 µs a cell. Session 49 (this layout): 110 at W = 3 beside session 48's 120 in the
// same call; at W = 2 131, so the gain is the third cell a round, not the chain's shorter work, and 2 or 4
// chain warps change nothing (110 / 112): the chain did not bound a round. Session 50: whole cells copied from
// sources that step by a constant (the general copies' 64-bit slot arithmetic was most of a delta warp's
// instructions) and two chain warps: 84 against 110 in the same call. ncu then: L2 45 % busy, a scheduler
// issuing in 24 % of cycles; the delta warps busy 92 % of a round (their products 44 %, each ldmatrix after the
// store before it; the copies' issue 30 %; waiting for copies 8 %), the chain warps 76 %, the output warps 50 %.
// Session 51: B's fragments read before the first product, the copies with the output warps (bf16 products) and
// the band's and table pass's loads issued together: 73 against 83 in the same call (split 104 against 127). ncu
// then had the output warps busy 95 % of a round, the chain 88 %, the delta warps 45 %; giving the delta warps
// B's copies back balanced them (89 / 82 / 66 %) but not the time (74), and four chain warps gained nothing.
//
// Session 53: W = 4 (C later). On an H100 (1 × 2048, bf16) it lost: 77.9-88.7 µs against W = 3's 72.3-79.7 with
// 1-4 chain warps, copies one round ahead instead of two; its bits and racecheck passed. Four cells a round did not
// fit a block:
// with bf16 products, A = 1, 60480 floats against 58112. A cell's C is read only at its outputs, two rounds after
// its delta, so it is copied two rounds after its table, x and B (in the same group as a later cell's), into C
// stages of its own held A + 1 rounds: 51776 floats (207104 B) at A = 1 (A = 2 would take 62928). W = 3 keeps
// its 53724 (214896 B) at A = 2.
//
// Shared memory (floats): cell stages [A + 3 rounds][W] (table | x | C tiles: copied A rounds ahead, held until
// the outputs) | B stages [A + 1][W] (until the delta) | with C later, C stages [A + 1][W] and no C in the cell
// stages | deltas [2 rounds][W][16 n-tiles][32 lanes][4] | S_start words [2][W][8 k-steps][32 lanes][4] (and
// their rests).
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/programmatic_launch.cuh"
#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_cell_walk.cuh"
#include "kernels_cuda/ssd_copy_lanes.cuh"
#include "kernels_cuda/ssd_device.cuh"
#include "kernels_cuda/ssd_ring.cuh"
#include "kernels_cuda/ssd_tc.h"
#include "kernels_cuda/ssd_tc_cells.cuh"
#include "kernels_cuda/ssd_tc_kernels.h"
#include "kernels_cuda/ssd_tc_products.cuh"
#include "kernels_cuda/ssd_tc_steps.cuh"

namespace parity::cuda {
namespace ssd {
namespace {

constexpr int kNT = kN / 8;  // the state's n-tiles of 8
constexpr int kSmemMax = 232448 / 4;  // an H100's (and H200's) opt-in shared memory a block, in floats

// Four cells a round with bf16 products copy C later (see the kernel): C apart from the cell set, in stages of
// its own held A + 1 rounds rather than A + 3.
template <int W, bool kSplit>
constexpr bool kCLater = W == 4 && !kSplit;

template <int W, bool kSplit, int A>
struct RelayLayoutA {
  static constexpr bool kCL = kCLater<W, kSplit>;
  static constexpr int kCTiles = (kParts<kSplit> / 2) * kTile / 2;  // C's bf16 tiles (head, rest), in floats
  static constexpr int kCellSet = Stage<1>::kFloats + (kCL ? 0 : kCTiles), kBSet = kCTiles;
  static constexpr int kCellStages = A + 3, kBStages = A + 1, kCStages = A + 1;
  static constexpr int kDelta = kNT * 32 * 4, kWords = (kSplit ? 2 : 1) * (kNT / 2) * 32 * 4;
  static constexpr int kBs = kCellStages * W * kCellSet;
  static constexpr int kCs = kBs + kBStages * W * kBSet;
  static constexpr int kDeltas = kCs + (kCL ? kCStages * W * kCTiles : 0);
  static constexpr int kPubs = kDeltas + 2 * W * kDelta;
  static constexpr int kFloats = kPubs + 2 * W * kWords;
  static_assert(kTile % 2 == 0 && kCellSet % 4 == 0 && kVS % 8 == 0, "16-byte aligned stages and tile rows");
};
// Copies two rounds ahead where they fit, else one (split products; four cells a round).
template <int W, bool kSplit>
constexpr int kAhead = RelayLayoutA<W, kSplit, 2>::kFloats <= kSmemMax ? 2 : 1;
template <int W, bool kSplit>
using RelayLayout = RelayLayoutA<W, kSplit, kAhead<W, kSplit>>;
template <int W, bool kSplit>
constexpr bool kFits = RelayLayout<W, kSplit>::kFloats <= kSmemMax;

template <int T>
__device__ __noinline__ void write_ring_call(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc,
                                             int ld, const float* dt, const SsdState& st, int seq, int h, int c0,
                                             int cols, bool whole, int tid) {
  write_ring<T>(sh, g, p, xbc, ld, dt, st, seq, h, c0, cols, whole, tid);
}

// kWait: launched programmatically after the table pass (ssd_tc.h's SsdTcWay::programmatic). Before its wait a warp
// reads only the pass's metadata and (a chain warp) the state, which no kernel of the pass writes before this one;
// the tables, the bf16 rows and the replay ring (which the band and the table pass read) come after it.
// kLean (SsdTcWay::lean, one group, W ≤ 3): fewer instructions a round for every role, the same values in the same
// order. Whole cells' tile copies step by a constant known when compiled (issue_tiles_rows' kGroups = 1), so a
// lane's copies take immediate offsets from one register pair; each warp finds a cell's buffers from the round and
// slot it holds, where the accessors divide the cell index by W again; the chain reads a cell's deltas without a
// select of zeros (a cell that does not fold leaves them unused). Session 54 (H100, ncu, 1 × 2048 bf16): 12.5 M
// instructions against 13.8 M, the same 68.3 µs and active cycles. A warp issues once per 6.3 cycles, stalled
// mostly at the round's barrier (1.5 of them) and on fixed-latency dependencies (1.4), with two warps a scheduler:
// the relay is bound by its latency, not by its issue.
template <int W, int KC, bool kSplit, bool kWait, bool kLean>
__global__ void __launch_bounds__(32 * (2 * W + KC), 1)
    relay_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* Dskip,
                 SsdState st, const float* tables, const uint16_t* rows16, float* y) {
  using Lay = RelayLayout<W, kSplit>;
  using St = Stage<1>;
  constexpr int A = kAhead<W, kSplit>;
  constexpr bool kCL = kCLater<W, kSplit>;
  const int seq = blockIdx.x, h = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t start = p.start[seq];
  const int t0 = p.task0[seq], K = p.task0[seq + 1] - t0;
  constexpr int kThreads = 32 * (2 * W + KC);
  // This block's part of the replay ring (x of its columns; dt and B at the head's first block), written once the
  // block has read the old ring (x before the call's start, for its first cell): the relay's passes take no ring
  // launch after them (8-10 µs at 1 × 2048 on an H100, session 48). Only this block reads those x columns of the
  // ring in the pass; the band and the table pass, before it, read the rest.
  auto ring = [&](int tid, auto threads) {
    write_ring<decltype(threads)::value>(sh, g, p, xbc, ld, dt, st, seq, h, static_cast<int>(blockIdx.z) * 16, 16,
                                         blockIdx.z == 0, tid);
  };
  auto wait_tables = [] {
    if constexpr (kWait) wait_for_prior_kernel();
  };
  // The same where the block has no cell to walk, as a call: inlined there too, it spilled the chain's registers.
  auto ring_now = [&] {
    wait_tables();
    write_ring_call<kThreads>(sh, g, p, xbc, ld, dt, st, seq, h, static_cast<int>(blockIdx.z) * 16, 16,
                              blockIdx.z == 0, threadIdx.x);
  };
  if (K <= 0 || uses_ssu(g, start, p.n[seq])) return ring_now();
  const int P = sh.P, N = sh.N;
  const WalkCtx b{sh, g, source_of(sh, g, p, seq, xbc, ld, dt, st), nullptr, h, h / sh.heads_per_group(),
                  static_cast<int>(blockIdx.z) * 16};
  const int64_t call_end = start + p.n[seq];
  const CellIn first = first_cell(cell_task(g, p, t0, h, sh.H));
  if (!first.live) return ring_now();
  // The cells the walk visits: the first and, where it folds, those after it that the call reaches (at most K).
  int cells = 1;
  if (first.fold && call_end > first.ce) {
    const int64_t after = (call_end - first.ce + g.cell - 1) / g.cell;
    cells = static_cast<int>(1 + (after < K - 1 ? after : K - 1));
  }
  // Cell k of the call (next_cell's arithmetic from the cell before it, without the walk's chain of them).
  auto cell_at = [&](int k) {
    if (k == 0) return first;
    CellIn before = first;
    before.ce = first.ce + static_cast<int64_t>(k - 1) * g.cell;
    return next_cell(before, call_end, g.cell, g.exact);
  };
  auto table = [&](int k) { return tables + (static_cast<std::size_t>(t0 + k) * sh.H + h) * kTabWords; };

  extern __shared__ __align__(16) float smem[];
  // Cell k's buffers (its round k / W, its warp k % W).
  auto cell_set = [&](int k) { return smem + ((k / W) % Lay::kCellStages * W + k % W) * Lay::kCellSet; };
  auto c_tiles = [&](int k) {
    if constexpr (kCL)
      return reinterpret_cast<uint16_t*>(smem + Lay::kCs + ((k / W) % Lay::kCStages * W + k % W) * Lay::kCTiles);
    else return reinterpret_cast<uint16_t*>(cell_set(k) + St::kFloats);
  };
  auto b_tiles = [&](int k) {
    return reinterpret_cast<uint16_t*>(smem + Lay::kBs + ((k / W) % Lay::kBStages * W + k % W) * Lay::kBSet);
  };
  auto deltas = [&](int k) { return smem + Lay::kDeltas + ((k / W) % 2 * W + k % W) * Lay::kDelta; };
  auto words = [&](int k) {
    return reinterpret_cast<uint32_t*>(smem + Lay::kPubs + ((k / W) % 2 * W + k % W) * Lay::kWords);
  };
  // The same buffers of cell k = rd·W + slot, from its round and slot (kLean); else from k, as above.
  static_assert(!kLean || !kCL, "the lean relay keeps C with its cell (W ≤ 3)");
  auto set_at = [&](int k, int rd, int slot) {
    if constexpr (kLean) return smem + (rd % Lay::kCellStages * W + slot) * Lay::kCellSet;
    else return cell_set(k);
  };
  auto c_at = [&](int k, int rd, int slot) {
    if constexpr (kLean) return reinterpret_cast<uint16_t*>(set_at(k, rd, slot) + St::kFloats);
    else return c_tiles(k);
  };
  auto b_at = [&](int k, int rd, int slot) {
    if constexpr (kLean)
      return reinterpret_cast<uint16_t*>(smem + Lay::kBs + (rd % Lay::kBStages * W + slot) * Lay::kBSet);
    else return b_tiles(k);
  };
  auto deltas_at = [&](int k, int rd, int slot) {
    if constexpr (kLean) return smem + Lay::kDeltas + (rd % 2 * W + slot) * Lay::kDelta;
    else return deltas(k);
  };
  auto words_at = [&](int k, int rd, int slot) {
    if constexpr (kLean) return reinterpret_cast<uint32_t*>(smem + Lay::kPubs + (rd % 2 * W + slot) * Lay::kWords);
    else return words(k);
  };
  constexpr int kRestWords = (kNT / 2) * 32 * 4;
  const int gi = lane / 4, q = lane % 4;
  // Lane addresses of ldmatrix (as the walk's): C's m16k16 operand, B's transposed k16n8 operands.
  const int crow = (lane & 7) + 8 * ((lane >> 3) & 1), ccol = 8 * (lane >> 4);
  const int rounds = (cells + W - 1) / W + 2;  // the outputs run two rounds behind the deltas
  const bool bf16 = st.state_f32 == nullptr;

  // x at the rows and columns of the lane's fragments (xa[a][pt]: i = 2q + (a & 1) + 8·(a >> 1)).
  auto load_xa = [&](const float* xs, float (&xa)[4][2]) {
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int pt = 0; pt < 2; ++pt) xa[a][pt] = xs[(2 * q + (a & 1) + 8 * (a >> 1)) * St::XS + gi + 8 * pt];
  };

  // A cell's copies (table, x, C and B tiles), issued A rounds before its delta's round: by its output warp with
  // bf16 products, by its delta warp with split ones. The delta warps were busy 92 % of a round with the copies'
  // issue 30 % of it, the output warps 50 % (session 50, ncu, bf16); moving the copies made a bf16 pass 0.97× as
  // long and a split one 1.06× (session 51, H100, 1 × 2048: split deltas take twice the products).
  constexpr bool kOutputCopies = !kSplit;
  const int ring_slot = p.num_rows + kSsdTcRingRows * seq;
  // Whole cells of the call's own rows (all but the call's first and last) take the copies whose sources step
  // by a constant (issue_table_x_rows, issue_tiles_rows); the others the general ones.
  const bool aligned = (reinterpret_cast<std::uintptr_t>(xbc) & 15) == 0 && ld % 4 == 0;
  const int xoff = h * P + b.p0;
  // With C later, issue_cell leaves C to issue_c.
  constexpr TileSet kCellTiles = kCL ? TileSet::kB : TileSet::kCB;
  auto issue_cell = [&](int k) {
    const CellIn x = cell_at(k);
    if (x.j0 == 0 && x.L == kG && x.cs >= start) {
      const int slot0 = b.src.row0 + static_cast<int>(x.cs - start);
      if (aligned) issue_table_x_rows<1, 32>(xbc + static_cast<std::size_t>(slot0) * ld, ld, xoff, table(k),
                                             cell_set(k), lane);
      else issue_table_x<1, 32>(b, x, table(k), cell_set(k), lane);
      issue_tiles_rows<32, kSplit, kTile, kCellTiles>(
          rows16 + ssd_tc_row16_offset(sh.groups, slot0, b.grp, 0, kSplit), sh.groups, kCL ? nullptr : c_tiles(k),
          b_tiles(k), lane);
      return;
    }
    issue_table_x<1, 32>(b, x, table(k), cell_set(k), lane);
    issue_tiles_apart<32, kSplit, kTile, kCellTiles>(rows16, sh.groups, b.grp, start, b.src.row0, ring_slot, x,
                                                     kCL ? nullptr : c_tiles(k), b_tiles(k), lane);
  };
  // Cell rd·W + slot's copies: issue_cell's, the lean way (one group, so its row offsets need no group index).
  auto issue_cell_at = [&](int rd, int slot) {
    const int k = rd * W + slot;
    if constexpr (!kLean) {
      issue_cell(k);
    } else {
      const CellIn x = cell_at(k);
      float* const X = set_at(k, rd, slot);
      if (x.j0 == 0 && x.L == kG && x.cs >= start) {
        const int slot0 = b.src.row0 + static_cast<int>(x.cs - start);
        if (aligned)
          issue_table_x_rows<1, 32>(xbc + static_cast<std::size_t>(slot0) * ld, ld, xoff, table(k), X, lane);
        else issue_table_x<1, 32>(b, x, table(k), X, lane);
        issue_tiles_rows<32, kSplit, kTile, TileSet::kCB, 1>(rows16 + ssd_tc_row16_offset(1, slot0, 0, 0, kSplit),
                                                             1, c_at(k, rd, slot), b_at(k, rd, slot), lane);
        return;
      }
      issue_table_x<1, 32>(b, x, table(k), X, lane);
      issue_tiles_apart<32, kSplit, kTile, TileSet::kCB>(rows16, 1, 0, start, b.src.row0, ring_slot, x,
                                                         c_at(k, rd, slot), b_at(k, rd, slot), lane);
    }
  };
  // C later (four cells a round, bf16 products: C held from its copy to the outputs made the stages too large for a
  // block). The group an output warp commits at round r holds cell (r + A)·W + slot's table, x and B and cell
  // (r + A − 2)·W + slot's C: cell k's C is issued at round k / W + 2 − A and lands by the cp_async_wait<A − 1>
  // before round k / W + 2's barrier, the round its outputs read it, as the other copies land before their
  // delta's round. Its C stage's next cell (A + 1 rounds later) is issued at round k / W + 3, after that round's
  // barrier, so after cell k's outputs read it.
  auto issue_c = [&](int k) {
    const CellIn x = cell_at(k);
    if (x.j0 == 0 && x.L == kG && x.cs >= start) {
      const int slot0 = b.src.row0 + static_cast<int>(x.cs - start);
      issue_tiles_rows<32, kSplit, kTile, TileSet::kC>(
          rows16 + ssd_tc_row16_offset(sh.groups, slot0, b.grp, 0, kSplit), sh.groups, c_tiles(k), nullptr, lane);
      return;
    }
    issue_tiles_apart<32, kSplit, kTile, TileSet::kC>(rows16, sh.groups, b.grp, start, b.src.row0, ring_slot, x,
                                                      c_tiles(k), nullptr, lane);
  };
  // The C of round r's group of a slot's copies (r < 0: those issued before the first round).
  auto issue_c_of = [&](int r, int slot) {
    const int kc = (r + A - 2) * W + slot;
    if (r + A >= 2 && kc < cells) issue_c(kc);
  };
  // The first A rounds' copies of a warp's slot, before its first round.
  auto issue_ahead = [&](int slot) {
    for (int a = 0; a < A; ++a) {
      if (a * W + slot < cells) issue_cell_at(a, slot);
      if constexpr (kCL) issue_c_of(a - A, slot);
      commit();
    }
  };
  if (warp < W) {  // a delta warp: in round r, the delta of cell k = r·W + warp, whose copies landed before it
    wait_tables();
    if constexpr (!kOutputCopies) issue_ahead(warp);
    for (int r = 0; r < rounds; ++r) {
      // Round r − 1's deltas read; with the output warps' copies, this round's landed (their warp waited).
      __syncthreads();
      const int k = r * W + warp;
      if constexpr (!kOutputCopies) {  // the slots copied into now (rounds r − 3 and r − 1's) were read
        if (k + A * W < cells) {
          if constexpr (kLean) issue_cell_at(r + A, warp);
          else issue_cell(k + A * W);
        }
        commit();
        ptx::cp_async_wait<A>();  // this round's copies (issued A rounds ago)
        __syncwarp();
      }
      if (k >= cells || !cell_at(k).fold) continue;
      const float* X = set_at(k, r, warp);
      float xa[4][2], wv[4];
      load_xa(X + St::kX, xa);
#pragma unroll
      for (int a = 0; a < 4; ++a) wv[a] = X[St::kTab + kTabW + 2 * q + (a & 1) + 8 * (a >> 1)];
      float* const D = deltas_at(k, r, warp);
      delta_tiles<kNT, kSplit, kTile, true>(b_at(k, r, warp), crow, ccol, 0, xa, wv, [&](int j, const float (&dl)[4]) {
        *reinterpret_cast<float4*>(D + (j * 32 + lane) * 4) = make_float4(dl[0], dl[1], dl[2], dl[3]);
      });
    }
    return;
  }

  if (warp < 2 * W) {  // an output warp: in round r, cell (r − 2)·W + warp − W, whose S_start the chain published
    // With bf16 products it also copies its slot's cells, A rounds ahead of their deltas; it waits for round r's
    // before round r's barrier, which makes them visible to the delta warp.
    const int slot = warp - W;
    wait_tables();
    if constexpr (kOutputCopies) issue_ahead(slot);
    const float Dh = Dskip[h];
    for (int r = 0; r < rounds; ++r) {
      if constexpr (kOutputCopies) ptx::cp_async_wait<A - 1>();  // round r's copies (issued A rounds ago) landed
      // Round r − 1's S_starts published; the slots copied into now (rounds r − 3 and r − 1's cells') read.
      __syncthreads();
      if constexpr (kOutputCopies) {
        if ((r + A) * W + slot < cells) issue_cell_at(r + A, slot);
        if constexpr (kCL) issue_c_of(r, slot);
        commit();
      }
      const int ko = (r - 2) * W + slot;
      if (ko < 0 || ko >= cells) continue;
      const CellIn c = cell_at(ko);
      const float* X = set_at(ko, r - 2, slot);
      const float* F = X + St::kTab;
      const float* xs = X + St::kX;
      float xa[4][2];
      load_xa(xs, xa);
      Pending pd;
      intra_product<kSplit>(coef_fragment<kSplit>(F, lane), xa, pd.intra);
      const uint32_t* Wd = words_at(ko, r - 2, slot);
      auto inter = [&](auto rest) {
        constexpr bool kRest = decltype(rest)::value;
        inter_quarters<kNT, kSplit, kRest, kTile>(c_at(ko, r - 2, slot), crow, ccol, 0, [&](int jl, int pt) {
          Frag2<kSplit> b2;
          const uint2 v = *reinterpret_cast<const uint2*>(Wd + (jl * 32 + lane) * 4 + 2 * pt);
          b2.hi[0] = v.x, b2.hi[1] = v.y;
          if constexpr (kRest) {
            const uint2 u = *reinterpret_cast<const uint2*>(Wd + kRestWords + (jl * 32 + lane) * 4 + 2 * pt);
            b2.lo[0] = u.x, b2.lo[1] = u.y;
          }
          return b2;
        }, pd.part);
      };
      if (kSplit && !bf16) inter(std::true_type{});
      else inter(std::false_type{});
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int t = gi + 8 * hr;
        const bool out = t >= c.j0 && t < c.L;
        pd.row[hr] = out ? b.src.row0 + static_cast<int>(c.cs + t - b.src.start) : -1;
        pd.e[hr] = F[kTabE + t];
#pragma unroll
        for (int pt = 0; pt < 2; ++pt) pd.x[hr][pt] = lds2(xs + t * St::XS + 8 * pt + 2 * q);
      }
      finish<1, 1>(pd, nullptr, 0, lane, sh, h, b.p0, Dh, y);
    }
    // Every barrier passed: the copies of the old ring landed (cell 0's, waited before round 0's barrier, its C
    // with C later before round 2's).
    if constexpr (kOutputCopies) wait_all();
    ring((warp - W) * 32 + lane, std::integral_constant<int, 32 * W>{});
    return;
  }

  // Chain warp c: S[j][e] at p = p0 + gi + 8·(e / 2), n = 8·(nt0 + j) + 2q + e % 2 (the walk's layout, KS = 1,
  // over n-tiles nt0 .. nt0 + CT − 1). The fold is elementwise and the words are per n-tile pair, so the chain
  // warps share nothing but the round's barrier.
  constexpr int CT = kNT / KC;
  const int nt0 = (warp - 2 * W) * CT;
  const std::size_t sbase = (static_cast<std::size_t>(b.src.slot) * sh.H + h) * P * N;
  float S[CT][4];
  load_state<CT>(st, sbase, b.p0 + gi, N, nt0, q, S);
  // The chain reads only what the other warps put in shared memory after their waits, but waits too (by now a
  // formality), so that no warp of the block reaches global memory unordered with the table pass.
  wait_tables();
  // S_start's words of C·Sᵀ (state_fragment: the walk's packing), for cell k's output warp next round.
  auto publish = [&](int k, int rd, int slot, auto rest) {
    constexpr bool kRest = decltype(rest)::value;
    uint32_t* const Wd = words_at(k, rd, slot) + (nt0 / 2) * 32 * 4;
#pragma unroll
    for (int jl = 0; jl < CT / 2; ++jl) {
      const Frag2<kSplit> b0 = state_fragment<kSplit, kRest>(S, jl, 0), b1 = state_fragment<kSplit, kRest>(S, jl, 1);
      *reinterpret_cast<uint4*>(Wd + (jl * 32 + lane) * 4) = make_uint4(b0.hi[0], b0.hi[1], b1.hi[0], b1.hi[1]);
      if constexpr (kRest)
        *reinterpret_cast<uint4*>(Wd + kRestWords + (jl * 32 + lane) * 4) =
            make_uint4(b0.lo[0], b0.lo[1], b1.lo[0], b1.lo[1]);
    }
  };
  bool folded = false;
  for (int r = 0; r < rounds; ++r) {
    __syncthreads();
    for (int i = 0; r > 0 && i < W; ++i) {
      const int k = (r - 1) * W + i;
      if (k >= cells) break;
      // The cell's delta and decay are read before the words are stored: ptxas keeps a shared load after a
      // shared store it cannot tell apart, so read after them, the fold waited for both (session 50, ncu).
      const CellIn c = cell_at(k);
      const float decay = set_at(k, r - 1, i)[St::kTab + kTabDecay];
      const float* D = deltas_at(k, r - 1, i) + nt0 * 32 * 4;
      float4 dv[CT];
      // Nine warps are checked for registers as twelve (a block's warps round up to the SM's four partitions):
      // 168 a thread, where one chain warp's S, deltas and words took 177-179 (W ≤ 3) and spilled 8 bytes. So at
      // W = 4 with one chain warp half of the deltas are read after the words (ptxas, sm_90a: 165, no spill).
      constexpr int kEarly = W == 4 && KC == 1 ? CT / 2 : CT;
      if constexpr (kLean) {
#pragma unroll
        for (int j = 0; j < kEarly; ++j) dv[j] = *reinterpret_cast<const float4*>(D + (j * 32 + lane) * 4);
      } else {
#pragma unroll
        for (int j = 0; j < kEarly; ++j)
          dv[j] = c.fold ? *reinterpret_cast<const float4*>(D + (j * 32 + lane) * 4) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      if (kSplit && !bf16) publish(k, r - 1, i, std::true_type{});
      else publish(k, r - 1, i, std::false_type{});
      if constexpr (kLean) {
#pragma unroll
        for (int j = kEarly; j < CT; ++j) dv[j] = *reinterpret_cast<const float4*>(D + (j * 32 + lane) * 4);
      } else {
#pragma unroll
        for (int j = kEarly; j < CT; ++j)
          dv[j] = c.fold ? *reinterpret_cast<const float4*>(D + (j * 32 + lane) * 4) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      if (!c.fold) continue;  // a cell the call does not complete keeps the state (it is the call's last)
      auto fold = [&](auto bf16c) {
#pragma unroll
        for (int j = 0; j < CT; ++j) {
          const float4 d = dv[j];
          S[j][0] = fold_element(decay, S[j][0], d.x, decltype(bf16c)::value);
          S[j][1] = fold_element(decay, S[j][1], d.y, decltype(bf16c)::value);
          S[j][2] = fold_element(decay, S[j][2], d.z, decltype(bf16c)::value);
          S[j][3] = fold_element(decay, S[j][3], d.w, decltype(bf16c)::value);
        }
      };
      if (bf16) fold(std::true_type{});
      else fold(std::false_type{});
      folded = true;
    }
  }
  if (folded) store_state<CT>(st, sbase, b.p0 + gi, N, nt0, q, S);  // else the slot keeps its state
}

template <int W, int KC, bool kSplit, bool kLean>
void launch(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* D, const SsdState& st, const float* tables, const uint16_t* rows16, float* y, cudaStream_t s,
            bool programmatic) {
  constexpr std::size_t smem = static_cast<std::size_t>(RelayLayout<W, kSplit>::kFloats) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(sh.H), static_cast<unsigned>(sh.P / 16));
  if (programmatic) {
    ensure_smem(relay_kernel<W, KC, kSplit, true, kLean>, smem, "ssd tc relay smem");
    launch_programmatic_if(true, relay_kernel<W, KC, kSplit, true, kLean>, grid, dim3(32 * (2 * W + KC)), smem, s,
                           "ssd tc relay", sh, g, p, xbc, ld, dt, D, st, tables, rows16, y);
  } else {
    ensure_smem(relay_kernel<W, KC, kSplit, false, kLean>, smem, "ssd tc relay smem");
    relay_kernel<W, KC, kSplit, false, kLean>
        <<<grid, 32 * (2 * W + KC), smem, s>>>(sh, g, p, xbc, ld, dt, D, st, tables, rows16, y);
  }
  check_launch("ssd tc relay");
}

}  // namespace
}  // namespace ssd

void ssd_tc_relay(int cell_warps, int chain_warps, bool split, const SsdShape& sh, const ScanGrid& g,
                  const PassSeqs& p, const float* xbc, int ld, const float* dt, const float* D, SsdState st,
                  const float* tables, const uint16_t* rows16, float* y, cudaStream_t s, bool programmatic,
                  bool lean) {
  if (lean && (sh.groups != 1 || chain_warps != 2 || cell_warps < 2 || cell_warps > 3))
    throw Error("CUDA SSD tc relay: the lean way is compiled for one group, 2 or 3 cell warps and 2 chain warps (the "
                "default shapes); got " + std::to_string(sh.groups) + " groups, " + std::to_string(cell_warps) +
                " cell warps, " + std::to_string(chain_warps) + " chain warps");
  auto go = [&](auto wc, auto kc) {
    constexpr int W = decltype(wc)::value, KC = decltype(kc)::value;
    constexpr bool kLeanShape = KC == 2 && (W == 2 || W == 3);
    if (split) {
      if constexpr (ssd::kFits<W, true>) {
        if constexpr (kLeanShape)
          if (lean) return ssd::launch<W, KC, true, true>(sh, g, p, xbc, ld, dt, D, st, tables, rows16, y, s,
                                                          programmatic);
        ssd::launch<W, KC, true, false>(sh, g, p, xbc, ld, dt, D, st, tables, rows16, y, s, programmatic);
      } else {
        throw Error("CUDA SSD tc relay: " + std::to_string(W) + " cell warps with split products need more "
                    "shared memory than a block has; take 1 or 2");
      }
    } else {
      if constexpr (kLeanShape)
        if (lean) return ssd::launch<W, KC, false, true>(sh, g, p, xbc, ld, dt, D, st, tables, rows16, y, s,
                                                         programmatic);
      ssd::launch<W, KC, false, false>(sh, g, p, xbc, ld, dt, D, st, tables, rows16, y, s, programmatic);
    }
  };
  auto by_chain = [&](auto wc) {
    switch (chain_warps) {
      case 1: go(wc, std::integral_constant<int, 1>{}); break;
      case 2: go(wc, std::integral_constant<int, 2>{}); break;
      case 4: go(wc, std::integral_constant<int, 4>{}); break;
      default: throw Error("CUDA SSD tc relay: chain warps must be 1, 2 or 4, got " + std::to_string(chain_warps));
    }
  };
  switch (cell_warps) {
    case 1: by_chain(std::integral_constant<int, 1>{}); break;
    case 2: by_chain(std::integral_constant<int, 2>{}); break;
    case 3: by_chain(std::integral_constant<int, 3>{}); break;
    case 4: by_chain(std::integral_constant<int, 4>{}); break;
    default: throw Error("CUDA SSD tc relay: cell warps must be 1, 2, 3 or 4, got " + std::to_string(cell_warps));
  }
}

}  // namespace parity::cuda
