// The band of the fused scan: for every row s of a call and every distance d = 0..cell-1,
//   band[s][d] = C_s · B_{s-d} = Σ_n C_s[n]·B_{s-d}[n]   (one fmaf chain over n ascending, from 0)
// the dot product the intra-cell sum weighs x_{s-d} by. It depends only on the two positions and the
// group, not on the head, so one band serves every head of a group and every stagger: each pair
// (t, i ≤ t) inside any head's cell has t - i < cell. Rows before the call come from the replay ring
// (exact mode; plain cells start at the call's first row, so pairs reaching before it are never read
// and are stored as 0). Each value is cb_dot (ssd_device.cuh), as in the three-phase outputs kernel
// and the one-row decode.
#include <cstdint>
#include <string>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/programmatic_launch.cuh"
#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_band_rows.cuh"
#include "kernels_cuda/ssd_device.cuh"
#include "kernels_cuda/ssd_tc_kernels.h"
#include "kernels_cuda/ssd_tc_steps.cuh"

namespace parity::cuda::ssd {
namespace {

// A block: 16 consecutive packed rows × 64 distances of one group. The rows' C and the window of B
// rows they reach are staged in shared memory (rows 16-byte aligned, as cb_dot reads them); each
// thread owns one row and the distances dq, dq + 16, ... (dq = its index mod 16), so at the default
// cell of 16 every thread has one (with 4 consecutive distances a thread, 3 in 4 had none). A half-warp
// reads 16 consecutive B rows at one column: their stride is 4 floats past a multiple of 32, so 8
// consecutive rows' 16-byte loads fall in 8 different bank quads (at a stride of 128 floats all 16 had
// one quad). Session 46 (H100, ncu): the band at 32 × 2048 took 220 µs with the L1 97 % busy.
constexpr int kRows = 16, kDist = 64, kThreads = 256;

__host__ __device__ inline int row_pad(int N) { return (N + 3) / 4 * 4 + (N % 32 == 0 ? 4 : 0); }

// dst[0..3] = row[c..c+3] (zeros past n_end, or for no row), one 16-byte load where aligned.
__device__ __forceinline__ void copy4(float* dst, const float* row, int c, int n_end) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (row != nullptr) {
    if (c + 4 <= n_end && (reinterpret_cast<std::uintptr_t>(row + c) & 15) == 0)
      v = *reinterpret_cast<const float4*>(row + c);
    else
      v = make_float4(c < n_end ? row[c] : 0.0f, c + 1 < n_end ? row[c + 1] : 0.0f, c + 2 < n_end ? row[c + 2] : 0.0f,
                      c + 3 < n_end ? row[c + 3] : 0.0f);
  }
  *reinterpret_cast<float4*>(dst) = v;
}
// copy4 by an asynchronous 16-byte copy where aligned and whole: a thread's rows then cost one round trip,
// where copy4's load and store in a loop cost one each. The caller waits (cp.async.wait_group) before reading.
__device__ __forceinline__ void copy4_async(float* dst, const float* row, int c, int n_end) {
  if (row != nullptr && c + 4 <= n_end && (reinterpret_cast<std::uintptr_t>(row + c) & 15) == 0)
    ptx::cp_async16(dst, row + c);
  else
    copy4(dst, row, c, n_end);
}

// kLaunch (SsdTcWay::programmatic): 0 an ordinary launch; 1 ordinary, each block letting the next launch (the table
// pass, programmatic) be scheduled at its start, so that it may take the SMs this launch leaves free (it waits for this
// launch before it reads the band or the bf16 rows); 2 launched programmatically after the kernel before it (the
// conv): each block waits for it at its start, reading nothing before, then lets the table pass be scheduled, whose
// reads before its own wait (dt) are then complete.
template <int kParts, int kLaunch>
__global__ void __launch_bounds__(kThreads) band_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld,
                                                        SsdState st, float* band, uint16_t* rows16) {
  if constexpr (kLaunch == 2) wait_for_prior_kernel();
  if constexpr (kLaunch > 0) release_next_kernel();
  const int r0 = blockIdx.x * kRows, grp = blockIdx.y, d0 = blockIdx.z * kDist, G = g.cell, N = sh.N;
  const int dn = G - d0 < kDist ? G - d0 : kDist;  // distances d0 .. d0+dn-1
  const int Np = row_pad(N);
  const int r_end = r0 + kRows < p.num_rows ? r0 + kRows : p.num_rows;
  extern __shared__ __align__(16) float smem[];
  float* Cs = smem;                // [kRows][Np]
  float* Bw = Cs + kRows * Np;     // [kRows + kDist - 1][Np]: positions w_lo .. w_lo + W - 1
  const int i_own = threadIdx.x / 16, dq = threadIdx.x % 16;

  // The tile's rows in runs of one sequence each (a tile can straddle a boundary).
  for (int r = r0; r < r_end;) {
    const int seq = p.row_seq[r];
    const int seq_end = p.row0[seq] + p.n[seq];
    const int rb = seq_end < r_end ? seq_end : r_end, m = rb - r;
    const bool scanned = p.task0[seq + 1] > p.task0[seq];  // SSU rows (and rows a pass scans otherwise) skip
    if (scanned) {
      const RowSource src = source_of(sh, g, p, seq, xbc, ld, nullptr, st);
      const int64_t start = p.start[seq], s_a = start + (r - p.row0[seq]);
      const int64_t lo = g.exact ? 0 : start;        // the earliest position a cell of this call reaches
      const int64_t w_lo = s_a - (d0 + dn - 1);       // the window's first position
      const int W = m + dn - 1;
      __syncthreads();  // the previous run's readers are done
      // Rows in units of 4 columns: thread → unit u0 of rows i0, i0 + rstep, ... (N ≤ 4·kThreads)
      // or units u0, u0 + kThreads, ... of every row.
      const int units = (N + 3) / 4;  // the pad is never read
      const bool few = units <= kThreads;
      const int u0 = few ? threadIdx.x % units : threadIdx.x, i0 = few ? threadIdx.x / units : 0;
      const int rstep = few ? kThreads / units : 1, ustep = few ? units : kThreads;
      if (!few || threadIdx.x < rstep * units) {
        for (int i = i0; i < m; i += rstep)
          for (int u = u0; u < units; u += ustep) copy4_async(Cs + i * Np + 4 * u, src.C(grp, s_a + i), 4 * u, N);
        for (int i = i0; i < W; i += rstep) {
          const int64_t pos = w_lo + i;
          for (int u = u0; u < units; u += ustep)
            copy4_async(Bw + i * Np + 4 * u, pos >= lo ? src.B(grp, pos) : nullptr, 4 * u, N);
        }
        ptx::cp_async_commit();
        ptx::cp_async_wait<0>();
      }
      __syncthreads();
      if (i_own < m) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int dd = dq + 16 * u;
          if (dd >= dn) break;
          const bool live = s_a + i_own - (d0 + dd) >= lo;
          band[band_at(r + i_own, sh.groups, grp, G, d0 + dd)] =
              live ? cb_dot(Cs + i_own * Np, Bw + (i_own + dn - 1 - dd) * Np, N) : 0.0f;
        }
      }
      if constexpr (kParts > 0) {
        // At the sequence's first row the window's first 15 B rows are the ring's (zeros before position 0).
        const int pre = s_a == start ? kSsdTcRingRows : 0;
        store_rows16<kParts, kThreads>(Cs, Bw, Np, m, r, pre, p.num_rows + kSsdTcRingRows * seq, sh.groups, grp,
                                       rows16);
      }
    }
    r = rb;
  }
}

}  // namespace

