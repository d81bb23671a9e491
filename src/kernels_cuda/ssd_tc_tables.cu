// The tensor-core walk's table pass (ssd_tc.h): every cell's coefficient table, formed before the
// walk, one warp a (cell task, head): cum (warp_cell_cum), coef[t][i] = row_weight·band already packed as the
// intra product's m16k16 fragment (bf16 head and rest), w_i, exp(cum_t) and the decay: the fp32 values every
// other path forms, by the same ssd_device.cuh helpers (form_table, ssd_tc_table.cuh, which the one-launch way
// shares). The walk copies a cell's table (1,168 bytes) with its inputs, so no shuffle chain or exp runs on its
// serial chain.
#include <cstdint>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/programmatic_launch.cuh"
#include "kernels_cuda/ssd_tc_kernels.h"
#include "kernels_cuda/ssd_tc_table.cuh"

namespace parity::cuda {
namespace ssd {
namespace {

// A warp a (cell task, head), kTableWarps tasks of one head a block. Session 46 (H100, ncu): a block of four
// warps a task, each warp forming the task's row source and cum again, took 401 µs at 32 × 2048 rows with the
// SMs' issue 88 % busy; the table's values and their order are the same either way.
constexpr int kTableWarps = 8;

// kWait: launched programmatically after the band (ssd_tc_scan's programmatic way). What a warp reads before its wait
// (the pass's metadata, dt, A, the replay ring) no kernel still running writes: the band was an ordinary launch, so
// whatever wrote dt had completed before it began. Every warp waits, those without a cell too: the relay after this
// pass writes the ring the band reads, and it may do so only once this launch, and so the band, has completed.
template <bool kWait>
__global__ void __launch_bounds__(32 * kTableWarps)
    table_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* A,
                 SsdState st, const float* band, uint32_t* tables) {
  const int lane = threadIdx.x % 32, wi = threadIdx.x / 32;
  const int task = blockIdx.x * kTableWarps + wi, h = blockIdx.y;
  auto wait_band = [] {
    if constexpr (kWait) wait_for_prior_kernel();
  };
  if (task >= p.num_cell_tasks) return wait_band();
  const CellTask ct = cell_task(g, p, task, h, sh.H);
  if (!ct.live) return wait_band();
  const CellIn c = first_cell(ct);
  const RowSource src = source_of(sh, g, p, ct.seq, xbc, ld, dt, st);
  const int grp = h / sh.heads_per_group();
  __shared__ float dts_w[kTableWarps][kG], coef_w[kTableWarps][kG][kG + 1];
  __shared__ __align__(16) float bnd_w[kTableWarps][kG * kG];
  float* const dts = dts_w[wi];
  float* const bnd = bnd_w[wi];
  float(*const coef)[kG + 1] = coef_w[wi];
  if (lane < kG) dts[lane] = lane < c.L ? src.dtv(h, c.cs + lane) : 0.0f;
  wait_band();
  // The cell's band rows j0 .. L-1, 16-byte loads issued together: a row outside them reads row j0's place
  // (always in the call) and stores zeros, so no load waits behind a branch.
  const int row_at0 = src.row0 + static_cast<int>(c.cs - src.start);
  constexpr int kLoads = kG * kG / 128;  // a lane's 16-byte loads: units e4 = a·32 + lane, row e4 / (kG / 4)
  float4 bv[kLoads];
  bool live[kLoads];
#pragma unroll
  for (int a = 0; a < kLoads; ++a) {
    const int e4 = a * 32 + lane, r = e4 / (kG / 4);
    live[a] = r >= c.j0 && r < c.L;
    bv[a] = *reinterpret_cast<const float4*>(
        band + band_at(row_at0 + (live[a] ? r : c.j0), sh.groups, grp, kG, 4 * (e4 % (kG / 4))));
  }
#pragma unroll
  for (int a = 0; a < kLoads; ++a)
    reinterpret_cast<float4*>(bnd)[a * 32 + lane] = live[a] ? bv[a] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  __syncwarp();
  const float Ah = A[h];
  form_table(c, Ah, dts, bnd, coef, tables, task, sh.H, h, lane);
}

}  // namespace
}  // namespace ssd

void ssd_tc_tables(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
                   const float* A, SsdState st, const float* band, float* tables, cudaStream_t s, bool programmatic) {
  if (p.num_cell_tasks <= 0) return;
  const unsigned blocks = static_cast<unsigned>((p.num_cell_tasks + ssd::kTableWarps - 1) / ssd::kTableWarps);
  const dim3 grid(blocks, static_cast<unsigned>(sh.H));
  uint32_t* const words = reinterpret_cast<uint32_t*>(tables);
  if (programmatic)
    launch_programmatic_if(true, ssd::table_kernel<true>, grid, dim3(32 * ssd::kTableWarps), 0, s, "ssd tc tables", sh,
                           g, p, xbc, ld, dt, A, st, band, words);
  else
    ssd::table_kernel<false><<<grid, 32 * ssd::kTableWarps, 0, s>>>(sh, g, p, xbc, ld, dt, A, st, band, words);
  check_launch("ssd tc tables");
}

}  // namespace parity::cuda
