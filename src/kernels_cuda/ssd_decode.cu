// Exact mode's one-row decode, every such sequence of a pass in one launch over (sequence, head,
// p-tile). Row t of head h sits at index j of its cell (rows 0..j-1 in the replay ring, row j in
// this call); with the cell's start state S (the slot: a one-row call folds nothing before it):
//   y_t[p] = row_output(cum_j, dot(C_t, S[p]), Σ_{i≤j} coef_i · x_i[p], D, x_t[p])
//   coef_i = row_weight(cum_j, cum_i, dt_i) · cb_dot(C_t, B_i)
// and, when t is the cell's last row (j = L−1; heads are staggered, so in one step only some heads
// fold), the fold S ← fold_element(exp(cum_j), S, Σ_i (w_i · x_i[p]) · B_i[n]) with w_i the same
// row_weight. Every value is the same sequence of operations as in the prefill phases
// (ssd_outputs.cu for y, ssd_deltas.cu + ssd_chain.cu for the fold; the shared pieces are the
// functions of ssd_device.cuh), so a row decoded here has the bits a prefill gives it.
// Then row t goes into the replay ring (x, dt; B by the group's first head).
//
// Traffic: the state tile is read once (written only on a fold), the replay rows come with it; all
// of it is requested up front with asynchronous copies, and the serial part (the cum sum, the
// coefficient dots) runs while the state is in flight.
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_tile.cuh"

namespace parity::cuda::ssd {
namespace {

constexpr int kStageRows = 32;  // replay rows staged at a time (a whole cell for G ≤ 32)

struct DecodeLayout {
  int R, XP;                                          // rows per stage; row stride of the x stage
  std::size_t S, raw, B, x, C, dts, cum, wf, coef, inter, total;  // floats
};
__host__ __device__ inline DecodeLayout decode_layout(const SsdShape& sh, int cell, int tp, bool bf16) {
  DecodeLayout l{};
  l.R = cell < kStageRows ? cell : kStageRows;
  l.XP = (tp + 3) / 4 * 4;
  const int Np = padded_row(sh.N);
  Carve c;
  l.S = c.take(static_cast<std::size_t>(tp) * Np);
  l.raw = c.take(bf16 ? (static_cast<std::size_t>(tp) * sh.N + 1) / 2 : 0);
  l.B = c.take(static_cast<std::size_t>(l.R) * Np);
  l.x = c.take(static_cast<std::size_t>(l.R) * l.XP);
  l.C = c.take(sh.N);
  l.dts = c.take(cell);
  l.cum = c.take(cell);
  l.wf = c.take(l.R);
  l.coef = c.take(l.R);
  l.inter = c.take(tp);
  l.total = c.at;
  return l;
}

__global__ void __launch_bounds__(kStepThreads, 3) decode_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc,
                                                              int ld, const float* dt, const float* A,
                                                              const float* Dskip, SsdState st, int TP, float* y) {
  const int seq = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  if (!uses_decode_row(g, p.n[seq])) return;
  const int64_t start = p.start[seq];
  const RowSource src = source_of(sh, g, p, seq, xbc, ld, dt, st);
  const Tile t = tile_of(sh, src.slot, h, TP);
  const int grp = h / sh.heads_per_group(), N = sh.N, Np = t.Np;
  const bool bf16 = st.state_f32 == nullptr;
  const DecodeLayout lo = decode_layout(sh, g.cell, TP, bf16);
  const Cell c = call_cell(g, h, sh.H, start, 0);
  const int j = static_cast<int>(start - c.start);  // the row's index in its cell
  const int rows = j + 1;                            // source rows 0..j
  const bool fold = start + 1 == c.end;              // the row completes the cell

  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float *S = smem + lo.S, *Bs = smem + lo.B, *xs = smem + lo.x, *Cs = smem + lo.C;
  float *dts = smem + lo.dts, *cum = smem + lo.cum, *wf = smem + lo.wf, *coef = smem + lo.coef;
  float* inter = smem + lo.inter;
  uint16_t* raw = reinterpret_cast<uint16_t*>(smem + lo.raw);
  const int R = lo.R, XP = lo.XP;

  // Group 1: what the serial part needs (dt of rows 0..j, C_t, the first stage of rows); group 2:
  // the state tile, which the serial part does not wait for.
  auto stage = [&](int i0, int rc) {
    stage_rows(Bs, Np, rc, N, [&](int i) { return src.B(grp, c.start + i0 + i); });
    stage_rows(xs, XP, rc, t.tp, [&](int i) { return src.x(h, c.start + i0 + i) + t.p0; });
  };
  stage_rows(dts, 1, rows, 1, [&](int i) { return src.dtp(h, c.start + i); });
  stage_rows(Cs, N, 1, N, [&](int) { return src.C(grp, start); });
  stage(0, rows < R ? rows : R);
  cp_async_commit();
  stage_state(st, t, S, raw);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();

  const float Ah = A[h];
  for (int i = tid; i < rows; i += kStepThreads) cum[i] = cum_term(dts[i], Ah);
  __syncthreads();
  if (tid == 0) cum_scan(cum, rows);
  __syncthreads();
  const float cj = cum[j];

  // This thread's outputs: row p = tid of the tile (intra; inter comes from tile_dots through
  // shared memory); when folding, the fold's accumulators of its chunks (4 columns of one row
  // each: chunks tid, tid + 256, ...).
  float intra = 0.0f;
  float acc[kMaxChunks][4];
#pragma unroll
  for (int k = 0; k < kMaxChunks; ++k) acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.0f;
  const int chunks = tile_chunks(t);

  for (int i0 = 0; i0 < rows; i0 += R) {
    const int rc = rows - i0 < R ? rows - i0 : R;
    if (i0 > 0) {
      __syncthreads();  // the previous stage is consumed
      stage(i0, rc);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
    }
    if (tid < rc) {
      const int i = i0 + tid;
      const float w = row_weight(cj, cum[i], dts[i]);
      wf[tid] = w;
      coef[tid] = w * cb_dot(Cs, Bs + tid * Np, N);
    }
    if (i0 == 0) {
      cp_async_wait<0>();  // the state tile
      __syncthreads();
      if (bf16) {
        widen_tile(t, raw, S);
        __syncthreads();
      }
      tile_dots(Cs, S, Np, N, t.tp, [&](int r, float dot) { inter[r] = dot; });
    } else {
      __syncthreads();
    }
    if (tid < t.tp)
      for (int ii = 0; ii < rc; ++ii) intra = fmaf(coef[ii], xs[ii * XP + tid], intra);
    if (fold) {
      for (int ii = 0; ii < rc; ++ii) {
        const float w = wf[ii];
        const float* Brow = Bs + ii * Np;
        const float* xrow = xs + ii * XP;
#pragma unroll
        for (int k = 0; k < kMaxChunks; ++k) {
          const int ch = tid + k * kStepThreads;
          if (ch >= chunks) break;
          const int e = 4 * ch, r = e / N, n = e % N;
          const float xw = w * xrow[r];  // ssd_deltas.cu's w_i · x_i[p]
          const float4 b = *reinterpret_cast<const float4*>(Brow + n);
          acc[k][0] = fmaf(xw, b.x, acc[k][0]);
          acc[k][1] = fmaf(xw, b.y, acc[k][1]);
          acc[k][2] = fmaf(xw, b.z, acc[k][2]);
          acc[k][3] = fmaf(xw, b.w, acc[k][3]);
        }
      }
    }
  }

  __syncthreads();  // inter
  const float* xt = src.x(h, start) + t.p0;  // row t's x, this call's
  if (tid < t.tp)
    y[static_cast<std::size_t>(src.row0) * sh.H * sh.P + static_cast<std::size_t>(h) * sh.P + t.p0 + tid] =
        row_output(cj, inter[tid], intra, Dskip[h], xt[tid]);
  if (fold) {
    const float decay = exp_f(cj);  // ssd_deltas.cu's cell_decay: exp(cum_{L-1})
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      const int ch = tid + k * kStepThreads;
      if (ch >= chunks) break;
      const int e = 4 * ch, r = e / N, n = e % N;
      const float* s = S + r * Np + n;
      float v[4];
      for (int q = 0; q < 4; ++q) v[q] = fold_element(decay, s[q], acc[k][q], bf16);
      store4(st, t, e, v);
    }
  }

