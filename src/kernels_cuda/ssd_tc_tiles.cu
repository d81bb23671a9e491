// Every cell task's C and B as the bf16 tiles the relay's products read (ssd_tc_relay.cu), formed once per
// (cell task, stagger offset, group) and shared by the heads that have that offset, where each relay block
// would otherwise copy the fp32 rows and convert them itself: twice the bytes through L2 for every block of
// every head, and a conversion on the cell warp's path. The values are convert()'s (ssd_tc_cells.cuh): the
// same pack and pack_rest, the same zero rows (C before the call's first row, B past the cell's rows).
#include <cstddef>
#include <cstdint>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ssd_cell_walk.cuh"
#include "kernels_cuda/ssd_device.cuh"
#include "kernels_cuda/ssd_tc_cells.cuh"
#include "kernels_cuda/ssd_tc_kernels.h"
#include "kernels_cuda/ssd_tc_steps.cuh"

namespace parity::cuda {
namespace ssd {
namespace {

// One (cell task, offset, group) tile a block: parts [C head | B head (| C rest | B rest)] of [16 rows][128].
template <bool kSplit>
__global__ void __launch_bounds__(128) tiles_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld,
                                                    const float* dt, SsdState st, uint16_t* out) {
  const int task = blockIdx.x, o = blockIdx.y, grp = blockIdx.z;
  const int hpg = sh.heads_per_group();
  int h = -1;  // a head of this group with offset o: the cell's rows are the same for all of them
  for (int c = grp * hpg; c < (grp + 1) * hpg && h < 0; ++c)
    if (head_offset(g, c, sh.H) == o) h = c;
  if (h < 0) return;  // no head reads this tile
  const CellTask t = cell_task(g, p, task, h, sh.H);
  if (!t.live) return;
  const CellIn c = first_cell(t);
  const RowSource src = source_of(sh, g, p, t.seq, xbc, ld, dt, st);
  uint16_t* const tile = out + ssd_tc_tile_offset(sh, g, task, o, grp, kSplit);
  constexpr int kRowUnits = kN / 4, kUnits = 2 * kG * kRowUnits, kT = 128;
  // All of a thread's loads first, then its stores: eight rows' reads in flight, not one at a time.
  float4 f[kUnits / kT];
#pragma unroll
  for (int j = 0; j < kUnits / kT; ++j) {
    const int u = threadIdx.x + j * kT;
    const int m = u / (kG * kRowUnits), r = (u / kRowUnits) % kG, v = u % kRowUnits;  // m: 0 C, 1 B
    const bool use = m == 0 ? r >= c.j0 && r < c.L : c.fold && r < c.L;
    f[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (use) {
      const float* row = (m == 0 ? src.C(grp, c.cs + r) : src.B(grp, c.cs + r)) + 4 * v;
      if ((reinterpret_cast<std::uintptr_t>(row) & 15) == 0) f[j] = *reinterpret_cast<const float4*>(row);
      else f[j] = make_float4(row[0], row[1], row[2], row[3]);
    }
  }
#pragma unroll
  for (int j = 0; j < kUnits / kT; ++j) {
    const int u = threadIdx.x + j * kT;
    const std::size_t at = static_cast<std::size_t>(u) * 4;  // (m·16 + r)·N + 4v
    *reinterpret_cast<uint2*>(tile + at) = make_uint2(pack(f[j].x, f[j].y), pack(f[j].z, f[j].w));
    if constexpr (kSplit)
      *reinterpret_cast<uint2*>(tile + 2 * kG * kN + at) =
          make_uint2(pack_rest(f[j].x, f[j].y), pack_rest(f[j].z, f[j].w));
  }
}

static_assert(kG * kN == 16 * 128, "ssd_tc_tile_offset's part");

}  // namespace
}  // namespace ssd

std::size_t ssd_tc_tiles_floats(const SsdShape& sh, const ScanGrid& g, int tasks, bool split) {
  return ssd_tc_tile_offset(sh, g, tasks > 0 ? tasks : 0, 0, 0, split) / 2;
}

void ssd_tc_tiles(bool split, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                  const float* dt, SsdState st, uint16_t* tiles, cudaStream_t s) {
  if (p.num_cell_tasks <= 0) return;
  const dim3 grid(static_cast<unsigned>(p.num_cell_tasks), static_cast<unsigned>(g.stagger ? g.cell : 1),
                  static_cast<unsigned>(sh.groups));
  if (split) ssd::tiles_kernel<true><<<grid, 128, 0, s>>>(sh, g, p, xbc, ld, dt, st, tiles);
  else ssd::tiles_kernel<false><<<grid, 128, 0, s>>>(sh, g, p, xbc, ld, dt, st, tiles);
  check_launch("ssd tc tiles");
}

}  // namespace parity::cuda
