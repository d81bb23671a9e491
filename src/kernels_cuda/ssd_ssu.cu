// Plain mode's one-token decode (vLLM's selective state update), per (sequence, p-tile, head):
//   S[p][n] ← fmaf(exp(dt·A), S[p][n], (dt·x[p])·B[n])   rounded to bf16 for a bf16 state
//   y[p]    = dot(C, S[p]) + D·x[p]                       the quarter-sum dot (ssd_device.cuh)
// The step reads and writes the state once: it is memory-bound, so the kernel is built for bytes in
// flight (ssd_tile.cuh). The tile is requested at once with 16-byte asynchronous copies (a bf16
// tile stays bf16 on chip), updated in shared memory, written back with 16- or 8-byte stores, and
// the dot reads the updated rows from shared memory, four threads per row.
#include <atomic>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/gated_norm_tail.h"
#include "kernels_cuda/norm_row.cuh"
#include "kernels_cuda/programmatic_launch.cuh"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssu_tile.cuh"

namespace parity::cuda::ssd {
namespace {

// Reads another block's y through L2 (ld.global.cg): this SM's L1 may hold a line of y that a store of
// its own block allocated before the other half of the line was written.
struct L2Row {
  const float* p;
  __device__ float operator[](int i) const { return __ldcg(p + i); }
};

// gated_norm_tail.h: the block counts itself done for its sequence; the sequence's last block runs the
// gated norm over the row (every group, in order) with all kRowThreads threads and sets the count back.
__device__ void gated_norm_tail(const GatedNormTail& job, int seq, int row, int blocks) {
  __shared__ bool last;
  __threadfence();  // this block's y before its count
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(job.counts + seq, 1) == blocks - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();  // every other block's count, hence its y, came before this one
  if (threadIdx.x == 0) job.counts[seq] = 0;
  const GatedA& a = job.a;
  const std::size_t r = static_cast<std::size_t>(row);
  for (int g0 = 0; g0 < job.dim; g0 += a.group) {
    float wk[norm_row::kHeld];
    norm_row::load_held_weights(a.w + g0, a.group, wk);
    float* out = job.out + r * job.dim + g0;
    std::uint16_t* out16 = job.out16 ? job.out16 + r * job.dim + g0 : nullptr;
    norm_row::gated_norm_held(
        L2Row{a.y + r * job.dim + g0}, a.z + r * job.ldz + g0, a.group, wk, a.eps, a.norm_before_gate,
        [&](int i, float v) {
          out[i] = v;
          if (out16) out16[i] = norm_row::bf16_bits(v);
        },
        a.z_activated);
  }
}

// Grid: x = sequence · tiles + p-tile, y = head. NORM: kRowThreads threads, the first kStepThreads run the
// step (named barrier 1), then gated_norm_tail with all of them.
template <bool NORM>
__global__ void __launch_bounds__(NORM ? norm_row::kRowThreads : kStepThreads)
    ssu_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* A,
               const float* Dskip, SsdState st, int TP, int tiles, float* y, bool release_first,
               const __grid_constant__ GatedNormTail tail) {
  const int seq = static_cast<int>(blockIdx.x) / tiles, z = static_cast<int>(blockIdx.x) - seq * tiles;
  const int h = blockIdx.y;
  // The sequence's metadata in one round trip, then the test (NORM: the host takes the tail only where
  // every sequence is one SSU row, so no block leaves here).
  const int n_rows = p.n[seq], slot = p.slot[seq], row0 = p.row0[seq];
  const int64_t start = p.start[seq];
  if (!uses_ssu(g, start, n_rows)) return;
  const bool stepper = !NORM || threadIdx.x < kStepThreads;
  auto sync = [] {
    if constexpr (NORM) asm volatile("bar.sync 1, %0;\n" ::"n"(kStepThreads) : "memory");
    else __syncthreads();
  };
  const Tile t = tile_of(sh, slot, h, TP, z);
  const bool bf16 = st.state_f32 == nullptr;
  const SsuLayout lo = ssu_layout(sh, TP, bf16);

  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float *S = smem + lo.S, *Cs = smem + lo.C, *Bs = smem + lo.B, *xs = smem + lo.x;
  uint16_t* raw = reinterpret_cast<uint16_t*>(smem + lo.S);

  const float* row = xbc + static_cast<std::size_t>(row0) * ld;
  if (stepper) stage_state(st, t, S, raw);
  // Launched programmatically: the state (this layer's, written by an earlier pass) is on its way
  // while the conv before this kernel finishes; its outputs (x, B, C, dt) are read after the wait.
  // (early_start.h's kGemmEarlyMixerChain: the gated norm may be scheduled before this wait.)
  wait_and_release(release_first);
  if (stepper) {
    ssu_stage_inputs(sh, t, h, row, Cs, Bs, xs);
    cp_async_commit();
    const float d = dt[static_cast<std::size_t>(row0) * sh.H + h];
    const float dA = exp_f(d * A[h]);
    const float Dh = Dskip[h];
    cp_async_wait<0>();
    sync();
    float* yrow = y + static_cast<std::size_t>(row0) * sh.H * sh.P + static_cast<std::size_t>(h) * sh.P + t.p0;
    ssu_tile_step(st, t, S, raw, Cs, Bs, xs, d, dA, Dh, yrow, sync);
  }
  if constexpr (NORM) gated_norm_tail(tail, seq, row0, tiles * static_cast<int>(gridDim.y));
}

// with_gated_norm_tail's job on this thread (null: none), and whether a launch took it.
thread_local const GatedNormTail* t_tail = nullptr;
thread_local bool t_tail_taken = false;
std::atomic<bool> tail_on{kGatedNormTailDefault};

}  // namespace

