// The relay: the tensor-core walk (ssd_tc_walk.cu) with a call's cells formed in parallel and only the fold
// chained, for passes of few sequences, where the walk's blocks are too few to hide a cell's latency.
//
// Only S depends on the cells before: a cell's delta and its intra product depend on its own rows, and its
// outputs on its rows and S_start. So one block per (sequence, head, 16 columns of p) has W cell warps and
// one chain warp. Rounds of W cells, one block barrier a round:
// - cell warp w takes cells w, w + W, ...: it copies its cell two rounds ahead (its table, x, and C and B as
//   bf16 tiles from the rows the band's launch converted, as the walk does), forms the intra product and the
//   delta (delta_tiles, the fold's own mma steps) and leaves them in shared memory, in the state's register
//   layout;
// - the chain warp holds S in the walk's KS = 1 layout and, a round behind, takes the round's cells in order:
//   C·Sᵀ (inter_part), the outputs (finish), then S ← fold_element(decay, S, delta).
// Each value comes from the walk's own functions on the same operands, so the relay gives the walk's bits
// (CudaSsdTc.TheRelayHasTheWalksBits); only where and when a warp forms them differs. The chain's serial work
// a cell is C·Sᵀ and the fold; the walk's also held the copies' wait, the conversion and the delta.
// Session 47's first relay copied fp32 C and B and converted them in each cell warp: a round took the copies'
// latency (2.0 µs at one cell warp, 2.6 at two, on an H100), so it lost to the walk. Its second took bf16 tiles
// from a pass of their own, one a (cell task, stagger offset, group): 22 µs of 146 at 1 × 2048 (session 48, ncu).
// Session 48 also split the chain over n by 2 or 4 chain warps (the walk's KS layout): 140 / 150 µs against one
// chain warp's 139 at 1 × 2048, bf16 products, so the one chain warp stays.
//
// Shared memory (floats): stages [4 rounds][W] (table | x | bf16 tiles: a cell's copies are in flight for two
// rounds, its warp reads them in the next, the chain in the one after) | deltas [2 rounds][W][16 n-tiles][32
// lanes][4] | intra products [2][W][2 p-tiles][32][4].
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_cell_walk.cuh"
#include "kernels_cuda/ssd_copy_lanes.cuh"
#include "kernels_cuda/ssd_device.cuh"
#include "kernels_cuda/ssd_tc.h"
#include "kernels_cuda/ssd_tc_cells.cuh"
#include "kernels_cuda/ssd_tc_kernels.h"
#include "kernels_cuda/ssd_tc_products.cuh"
#include "kernels_cuda/ssd_tc_steps.cuh"

namespace parity::cuda {
namespace ssd {
namespace {

constexpr int kNT = kN / 8;  // the state's n-tiles of 8

template <int W, bool kSplit>
struct RelayLayout {
  static constexpr int kTiles = kParts<kSplit> * kTile / 2;  // a stage's bf16 tiles, in floats
  static constexpr int kSet = Stage<1>::kFloats + kTiles;
  static constexpr int kDelta = kNT * 32 * 4, kIntra = 2 * 32 * 4;
  static constexpr int kStages = 4;
  static constexpr int kDeltas = kStages * W * kSet;
  static constexpr int kIntras = kDeltas + 2 * W * kDelta;
  static constexpr int kFloats = kIntras + 2 * W * kIntra;
  static_assert(kTile % 2 == 0 && kSet % 4 == 0 && kVS % 8 == 0, "16-byte aligned stages and tile rows");
};

template <int W, bool kSplit>
__global__ void __launch_bounds__(32 * (W + 1))
    relay_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* Dskip,
                 SsdState st, const float* tables, const uint16_t* rows16, float* y) {
  using Lay = RelayLayout<W, kSplit>;
  using St = Stage<1>;
  const int seq = blockIdx.x, h = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t start = p.start[seq];
  const int t0 = p.task0[seq], K = p.task0[seq + 1] - t0;
  if (K <= 0 || uses_ssu(g, start, p.n[seq])) return;
  const int P = sh.P, N = sh.N;
  const WalkCtx b{sh, g, source_of(sh, g, p, seq, xbc, ld, dt, st), nullptr, h, h / sh.heads_per_group(),
                  static_cast<int>(blockIdx.z) * 16};
  const int64_t call_end = start + p.n[seq];
  const CellIn first = first_cell(cell_task(g, p, t0, h, sh.H));
  if (!first.live) return;
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
  auto stage = [&](int r, int w) { return smem + ((r % Lay::kStages) * W + w) * Lay::kSet; };
  auto tiles = [&](int r, int w) { return reinterpret_cast<uint16_t*>(stage(r, w) + St::kFloats); };
  auto deltas = [&](int r, int w) { return smem + Lay::kDeltas + ((r & 1) * W + w) * Lay::kDelta; };
  auto intras = [&](int r, int w) { return smem + Lay::kIntras + ((r & 1) * W + w) * Lay::kIntra; };
  const int gi = lane / 4, q = lane % 4;
  // Lane addresses of ldmatrix (as the walk's): C's m16k16 operand, B's transposed k16n8 operands.
  const int crow = (lane & 7) + 8 * ((lane >> 3) & 1), ccol = 8 * (lane >> 4);
  const int rounds = (cells + W - 1) / W + 1;  // the chain runs a round behind

  if (warp < W) {  // a cell warp
    const int ring_slot = p.num_rows + kSsdTcRingRows * seq;
    // Cell k's table, x and tiles into round r's stage (the B tiles only where the cell folds).
    auto issue_cell = [&](int k, int r) {
      const CellIn x = cell_at(k);
      float* const X = stage(r, warp);
      issue_table_x<1, 32>(b, x, table(k), X, lane);
      issue_tiles<32, kSplit>(rows16, sh.groups, b.grp, start, b.src.row0, ring_slot, x, tiles(r, warp), lane);
    };
    for (int a = 0; a < 2; ++a) {
      if (a * W + warp < cells) issue_cell(a * W + warp, a);
      commit();
    }
    for (int r = 0; r < rounds; ++r) {
      __syncthreads();  // round r − 1's deltas and products stored; round r − 2's stages read by the chain
      const int k = r * W + warp;
      if (k + 2 * W < cells) issue_cell(k + 2 * W, r + 2);
      commit();
      ptx::cp_async_wait<2>();  // this round's copies (issued two rounds ago)
      __syncwarp();
      const bool live = k < cells;
      if (!live) continue;
      const CellIn c = cell_at(k);
      const float* X = stage(r, warp);
      const float* F = X + St::kTab;
      const float* xs = X + St::kX;
      float xa[4][2];
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int pt = 0; pt < 2; ++pt) xa[a][pt] = xs[(2 * q + (a & 1) + 8 * (a >> 1)) * St::XS + gi + 8 * pt];
      const Frag4<kSplit> fa = coef_fragment<kSplit>(F, lane);
      float ya[2][4];
      intra_product<kSplit>(fa, xa, ya);
      float* const I = intras(r, warp);
#pragma unroll
      for (int pt = 0; pt < 2; ++pt)
        *reinterpret_cast<float4*>(I + (pt * 32 + lane) * 4) = make_float4(ya[pt][0], ya[pt][1], ya[pt][2], ya[pt][3]);
      if (c.fold) {
        float wv[4];
#pragma unroll
        for (int a = 0; a < 4; ++a) wv[a] = F[kTabW + 2 * q + (a & 1) + 8 * (a >> 1)];
        float* const D = deltas(r, warp);
        delta_tiles<kNT, kSplit>(tiles(r, warp) + kTile, crow, ccol, 0, xa, wv, [&](int j, const float (&dl)[4]) {
          *reinterpret_cast<float4*>(D + (j * 32 + lane) * 4) = make_float4(dl[0], dl[1], dl[2], dl[3]);
        });
      }
    }
    return;
  }

