// The state half of exact mode's one-row decode (ssd_replay.cuh), per (sequence, p-tile, head):
//   y_t[p] = row_output(cum_j, dot(C_t, S[p]), intra[p], D, x_t[p])
// with S the cell's start state (the slot) and cum_j, intra from the replay's record; a head whose
// cell ends at row t then folds it: S ← fold_element(exp(cum_j), S, Σ_{i≤j} (w_i · x_i[p]) · B_i[n]),
// each element's delta one fmaf chain over i ascending with ssd_decode.cu's operations (the x and B
// rows read from the ring, L1-resident: a stage on chip would cost every block the shared memory that
// only the folding few use).
//
// A block copies its state tile, C_t and x_t first (none is written by the replay), then waits for
// the replay grid (griddepcontrol.wait: a no-op when launched without programmatic serialization),
// then reads the record. What is left after the state arrives is the SSU's shape: the dots and the
// output, no replay work. Heads are launched heaviest-first as in ssd_decode.cu (heavy_first_head).
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_replay.cuh"
#include "kernels_cuda/ssd_tile.cuh"

namespace parity::cuda::ssd {
namespace {

struct StateLayout {
  std::size_t S, C, xt, intra, w, rowp, total;  // floats (rowp: 2·cell pointers)
};
__host__ __device__ inline StateLayout state_layout(const SsdShape& sh, int cell, int tp, bool bf16) {
  Carve c;
  StateLayout l{};
  l.S = c.take(tile_floats(tp, sh.N, bf16));
  l.C = c.take(sh.N);
  l.xt = c.take(tp);
  l.intra = c.take(tp);
  l.w = c.take(cell);
  l.rowp = c.take(4 * static_cast<std::size_t>(cell));
  l.total = c.at;
  return l;
}

__device__ inline void wait_for_replay() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// Grid: x = sequence · tiles + p-tile, y = launch slot of the head. 12 blocks an SM (40 registers; 48
// unbounded): what the default tile's shared memory allows (18 KB fp32 or bf16); the SSU holds 13.
__global__ void __launch_bounds__(kStepThreads, 12)
    decode_state_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* Dskip,
                        SsdState st, const float* records, int TP, int tiles, float* y) {
  const int seq = static_cast<int>(blockIdx.x) / tiles, z = static_cast<int>(blockIdx.x) - seq * tiles;
  const int tid = threadIdx.x;
  const int n_rows = p.n[seq], slot = p.slot[seq], row0 = p.row0[seq];
  const int64_t start = p.start[seq];
  if (!uses_decode_row(g, n_rows)) {
    wait_for_replay();  // every block waits: the launches after this one then follow the replay too
    return;
  }
  const int H = sh.H, P = sh.P, N = sh.N, cell = g.cell;
  const int tmod = static_cast<int>(start % cell);  // the one 64-bit division (row_in_cell)
  const int h = heavy_first_head(g, H, tmod, blockIdx.y);
  const Tile t = tile_of(sh, slot, h, TP, z);
  const int grp = h / sh.heads_per_group(), tp = t.tp;
  const bool bf16 = st.state_f32 == nullptr;
  const StateLayout lo = state_layout(sh, cell, TP, bf16);
  const RowInCell rc = row_in_cell(g, h, H, start, tmod);
  const int j = rc.j, rows = j + 1;
  const bool fold = rc.fold;

  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float *S = smem + lo.S, *Cs = smem + lo.C, *xt = smem + lo.xt, *intra = smem + lo.intra, *ws = smem + lo.w;
  uint16_t* raw = reinterpret_cast<uint16_t*>(smem + lo.S);

  const float* cur = xbc + static_cast<std::size_t>(row0) * ld;
  const int I = H * P;
  stage_state(st, t, S, raw);
  stage_vec(Cs, cur + I + static_cast<std::size_t>(sh.groups) * N + static_cast<std::size_t>(grp) * N, N);
  stage_vec(xt, cur + static_cast<std::size_t>(h) * P + t.p0, tp);
  cp_async_commit();
  const float Dh = Dskip[h];

  // The record, read through L2 (ld.global.cg: it was written by the replay grid, on other SMs, while
  // this block may already have been running).
  wait_for_replay();
  const float* rec = records + (static_cast<std::size_t>(seq) * H + h) * replay_record_floats(P, cell);
  for (int r = tid; r < tp; r += kStepThreads) intra[r] = __ldcg(rec + replay_intra_at() + t.p0 + r);
  if (fold)
    for (int i = tid; i < rows; i += kStepThreads) ws[i] = __ldcg(rec + replay_w_at(P) + i);
  const float cj = __ldcg(rec);
  cp_async_wait<0>();
  __syncthreads();

  float* yrow = y + static_cast<std::size_t>(row0) * I + static_cast<std::size_t>(h) * P + t.p0;
  tile_dots(Cs, t, S, raw, bf16, [&](int r, float dot) { yrow[r] = row_output(cj, dot, intra[r], Dh, xt[r]); });
  if (!fold) return;

  // The fold. Source row i: this call's row (i = j) or the ring's (x: the head's slots from its
  // cell's first row's, mod cell; B: position mod cell), its two addresses looked up from a table
  // (fewer live registers in the loop than carrying the ring slots: 48 for the kernel against 64).
  const float** xrow = reinterpret_cast<const float**>(smem + lo.rowp);
  const float** brow = xrow + cell;
  for (int i = tid; i < rows; i += kStepThreads) {
    const int xs = rc.xs0 + i >= cell ? rc.xs0 + i - cell : rc.xs0 + i;  // ring slots of row i
    const int bs = tmod - j + i < 0 ? tmod - j + i + cell : tmod - j + i;
    xrow[i] = i == j ? cur + static_cast<std::size_t>(h) * P + t.p0
                     : st.ring_x + ((static_cast<std::size_t>(slot) * H + h) * cell + xs) * P + t.p0;
    brow[i] = i == j ? cur + I + static_cast<std::size_t>(grp) * N
                     : st.ring_B + ((static_cast<std::size_t>(slot) * sh.groups + grp) * cell + bs) * N;
  }
  __syncthreads();
  const float decay = exp_f(cj);  // ssd_deltas.cu's cell_decay: exp(cum_{L-1})
  for (Walk w(N / 4); w.r < tp; w.next()) {
    const int n = 4 * w.c, e = w.r * N + n;
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < rows; ++i) {
      const float* br = brow[i] + n;
      const float xw = ws[i] * xrow[i][w.r];  // ssd_deltas.cu: xw = w_i · x_i[p], then fmaf(xw, B_i[n], acc)
      a[0] = fmaf(xw, br[0], a[0]);
      a[1] = fmaf(xw, br[1], a[1]);
      a[2] = fmaf(xw, br[2], a[2]);
      a[3] = fmaf(xw, br[3], a[3]);
    }
    const float4 s = tile_load4(t, S, raw, bf16, w.r, n);
    const float v[4] = {fold_element(decay, s.x, a[0], bf16), fold_element(decay, s.y, a[1], bf16),
                        fold_element(decay, s.z, a[2], bf16), fold_element(decay, s.w, a[3], bf16)};
    store4(st, t, e, v);
  }
}

}  // namespace

void launch_decode_state(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                         const float* D, const SsdState& st, const float* records, int tp, bool pdl, float* y,
                         cudaStream_t s) {
  const bool bf16 = st.state_f32 == nullptr;
  const std::size_t smem = state_layout(sh, g.cell, tp, bf16).total * sizeof(float);
  ensure_smem(decode_state_kernel, smem, "ssd decode state smem");
  const int tiles = (sh.P + tp - 1) / tp;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(p.num_seqs * tiles), static_cast<unsigned>(sh.H), 1);
  cfg.blockDim = dim3(kStepThreads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  cuda_check(cudaLaunchKernelEx(&cfg, decode_state_kernel, sh, g, p, xbc, ld, D, st, records, tp, tiles, y),
             "ssd decode state launch");
}

}  // namespace parity::cuda::ssd
