#pragma once
// The tensor-core walk's bf16 rows (ssd_tc_kernels.h) from fp32 C and B rows staged in shared memory: the band's
// launch (ssd_band.cu) and the one-launch band and tables (ssd_tc_cell_band.cu) both write them, so a row's bf16
// values come from one conversion whichever launch formed them.
#include <cstdint>

#include "kernels_cuda/ssd_tc_kernels.h"
#include "kernels_cuda/ssd_tc_steps.cuh"

namespace parity::cuda::ssd {
namespace {

// C and B of rows r .. r+m-1 (C at Cs, row stride Np; B at Bw from its row kSsdTcRingRows on), and at the
// sequence's first row also the ring's B rows before it (pre of them, the rows just before Bw's kSsdTcRingRows-th).
// The values are convert()'s (ssd_tc_cells.cuh): the same pack and pack_rest of the same floats. T threads store.
template <int kParts, int T>
__device__ void store_rows16(const float* Cs, const float* Bw, int Np, int m, int r, int pre, int ring_slot,
                             int groups, int grp, uint16_t* rows16) {
  constexpr int kUnits = kN / 4;
  const int rows = 2 * m + pre;  // C rows, then B: the ring's `pre` rows, then the run's
  for (int u = threadIdx.x; u < rows * kUnits; u += T) {
    const int i = u / kUnits, v = u % kUnits;
    const bool c = i < m;
    const int b = i - m;  // B's row in the window from its first kept row
    const float* src = c ? Cs + i * Np + 4 * v : Bw + (kSsdTcRingRows - pre + b) * Np + 4 * v;
    const int slot = c ? r + i : b < pre ? ring_slot + kSsdTcRingRows - pre + b : r + b - pre;
    const int part = c ? 0 : 1;
    const float4 f = *reinterpret_cast<const float4*>(src);
    uint16_t* dst = rows16 + ssd_tc_row16_offset(groups, slot, grp, part, kParts == 4) + 4 * v;
    *reinterpret_cast<uint2*>(dst) = make_uint2(pack(f.x, f.y), pack(f.z, f.w));
    if constexpr (kParts == 4)
      *reinterpret_cast<uint2*>(dst + 2 * 128) = make_uint2(pack_rest(f.x, f.y), pack_rest(f.z, f.w));
  }
}

}  // namespace
}  // namespace parity::cuda::ssd