  // The chain warp: S[j][e] at p = p0 + gi + 8·(e / 2), n = 8·j + 2q + e % 2 (the walk's layout, KS = 1).
  const bool bf16 = st.state_f32 == nullptr;
  const float Dh = Dskip[h];
  const std::size_t sbase = (static_cast<std::size_t>(b.src.slot) * sh.H + h) * P * N;
  float S[kNT][4];
  load_state<kNT>(st, sbase, b.p0 + gi, N, 0, q, S);
  bool folded = false;
  for (int r = 0; r < rounds; ++r) {
    __syncthreads();
    for (int i = 0; r > 0 && i < W; ++i) {
      const int k = (r - 1) * W + i;
      if (k >= cells) break;
      const CellIn c = cell_at(k);
      const float* X = stage(r - 1, i);
      const float* F = X + St::kTab;
      const float* xs = X + St::kX;
      float part[2][4];
      inter_part<kNT, kSplit>(tiles(r - 1, i), crow, ccol, 0, S, bf16, part);
      Pending pd;
      const float* I = intras(r - 1, i);
#pragma unroll
      for (int pt = 0; pt < 2; ++pt) {
        const float4 v = *reinterpret_cast<const float4*>(I + (pt * 32 + lane) * 4);
        pd.intra[pt][0] = v.x, pd.intra[pt][1] = v.y, pd.intra[pt][2] = v.z, pd.intra[pt][3] = v.w;
#pragma unroll
        for (int e = 0; e < 4; ++e) pd.part[pt][e] = part[pt][e];
      }
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
      if (!c.fold) continue;  // a cell the call does not complete keeps the state (it is the call's last)
      const float decay = F[kTabDecay];
      const float* D = deltas(r - 1, i);
      auto fold = [&](auto bf16c) {
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
          const float4 d = *reinterpret_cast<const float4*>(D + (j * 32 + lane) * 4);
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
  if (folded) store_state<kNT>(st, sbase, b.p0 + gi, N, 0, q, S);  // else the slot keeps its state
}

template <int W, bool kSplit>
void launch(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* D, const SsdState& st, const float* tables, const uint16_t* rows16, float* y, cudaStream_t s) {
  constexpr std::size_t smem = static_cast<std::size_t>(RelayLayout<W, kSplit>::kFloats) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(sh.H), static_cast<unsigned>(sh.P / 16));
  ensure_smem(relay_kernel<W, kSplit>, smem, "ssd tc relay smem");
  relay_kernel<W, kSplit><<<grid, 32 * (W + 1), smem, s>>>(sh, g, p, xbc, ld, dt, D, st, tables, rows16, y);
  check_launch("ssd tc relay");
}

}  // namespace
}  // namespace ssd

void ssd_tc_relay(int cell_warps, bool split, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p,
                  const float* xbc, int ld, const float* dt, const float* D, SsdState st, const float* tables,
                  const uint16_t* rows16, float* y, cudaStream_t s) {
  auto go = [&](auto wc) {
    constexpr int W = decltype(wc)::value;
    if (split) ssd::launch<W, true>(sh, g, p, xbc, ld, dt, D, st, tables, rows16, y, s);
    else ssd::launch<W, false>(sh, g, p, xbc, ld, dt, D, st, tables, rows16, y, s);
  };
  switch (cell_warps) {
    case 1: go(std::integral_constant<int, 1>{}); break;
    case 2: go(std::integral_constant<int, 2>{}); break;
    default: throw Error("CUDA SSD tc relay: cell warps must be 1 or 2, got " + std::to_string(cell_warps));
  }
}

}  // namespace parity::cuda
