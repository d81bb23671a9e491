// The replay half of exact mode's one-row decode (ssd_replay.cuh): per (sequence, group, chunk of up
// to four heads of the group), one warp per head. Row t sits at index j of head h's cell (rows 0..j-1
// in the replay ring, row j in this call).
//   1. C·B dots, once for the block's heads: cb[d] = cb_dot(C_t, B_{t-d}) for d = 0 .. the deepest j
//      of its heads (a head's row i is position t - (j - i), so its coefficient takes cb[j - i]).
//   2. per head: cum_i over its cell's rows (cum_term, then one left-to-right sum from 0), the row
//      weights w_i = row_weight(cum_j, cum_i, dt_i) and coefficients coef_i = w_i · cb[j - i];
//   3. per head and p: intra[p] = Σ_{i≤j} coef_i · x_i[p], one fmaf chain over i ascending.
// These are ssd_decode.cu's operations on the same inputs (and so prefill's): only the place where
// each value is formed moved. The record (cum_j, intra, and w for a head whose cell ends at t) goes
// to scratch for the state half; row t goes into the replay ring (x, dt by its head's warp, B by the
// group's first head).
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_replay.cuh"
#include "kernels_cuda/ssd_tile.cuh"

namespace parity::cuda::ssd {
namespace {

constexpr int kWarps = 4;  // heads per block (kStepThreads = 128 threads)
constexpr int kRows = 32;  // B rows, and x rows per head, staged at a time

struct ReplayLayout {
  int R, XP, Np;
  std::size_t C, B, cb, x, dts, cum, coef, intra, total;  // floats
};
__host__ __device__ inline ReplayLayout replay_layout(const SsdShape& sh, int cell) {
  ReplayLayout l{};
  l.R = cell < kRows ? cell : kRows;
  l.XP = (sh.P + 3) / 4 * 4;
  l.Np = padded_row(sh.N);
  Carve c;
  l.C = c.take(sh.N);
  l.B = c.take(static_cast<std::size_t>(l.R) * l.Np);
  l.cb = c.take(cell);
  l.x = c.take(static_cast<std::size_t>(kWarps) * l.R * l.XP);
  l.dts = c.take(static_cast<std::size_t>(kWarps) * cell);
  l.cum = c.take(static_cast<std::size_t>(kWarps) * cell);
  l.coef = c.take(static_cast<std::size_t>(kWarps) * cell);
  l.intra = c.take(static_cast<std::size_t>(kWarps) * l.XP);  // sums carried between x stages
  l.total = c.at;
  return l;
}

// Grid: x = sequence, y = group · chunks + chunk; heads (group, chunk·4 + warp).
__global__ void __launch_bounds__(kStepThreads, 8) replay_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc,
                                                              int ld, const float* dt, const float* A, SsdState st,
                                                              int chunks, float* records) {
  // The state half (launched after this one with programmatic serialization) may start now: it
  // copies its state tile and waits for this grid's completion before it reads a record.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int seq = blockIdx.x, grp = static_cast<int>(blockIdx.y) / chunks;
  const int chunk = static_cast<int>(blockIdx.y) - grp * chunks;
  const int n_rows = p.n[seq], slot = p.slot[seq], row0 = p.row0[seq];
  const int64_t start = p.start[seq];
  if (!uses_decode_row(g, n_rows)) return;
  const int H = sh.H, P = sh.P, N = sh.N, cell = g.cell, hpg = sh.heads_per_group();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int h0 = grp * hpg + chunk * kWarps;
  const int nh = hpg - chunk * kWarps < kWarps ? hpg - chunk * kWarps : kWarps;  // heads of this block
  const ReplayLayout lo = replay_layout(sh, cell);
  const int R = lo.R, XP = lo.XP, Np = lo.Np;

  // Every head's row index j in its cell and its ring slot of the cell's first row; the block's
  // deepest j.
  const int bt = static_cast<int>(start % cell);  // also the B ring slot of position t
  int jh[kWarps] = {0, 0, 0, 0}, xs0[kWarps] = {0, 0, 0, 0};
  int jmax = 0;
  for (int k = 0; k < nh; ++k) {
    const RowInCell rc = row_in_cell(g, h0 + k, H, start, bt);
    jh[k] = rc.j;
    xs0[k] = rc.xs0;
    jmax = jh[k] > jmax ? jh[k] : jmax;
  }
  const bool mine = warp < nh;
  const int kw = mine ? warp : 0;
  const int h = h0 + kw;
  const RowInCell own = row_in_cell(g, h, H, start, bt);
  const int j = own.j, rows = j + 1;
  const bool fold = own.fold;

  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float *Cs = smem + lo.C, *Bs = smem + lo.B, *cb = smem + lo.cb, *xs = smem + lo.x;
  float* dts = smem + lo.dts + static_cast<std::size_t>(warp) * cell;
  float* cum = smem + lo.cum + static_cast<std::size_t>(warp) * cell;
  float* coef = smem + lo.coef + static_cast<std::size_t>(warp) * cell;
  float* part = smem + lo.intra + static_cast<std::size_t>(warp) * XP;

  const float* cur = xbc + static_cast<std::size_t>(row0) * ld;
  const int I = H * P;
  // Sources: B of position t - d (d = 0: this call's row; else the ring, slot = position mod cell);
  // head k's x row i and dt of row i (i = its j: this call's; else its ring slot).
  const std::size_t bbase = (static_cast<std::size_t>(slot) * sh.groups + grp) * cell;
  auto B_of = [&](int d) -> const float* {
    return d == 0 ? cur + I + static_cast<std::size_t>(grp) * N
                  : st.ring_B + (bbase + static_cast<std::size_t>(bt - d < 0 ? bt - d + cell : bt - d)) * N;
  };
  auto x_slot = [&](int k, int i) { return xs0[k] + i >= cell ? xs0[k] + i - cell : xs0[k] + i; };
  auto x_of = [&](int k, int i) -> const float* {
    const int hk = h0 + k;
    if (i == jh[k]) return cur + static_cast<std::size_t>(hk) * P;
    return st.ring_x + ((static_cast<std::size_t>(slot) * H + hk) * cell + x_slot(k, i)) * P;
  };
  auto dt_of = [&](int i) -> const float* {
    if (i == j) return dt + static_cast<std::size_t>(row0) * H + h;
    return st.ring_dt + (static_cast<std::size_t>(slot) * H + h) * cell + x_slot(kw, i);
  };
  // Stage s of B rows (d in [s·R, s·R + R), d ≤ jmax) and of every head's x rows (i in the same range).
  auto stage_B = [&](int d0) {
    const int rc = jmax + 1 - d0 < R ? jmax + 1 - d0 : R;
    stage_rows(Bs, Np, rc, N, [&](int i) { return B_of(d0 + i); });
  };
  auto stage_x = [&](int i0) {
    for (int k = 0; k < nh; ++k) {
      const int rc = jh[k] + 1 - i0 < R ? jh[k] + 1 - i0 : R;
      if (rc > 0)
        stage_rows(xs + static_cast<std::size_t>(k) * R * XP, XP, rc, P, [&](int ii) { return x_of(k, i0 + ii); });
    }
  };

  // One group: C_t, every head's dt rows, the first stage of B and x rows.
  stage_vec(Cs, cur + I + static_cast<std::size_t>(sh.groups) * N + static_cast<std::size_t>(grp) * N, N);
  if (mine)
    for (int i = lane; i < rows; i += 32) cp_async4(dts + i, dt_of(i));
  stage_B(0);
  stage_x(0);
  cp_async_commit();

  // Row t into the ring (x and dt of each head, B by the group's first head). No block of this launch
  // or of the state half reads these slots: the rows replayed are the ones before t in each cell.
  if (mine) {
    const std::size_t xb = (static_cast<std::size_t>(slot) * H + h) * cell + x_slot(kw, j);
    const float* xt = cur + static_cast<std::size_t>(h) * P;
    for (int e = lane; e < P; e += 32) st.ring_x[xb * P + e] = xt[e];
    if (lane == 0) st.ring_dt[xb] = *dt_of(j);
    if (h % hpg == 0) {
      const float* Bt = B_of(0);
      for (int n = lane; n < N; n += 32) st.ring_B[(bbase + bt) * N + n] = Bt[n];
    }
  }
  const float Ah = A[h];

  // 1. The C·B dots, a stage of B rows at a time.
  for (int d0 = 0;;) {
    cp_async_wait<0>();
    __syncthreads();
    const int rc = jmax + 1 - d0 < R ? jmax + 1 - d0 : R;
    for (int ii = tid; ii < rc; ii += kStepThreads) cb[d0 + ii] = cb_dot(Cs, Bs + ii * Np, N);
    d0 += R;
    if (d0 > jmax) break;
    __syncthreads();  // the stage is consumed
    stage_B(d0);
    cp_async_commit();
  }
  __syncthreads();  // cb complete

  // 2. cum (every lane runs the one left-to-right sum; lane i % 32 keeps cum_i), weights, coefficients.
  float* rec = records + (static_cast<std::size_t>(seq) * H + h) * replay_record_floats(P, cell);
  float cj = 0.0f;
  if (mine) {
    float run = 0.0f;
    for (int i = 0; i < rows; ++i) {
      run = run + cum_term(dts[i], Ah);
      if ((i & 31) == lane) cum[i] = run;
    }
    cj = run;
    __syncwarp();
    for (int i = lane; i < rows; i += 32) {
      const float w = row_weight(cj, cum[i], dts[i]);
      coef[i] = w * cb[j - i];
      if (fold) rec[replay_w_at(P) + i] = w;
    }
    __syncwarp();
  }

  // 3. The intra-cell sums, a stage of x rows at a time (stage 0 has arrived with B's first stage).
  for (int i0 = 0;;) {
    if (mine && i0 < rows) {  // a head whose rows ended in an earlier stage has written its sums
      const int rc = rows - i0 < R ? rows - i0 : R;
      const float* xk = xs + static_cast<std::size_t>(warp) * R * XP;
      for (int q = lane; q < P; q += 32) {
        float a = i0 > 0 ? part[q] : 0.0f;
        for (int ii = 0; ii < rc; ++ii) a = fmaf(coef[i0 + ii], xk[ii * XP + q], a);
        if (i0 + R >= rows) {
          rec[replay_intra_at() + q] = a;
        } else {
          part[q] = a;
        }
      }
    }
    i0 += R;
    if (i0 > jmax) break;
    __syncthreads();  // the stage is consumed
    stage_x(i0);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
  }
  if (mine && lane == 0) rec[0] = cj;
}

}  // namespace

void launch_replay(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                   const float* dt, const float* A, const SsdState& st, float* records, cudaStream_t s) {
  const std::size_t smem = replay_layout(sh, g.cell).total * sizeof(float);
  ensure_smem(replay_kernel, smem, "ssd replay smem");
  const int chunks = (sh.heads_per_group() + kWarps - 1) / kWarps;
  replay_kernel<<<dim3(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(sh.groups * chunks)), kStepThreads,
                  smem, s>>>(sh, g, p, xbc, ld, dt, A, st, chunks, records);
  check_launch("ssd replay");
}

}  // namespace parity::cuda::ssd
