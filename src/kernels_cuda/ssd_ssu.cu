// Plain mode's one-token decode (vLLM's selective state update), per (sequence, p-tile, head):
//   S[p][n] ← fmaf(exp(dt·A), S[p][n], (dt·x[p])·B[n])   rounded to bf16 for a bf16 state
//   y[p]    = dot(C, S[p]) + D·x[p]                       the quarter-sum dot (ssd_device.cuh)
// The step reads and writes the state once: it is memory-bound, so the kernel is built for bytes in
// flight (ssd_tile.cuh). The tile is requested at once with 16-byte asynchronous copies (a bf16
// tile stays bf16 on chip), updated in shared memory, written back with 16- or 8-byte stores, and
// the dot reads the updated rows from shared memory, four threads per row.
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/programmatic_launch.cuh"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssu_tile.cuh"

namespace parity::cuda::ssd {
namespace {

// Grid: x = sequence · tiles + p-tile, y = head.
__global__ void __launch_bounds__(kStepThreads) ssu_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc,
                                                           int ld, const float* dt, const float* A,
                                                           const float* Dskip, SsdState st, int TP, int tiles,
                                                           float* y, bool release_first) {
  const int seq = static_cast<int>(blockIdx.x) / tiles, z = static_cast<int>(blockIdx.x) - seq * tiles;
  const int h = blockIdx.y;
  // The sequence's metadata in one round trip, then the test.
  const int n_rows = p.n[seq], slot = p.slot[seq], row0 = p.row0[seq];
  const int64_t start = p.start[seq];
  if (!uses_ssu(g, start, n_rows)) return;
  const Tile t = tile_of(sh, slot, h, TP, z);
  const bool bf16 = st.state_f32 == nullptr;
  const SsuLayout lo = ssu_layout(sh, TP, bf16);

  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float *S = smem + lo.S, *Cs = smem + lo.C, *Bs = smem + lo.B, *xs = smem + lo.x;
  uint16_t* raw = reinterpret_cast<uint16_t*>(smem + lo.S);

  const float* row = xbc + static_cast<std::size_t>(row0) * ld;
  stage_state(st, t, S, raw);
  // Launched programmatically: the state (this layer's, written by an earlier pass) is on its way
  // while the conv before this kernel finishes; its outputs (x, B, C, dt) are read after the wait.
  // (early_start.h's kGemmEarlyMixerChain: the gated norm may be scheduled before this wait.)
  wait_and_release(release_first);
  ssu_stage_inputs(sh, t, h, row, Cs, Bs, xs);
  cp_async_commit();
  const float d = dt[static_cast<std::size_t>(row0) * sh.H + h];
  const float dA = exp_f(d * A[h]);
  const float Dh = Dskip[h];
  cp_async_wait<0>();
  __syncthreads();
  float* yrow = y + static_cast<std::size_t>(row0) * sh.H * sh.P + static_cast<std::size_t>(h) * sh.P + t.p0;
  ssu_tile_step(st, t, S, raw, Cs, Bs, xs, d, dA, Dh, yrow, [] { __syncthreads(); });
}

}  // namespace

void launch_ssu(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
                const float* A, const float* D, const SsdState& st, int tp, float* y, cudaStream_t s) {
  const bool bf16 = st.state_f32 == nullptr;
  const std::size_t smem = ssu_layout(sh, tp, bf16).total * sizeof(float);
  ensure_smem(ssu_kernel, smem, "ssd ssu smem");
  const int tiles = (sh.P + tp - 1) / tp;
  launch_after_prior(ssu_kernel, dim3(static_cast<unsigned>(p.num_seqs * tiles), static_cast<unsigned>(sh.H)),
                     dim3(kStepThreads), smem, s, "ssd ssu", sh, g, p, xbc, ld, dt, A, D, st, tp, tiles, y,
                     (gemm_early_flags() & (kGemmEarlyMixerChain | kGemmEarlySsmFirst)) != 0);
}

}  // namespace parity::cuda::ssd
