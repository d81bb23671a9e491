// Plain mode's one-token decode (vLLM's selective state update), per (sequence, head, p-tile):
//   S[p][n] ← fmaf(exp(dt·A), S[p][n], (dt·x[p])·B[n])   rounded to bf16 for a bf16 state
//   y[p]    = dot(C, S[p]) + D·x[p]                       the quarter-sum dot (ssd_device.cuh)
// The step reads and writes the state once: it is memory-bound, so the kernel is built for bytes in
// flight. The whole tile (32 KB for a 64 × 128 fp32 head) is requested at once with 16-byte
// asynchronous copies, updated in shared memory, written back with 16-byte stores, and the dot
// reads the updated rows from shared memory, four threads per row. (The first version moved 4
// bytes per thread per round trip and left the dot to a quarter of the threads with 8-way bank
// conflicts: about 0.5 TB/s.)
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_tile.cuh"

namespace parity::cuda::ssd {
namespace {

struct SsuLayout {
  std::size_t S, C, B, x, raw, total;  // floats
};
__host__ __device__ inline SsuLayout ssu_layout(const SsdShape& sh, int tp, bool bf16) {
  Carve c;
  SsuLayout l{};
  l.S = c.take(static_cast<std::size_t>(tp) * padded_row(sh.N));
  l.C = c.take(sh.N);
  l.B = c.take(sh.N);
  l.x = c.take(tp);
  l.raw = c.take(bf16 ? (static_cast<std::size_t>(tp) * sh.N + 1) / 2 : 0);
  l.total = c.at;
  return l;
}

__global__ void __launch_bounds__(kStepThreads) ssu_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc,
                                                           int ld, const float* dt, const float* A,
                                                           const float* Dskip, SsdState st, int TP, float* y) {
  const int seq = blockIdx.x, h = blockIdx.y;
  const int64_t start = p.start[seq];
  if (!uses_ssu(g, start, p.n[seq])) return;
  const RowSource src = source_of(sh, g, p, seq, xbc, ld, dt, st);
  const Tile t = tile_of(sh, src.slot, h, TP);
  const int grp = h / sh.heads_per_group(), N = sh.N, Np = t.Np;
  const bool bf16 = st.state_f32 == nullptr;
  const SsuLayout lo = ssu_layout(sh, TP, bf16);

  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float *S = smem + lo.S, *Cs = smem + lo.C, *Bs = smem + lo.B, *xs = smem + lo.x;
  uint16_t* raw = reinterpret_cast<uint16_t*>(smem + lo.raw);

  stage_state(st, t, S, raw);
  stage_rows(Cs, N, 1, N, [&](int) { return src.C(grp, start); });
  stage_rows(Bs, N, 1, N, [&](int) { return src.B(grp, start); });
  stage_rows(xs, t.tp, 1, t.tp, [&](int) { return src.x(h, start) + t.p0; });
  cp_async_commit();
  const float d = src.dtv(h, start);
  const float dA = exp_f(d * A[h]);
  cp_async_wait<0>();
  __syncthreads();

  for (int c = threadIdx.x; c < tile_chunks(t); c += kStepThreads) {
    const int e = 4 * c, r = e / N, n = e % N;
    float* s = S + r * Np + n;
    const float dx = d * xs[r];
    float v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float old = bf16 ? widen_bf16(raw[e + k]) : s[k];
      const float u = fmaf(dA, old, dx * Bs[n + k]);
      v[k] = bf16 ? round_bf16(u) : u;
      s[k] = v[k];
    }
    store4(st, t, e, v);
  }
  __syncthreads();
  const float Dh = Dskip[h];
  float* yrow = y + static_cast<std::size_t>(src.row0) * sh.H * sh.P + static_cast<std::size_t>(h) * sh.P + t.p0;
  tile_dots(Cs, S, Np, N, t.tp, [&](int r, float dot) { yrow[r] = dot + Dh * xs[r]; });
}

}  // namespace

void launch_ssu(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
                const float* A, const float* D, const SsdState& st, int tp, float* y, cudaStream_t s) {
  const bool bf16 = st.state_f32 == nullptr;
  const std::size_t smem = ssu_layout(sh, tp, bf16).total * sizeof(float);
  ensure_smem(ssu_kernel, smem, "ssd ssu smem");
  const unsigned tiles = static_cast<unsigned>((sh.P + tp - 1) / tp);
  ssu_kernel<<<dim3(p.num_seqs, sh.H, tiles), kStepThreads, smem, s>>>(sh, g, p, xbc, ld, dt, A, D, st, tp, y);
  check_launch("ssd ssu");
}

}  // namespace parity::cuda::ssd