  // Row t into the replay ring. No block of this launch reads these slots: the rows replayed here
  // are the ones before t in t's cell, which sit in other slots of the x/dt ring (one per cell
  // row) and of the B ring (position mod cell).
  const int xslot = ring_x_slot(g, h, sh.H, start);
  const std::size_t xb = (static_cast<std::size_t>(src.slot) * sh.H + h) * g.cell + xslot;
  for (int r = tid; r < t.tp; r += kStepThreads) st.ring_x[xb * sh.P + t.p0 + r] = xt[r];
  if (blockIdx.z == 0) {
    if (tid == 0) st.ring_dt[xb] = src.dtv(h, start);
    if (h % sh.heads_per_group() == 0) {
      const std::size_t bb = (static_cast<std::size_t>(src.slot) * sh.groups + grp) * g.cell + start % g.cell;
      const float* Bt = src.B(grp, start);
      for (int n = tid; n < N; n += kStepThreads) st.ring_B[bb * N + n] = Bt[n];
    }
  }
}

}  // namespace

void launch_decode(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                   const float* dt, const float* A, const float* D, const SsdState& st, int tp, float* y,
                   cudaStream_t s) {
  const bool bf16 = st.state_f32 == nullptr;
  const std::size_t smem = decode_layout(sh, g.cell, tp, bf16).total * sizeof(float);
  ensure_smem(decode_kernel, smem, "ssd decode smem");
  const unsigned tiles = static_cast<unsigned>((sh.P + tp - 1) / tp);
  decode_kernel<<<dim3(p.num_seqs, sh.H, tiles), kStepThreads, smem, s>>>(sh, g, p, xbc, ld, dt, A, D, st, tp, y);
  check_launch("ssd decode");
}

}  // namespace parity::cuda::ssd