void launch_ssu(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
                const float* A, const float* D, const SsdState& st, int tp, float* y, cudaStream_t s) {
  const bool bf16 = st.state_f32 == nullptr;
  const std::size_t smem = ssu_layout(sh, tp, bf16).total * sizeof(float);
  const int tiles = (sh.P + tp - 1) / tp;
  const dim3 grid(static_cast<unsigned>(p.num_seqs * tiles), static_cast<unsigned>(sh.H));
  const bool release_first = (gemm_early_flags() & kGemmEarlyMixerChain) != 0;
  const GatedNormTail* job = t_tail;
  const bool norm = job != nullptr && tail_on.load() && p.one_row_each && p.num_ssu_seqs == p.num_seqs &&
                    p.num_decode_seqs == 0 && job->a.group > 0 && job->a.group <= norm_row::kHeldMaxWidth &&
                    job->dim % job->a.group == 0 && job->dim == sh.H * sh.P && job->counts != nullptr;
  if (norm) {
    ensure_smem(ssu_kernel<true>, smem, "ssd ssu smem (gated norm tail)");
    launch_after_prior(ssu_kernel<true>, grid, dim3(norm_row::kRowThreads), smem, s, "ssd ssu + gated norm", sh, g, p,
                       xbc, ld, dt, A, D, st, tp, tiles, y, release_first, *job);
    t_tail_taken = true;
    return;
  }
  ensure_smem(ssu_kernel<false>, smem, "ssd ssu smem");
  launch_after_prior(ssu_kernel<false>, grid, dim3(kStepThreads), smem, s, "ssd ssu", sh, g, p, xbc, ld, dt, A, D, st,
                     tp, tiles, y, release_first, GatedNormTail{});
}

}  // namespace parity::cuda::ssd

namespace parity::cuda {

bool with_gated_norm_tail(const GatedNormTail& job, const std::function<void()>& enqueue) {
  struct Restore {
    const GatedNormTail* prev;
    bool taken;
    ~Restore() {
      ssd::t_tail = prev;
      ssd::t_tail_taken = taken;
    }
  } restore{ssd::t_tail, ssd::t_tail_taken};
  ssd::t_tail = &job;
  ssd::t_tail_taken = false;
  enqueue();
  return ssd::t_tail_taken;
}
bool gated_norm_tail() { return ssd::tail_on.load(); }
void set_gated_norm_tail(bool on) { ssd::tail_on.store(on); }

}  // namespace parity::cuda