void launch_band(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                 const SsdState& st, float* band, cudaStream_t s, uint16_t* rows16, bool split, int programmatic) {
  if (p.num_cell_tasks <= 0 || p.num_rows <= 0) return;
  if (rows16 != nullptr && (sh.N != kN || g.cell != kSsdTcRingRows + 1))
    throw Error("ssd band: bf16 rows need N " + std::to_string(kN) + " and cell 16");
  const int dn = g.cell < kDist ? g.cell : kDist;
  const std::size_t smem = static_cast<std::size_t>(2 * kRows + dn - 1) * row_pad(sh.N) * sizeof(float);
  const dim3 grid(static_cast<unsigned>((p.num_rows + kRows - 1) / kRows), static_cast<unsigned>(sh.groups),
                  static_cast<unsigned>((g.cell + kDist - 1) / kDist));
  auto go = [&](auto kernel) {
    ensure_smem(kernel, smem, "ssd band smem");
    if (programmatic == 2)
      launch_programmatic_if(true, kernel, grid, dim3(kThreads), smem, s, "ssd band", sh, g, p, xbc, ld, st, band,
                             rows16);
    else
      kernel<<<grid, kThreads, smem, s>>>(sh, g, p, xbc, ld, st, band, rows16);
  };
  if (programmatic < 0 || programmatic > 2 || (programmatic > 0 && rows16 == nullptr))
    throw Error("ssd band: programmatic launch " + std::to_string(programmatic) + " (0-2, and only with bf16 rows)");
  if (rows16 == nullptr) go(band_kernel<0, 0>);
  else if (programmatic == 1) split ? go(band_kernel<4, 1>) : go(band_kernel<2, 1>);
  else if (programmatic == 2) split ? go(band_kernel<4, 2>) : go(band_kernel<2, 2>);
  else if (split) go(band_kernel<4, 0>);
  else go(band_kernel<2, 0>);
  check_launch("ssd band");
}

}  // namespace parity::cuda::ssd
