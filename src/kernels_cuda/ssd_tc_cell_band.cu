// The tensor-core walk's band and tables in one launch (SsdTcWay::tables = 1; ssd_tc.h): one block a (cell task,
// group) forms the C·B dots its group's heads' cells of that task read, then every such head's table, and the bf16
// rows of its share of the call. The two-launch way (ssd_band.cu, then ssd_tc_tables.cu) writes every dot to the
// band in global memory for the table pass to read back, and a launch gap between them; here the dots stay in
// shared memory. The bits are the two launches': each dot is cb_dot of the same fp32 rows in the same order, each
// table form_table (ssd_tc_table.cuh), each bf16 row store_rows16 (ssd_band_rows.cuh).
//
// A block's window: heads are staggered, so the k-th cells of a group's heads start at up to 16 different rows; the
// union of their call rows is at most 31 rows (k ≥ 1: each head's cell starts in the same 16 rows after the call's
// (k−1)-th grid row; k = 0: every head's first cell starts at the call's first row or within the 15 before it).
// The dots a head reads reach back to its cell's first source row (ring rows where the call starts inside the
// cell), never past the window's first row minus 15.
//
// The bf16 rows: the block writes those of its group's first head's k-th cell (the call rows of that cell). The
// call's tasks are k = 0 .. k_max − 1 for every head (pass_plan.cpp: as many as any head's stagger makes), and one
// head's cells tile the call's rows (each starts where the one before ended; k = 0 at the call's first row, the
// last open or not), so over the call's tasks every row is written once; the ring's 15 rows before the call come
// with k = 0, whose cell holds the call's first row. Rows of one-row calls (no tasks) are not written, as the
// band's launch does not write them.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ssd_band_rows.cuh"
#include "kernels_cuda/ssd_tc_kernels.h"
#include "kernels_cuda/ssd_tc_table.cuh"

