#pragma once
// One (cell, head) coefficient table of the tensor-core walk (layout: ssd_tc_cells.cuh) from the cell's 16 × 16
// band block and dt in shared memory, by one warp: the table pass (ssd_tc_tables.cu) and the one-launch band and
// tables (ssd_tc_cell_band.cu) both call it, so a table has the same bits whichever launch formed it.
#include <cstddef>
#include <cstdint>

#include "kernels_cuda/ssd_tc_cells.cuh"

namespace parity::cuda::ssd {
namespace {

// bnd[t·kG + d] = cb_dot(C_{cs+t}, B_{cs+t−d}), read only for rows j0 ≤ t < L and d ≤ t; dts[i] = dt of row i
// (0 from L on); coef a warp's own [kG][kG + 1] floats. cum (warp_cell_cum), coef[t][i] = row_weight·band packed
// as the intra product's m16k16 fragment (bf16 head and rest), w_i, exp(cum_t) and the decay into the table of
// (cell task, head h) of H heads (its address formed here, where table_kernel always formed it: its code stays).
__device__ __forceinline__ void form_table(const CellIn& c, float Ah, const float* dts, const float* bnd,
                                           float (*coef)[kG + 1], uint32_t* tables, int task, int H, int h,
                                           int lane) {
  const int L = c.L;
  const float d = lane < L ? cum_term(dts[lane], Ah) : 0.0f;
  float total;
  const float cl = warp_cell_cum<kG>(d, L, lane, &total);
#pragma unroll
  for (int a = 0; a < kG * kG / 32; ++a) {
    const int e = a * 32 + lane, t = e / kG, i = e % kG;
    const float cti = __shfl_sync(0xffffffffu, cl, t), cii = __shfl_sync(0xffffffffu, cl, i);
    float v = 0.0f;
    if (t >= c.j0 && t < L && i <= t) v = row_weight(cti, cii, dts[i]) * bnd[t * kG + (t - i)];
    coef[t][i] = v;
  }
  __syncwarp();
  uint32_t* out = tables + (static_cast<std::size_t>(task) * H + h) * kTabWords;
  // Word w = l·4 + r of the m16k16 fragment (l its lane): rows g (+8 for odd r), columns 2q, 2q+1 (+8 for r ≥ 2).
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int w = a * 32 + lane;
    const int fl = w / 4, r = w % 4, gg = fl / 4, q = fl % 4;
    const int row = gg + 8 * (r & 1), col = 2 * q + 8 * (r >> 1);
    out[kTabHi + w] = pack(coef[row][col], coef[row][col + 1]);
    out[kTabLo + w] = pack_rest(coef[row][col], coef[row][col + 1]);
  }
  {  // w (lanes 0..15, zero where the cell does not fold), exp(cum) (16..31), the decay
    const int r = lane & 15;
    const float cr = __shfl_sync(0xffffffffu, cl, r);
    float we = 0.0f;
    if (lane < 16) {
      if (c.fold && r < L) we = row_weight(total, cr, dts[r]);
    } else if (r < L) {
      we = exp_f(cr);
    }
    out[kTabW + lane] = __float_as_uint(we);
    if (lane < 4) out[kTabDecay + lane] = lane == 0 ? __float_as_uint(exp_f(total)) : 0u;
  }
}

}  // namespace
}  // namespace parity::cuda::ssd