namespace parity::cuda {
namespace ssd {
namespace {

// 16 warps: a block forms up to 496 dots (one a thread) and then a table a warp for each of the group's heads.
constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr int kPre = kSsdTcRingRows;       // source rows a cell reaches before its first call row
constexpr int kWinRows = 2 * kG - 1;       // the window's call rows, at most
constexpr int kSpan = kPre + kWinRows;     // positions base .. base + kSpan − 1, base = the window's first − 15
constexpr int kNp = kN + 4;                // a staged fp32 row: a half-warp's 16 B rows fall in 8 bank quads
// Shared memory (floats): dots [kSpan][kG] (row: position − base) | C [kWinRows][kNp] (row: position − window's
// first) | B [kSpan][kNp] (row: position − base). After the dots and the bf16 rows are formed, each warp's dt and
// coef scratch for form_table takes C's and B's place.
constexpr int kDots = 0, kCs = kSpan * kG, kBs = kCs + kWinRows * kNp, kFloats = kBs + kSpan * kNp;
constexpr int kScratch = kG + kG * (kG + 1);  // a warp's dts [kG] | coef [kG][kG + 1]
static_assert(kCs % 4 == 0 && kBs % 4 == 0 && kNp % 4 == 0, "16-byte aligned rows");
static_assert(kWarps * kScratch <= kFloats - kCs, "the tables' scratch fits where C and B were");
static_assert(kWinRows * kG <= kThreads, "one dot a thread");

__device__ __forceinline__ int warp_min(int v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ int warp_max(int v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <bool kSplit>
__global__ void __launch_bounds__(kThreads)
    cell_band_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* A,
                     SsdState st, uint32_t* tables, uint16_t* rows16) {
  __shared__ __align__(16) float smem[kFloats];
  const int task = blockIdx.x, grp = blockIdx.y, lane = threadIdx.x % 32, wi = threadIdx.x / 32;
  const int hpg = sh.heads_per_group(), h0 = grp * hpg;
  const int seq = p.cell_task[2 * task];
  const int64_t start = p.start[seq];
  // The window over the group's heads (positions relative to the call's first row; every warp forms the same):
  // call rows [c_lo, c_hi), source rows from s_lo.
  int c_lo = 1 << 30, c_hi = -(1 << 30), s_lo = 1 << 30;
  for (int hh = lane; hh < hpg; hh += 32) {
    const CellTask ct = cell_task(g, p, task, h0 + hh, sh.H);
    if (!ct.live) continue;
    c_lo = min(c_lo, static_cast<int>(ct.first - start));
    c_hi = max(c_hi, static_cast<int>(ct.c.start - start) + ct.L);
    s_lo = min(s_lo, static_cast<int>(ct.c.start - start));
  }
  c_lo = warp_min(c_lo);
  c_hi = warp_max(c_hi);
  s_lo = warp_min(s_lo);
  if (c_hi <= c_lo) return;  // no head of the group has a cell in this task (the whole block agrees)
  const int base = c_lo - kPre, nc = c_hi - c_lo;
  // This block's bf16 rows: the first head's cell's call rows, with the ring's before the call at k = 0.
  const CellTask c0 = cell_task(g, p, task, h0, sh.H);
  const int first0 = static_cast<int>(c0.first - start);
  const int m0 = c0.live ? static_cast<int>(c0.c.start - start) + c0.L - first0 : 0;
  const int pre = c0.live && first0 == 0 ? kPre : 0;
  const int b_from = pre > 0 ? -kPre : s_lo;  // k = 0: c_lo = 0 and every cell starts at −15 or later
  const RowSource src = source_of(sh, g, p, seq, xbc, ld, dt, st);
  const int64_t lo = g.exact ? 0 : start;  // the band's rule: rows before it are zeros (plain cells never read them)

  float* const dots = smem + kDots;
  float* const Cs = smem + kCs;
  float* const Bs = smem + kBs;
  {
    constexpr int kUnits = kN / 4;
    for (int u = threadIdx.x; u < nc * kUnits; u += kThreads) {
      const int i = u / kUnits, v = u % kUnits;
      copy4(Cs + i * kNp + 4 * v, src.C(grp, start + c_lo + i), 4 * v, kN);
    }
    const int nb = c_hi - b_from;
    for (int u = threadIdx.x; u < nb * kUnits; u += kThreads) {
      const int i = u / kUnits, v = u % kUnits;
      const int64_t pos = start + b_from + i;
      float* dst = Bs + (b_from + i - base) * kNp + 4 * v;
      if (pos >= lo) copy4(dst, src.B(grp, pos), 4 * v, kN);
      else zero4(dst);
    }
    commit();
    wait_all();
  }
  __syncthreads();
  {  // dots[q][d] = cb_dot(C_{base+q}, B_{base+q−d}): the band's value at that row and distance
    const int i = threadIdx.x / kG, d = threadIdx.x % kG;
    const int q = c_lo + i - base, qb = q - d;
    if (i < nc && qb >= b_from - base) {
      const bool live = start + base + qb >= lo;
      dots[q * kG + d] = live ? cb_dot(Cs + i * kNp, Bs + qb * kNp, kN) : 0.0f;
    }
  }
  if (m0 > 0)
    store_rows16<kSplit ? 4 : 2, kThreads>(Cs + (first0 - c_lo) * kNp, Bs + (first0 - c_lo) * kNp, kNp, m0,
                                           src.row0 + first0, pre, p.num_rows + kSsdTcRingRows * seq, sh.groups,
                                           grp, rows16);
  __syncthreads();  // the dots are formed and C and B read: the warps' scratch takes their place
  float* const dts = smem + kCs + wi * kScratch;
  float(*const coef)[kG + 1] = reinterpret_cast<float(*)[kG + 1]>(dts + kG);
  for (int hh = wi; hh < hpg; hh += kWarps) {
    const int h = h0 + hh;
    const CellTask ct = cell_task(g, p, task, h, sh.H);
    if (!ct.live) continue;
    const CellIn c = first_cell(ct);
    if (lane < kG) dts[lane] = lane < c.L ? src.dtv(h, c.cs + lane) : 0.0f;
    __syncwarp();
    const float Ah = A[h];
    form_table(c, Ah, dts, dots + (static_cast<int>(c.cs - start) - base) * kG, coef, tables, task, sh.H, h, lane);
    __syncwarp();  // form_table's last reads of dts and coef before the next head's writes
  }
}

}  // namespace
}  // namespace ssd

void ssd_tc_cell_band(bool split, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                      const float* dt, const float* A, SsdState st, float* tables, uint16_t* rows16, cudaStream_t s) {
  if (p.num_cell_tasks <= 0 || p.num_rows <= 0) return;
  if (sh.N != ssd::kN || g.cell != ssd::kG)
    throw Error("ssd tc band and tables: need N " + std::to_string(ssd::kN) + " and cell " + std::to_string(ssd::kG));
  const dim3 grid(static_cast<unsigned>(p.num_cell_tasks), static_cast<unsigned>(sh.groups));
  auto* out = reinterpret_cast<uint32_t*>(tables);
  if (split)
    ssd::cell_band_kernel<true><<<grid, ssd::kThreads, 0, s>>>(sh, g, p, xbc, ld, dt, A, st, out, rows16);
  else
    ssd::cell_band_kernel<false><<<grid, ssd::kThreads, 0, s>>>(sh, g, p, xbc, ld, dt, A, st, out, rows16);
  check_launch("ssd tc band and tables");
}

}  // namespace parity::cuda
