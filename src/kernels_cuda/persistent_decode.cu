// persistent_decode.h: a batch-1 plain decode step as one persistent kernel.
#include "kernels_cuda/persistent_decode.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>

#include "kernels_cuda/conv_row.cuh"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/grid_barrier.cuh"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/norm_row.cuh"
#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/ssu_tile.cuh"

namespace parity::cuda {
namespace {

using u64 = std::uint64_t;

constexpr int kThreads = norm_row::kRowThreads;  // 256: the norms' block_sum tree
constexpr int kWarps = kThreads / 32;
constexpr int kConsumers = kWarps - 1;  // warps 0..6: one 16-column task each
constexpr int kProducer = kWarps - 1;   // warp 7, lane 0: the weights' bulk copies
constexpr int kSsuThreads = ssd::kStepThreads;  // warps 0..3 run a head's state update
static_assert(kSsuThreads % 32 == 0 && kSsuThreads < kThreads, "the SSU's threads are whole warps, not the block");
// A stage holds one task's 16 weight rows, kBoxK deep. Rows are padded to an odd number of 16-byte
// units' worth of banks (kBoxK·2 + 16 bytes), so the 8 rows one ldmatrix phase reads fall in distinct banks.
constexpr int kBoxK = 128;
constexpr int kRowPitch = 2 * kBoxK + 16;
constexpr int kStageBytes = 16 * kRowPitch;
constexpr int kStages = 24;
constexpr int kRingBytes = kStages * kStageBytes;
constexpr int kMaxSmem = 227 * 1024;

__host__ __device__ constexpr std::size_t round_up(std::size_t v, std::size_t m) { return (v + m - 1) / m * m; }

// The state tile a head's update stages at once: the whole head when it fits (P rows of N).
__host__ __device__ inline int ssu_rows(const PersistentDecodeShape& s) {
  const int fit = ssd::kMaxTileFloats / s.state;
  return s.head_dim < fit ? s.head_dim : fit;
}

// Dynamic shared memory: the ring, A's bf16 row (in_proj's or out_proj's input), the residual row,
// the SSU's tile and vectors (bytes from the start, each on 128).
struct Layout {
  std::size_t arow, resid, ssu, total;
};
__host__ __device__ inline Layout layout_of(const PersistentDecodeShape& s) {
  Layout l{};
  l.arow = kRingBytes;
  const int widest = s.hidden > s.inner() ? s.hidden : s.inner();
  l.resid = l.arow + round_up(2 * static_cast<std::size_t>(widest), 128);
  l.ssu = l.resid + round_up(4 * static_cast<std::size_t>(s.hidden), 128);
  const SsdShape sh{s.heads, s.head_dim, s.state, s.groups};
  l.total = l.ssu + ssd::ssu_layout(sh, ssu_rows(s), s.bf16_state).total * sizeof(float);
  return l;
}

// A GEMM's share of one block: tasks [t0, t0 + nt) of 16 output columns each, the blocks splitting
// the tasks in contiguous runs. Unit i of the share is task i % nt's box i / nt (kBoxK deep): the
// ring carries the share's units in that order, so the block's warps walk K side by side.
struct GemmShare {
  const uint16_t* w;  // [N][K]
  int N, K, n0, nt, boxes;
  __device__ unsigned units() const { return static_cast<unsigned>(nt * boxes); }
};
__device__ inline GemmShare share_of(const uint16_t* w, int N, int K) {
  const int tasks = (N + 15) / 16;
  const int t0 = static_cast<int>(blockIdx.x) * tasks / static_cast<int>(gridDim.x);
  const int t1 = (static_cast<int>(blockIdx.x) + 1) * tasks / static_cast<int>(gridDim.x);
  return {w, N, K, 16 * t0, t1 - t0, (K + kBoxK - 1) / kBoxK};
}

// The ring: stage s holds units s, s + kStages, ... of the kernel's running count (`base` numbers
// the units of the GEMMs before this one), full[s] completing when a unit's bytes have landed,
// empty[s] when its warp's 32 lanes have read it.
struct Ring {
  unsigned char* stages;
  u64* full;
  u64* empty;
};

// The producer (one thread): units [from, to) of the share into the ring, each waiting for its
// stage's previous unit to have been read. Called with the ring free for the first kStages units
// of a GEMM (the previous GEMM's units all read), it never waits there: the weights stream while
// the block does other work.
__device__ void produce(const Ring& r, const GemmShare& g, unsigned base, unsigned from, unsigned to) {
  for (unsigned i = from; i < to; ++i) {
    const unsigned u = base + i, s = u % kStages;
    const int b = static_cast<int>(i) / g.nt, t = static_cast<int>(i) - b * g.nt;
    if (u >= kStages) ptx::mbar_wait(&r.empty[s], ((u / kStages) - 1) & 1u);
    const int n = g.n0 + 16 * t, rows = min(16, g.N - n), k0 = b * kBoxK, kb = min(kBoxK, g.K - k0);
    ptx::mbar_arrive_expect_tx(&r.full[s], static_cast<unsigned>(rows * kb * 2));
    unsigned char* st = r.stages + static_cast<std::size_t>(s) * kStageBytes;
    for (int row = 0; row < rows; ++row)
      ptx::bulk_copy(st + row * kRowPitch, g.w + static_cast<std::size_t>(n + row) * g.K + k0,
                     static_cast<unsigned>(kb * 2), &r.full[s]);
  }
}
__device__ inline unsigned first_ring(const GemmShare& g) { return min(g.units(), static_cast<unsigned>(kStages)); }

// Consumer warp `warp` (< g.nt): its task's 16 columns over K, k16 steps ascending into one fp32
// accumulator per output from zero, as every GEMM of gemm() runs them; A's one row is `arow` (bf16,
// on chip; the n8 tile's other columns are zero). Lanes with q = 0 hold columns n and n + 8 of row 0.
// out(n, value) for the task's columns below N, value = the sum (+ bias[n]).
template <class Out>
__device__ void consume(const Ring& r, const GemmShare& g, unsigned base, const uint16_t* arow, const float* bias,
                        int warp, int lane, Out out) {
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int gq = lane / 4, q = lane % 4;
  for (int b = 0; b < g.boxes; ++b) {
    const unsigned u = base + static_cast<unsigned>(b * g.nt + warp), s = u % kStages;
    const int k0 = b * kBoxK, steps = min(kBoxK, g.K - k0) / 16;
    ptx::mbar_wait(&r.full[s], (u / kStages) & 1u);
    const unsigned st = ptx::smem_addr(r.stages + static_cast<std::size_t>(s) * kStageBytes);
    // ldmatrix: lanes 0-15 address rows 0-15 at k chunk 2kk, lanes 16-31 the same rows at 2kk + 1
    // (registers a0..a3: rows g, g + 8 at k 2q.., then at 2q + 8..).
    unsigned a[kBoxK / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBoxK / 16; ++kk)
      if (kk < steps) ptx::ldmatrix_x4(st + (lane % 16) * kRowPitch + ((2 * kk + lane / 16) << 4), a[kk]);
    // The fragments are in registers: the stage may be refilled (each lane's arrival orders its reads
    // before the bulk copy's writes).
    ptx::fence_proxy_async();
    ptx::mbar_arrive(&r.empty[s]);
#pragma unroll
    for (int kk = 0; kk < kBoxK / 16; ++kk) {
      if (kk >= steps) break;
      // B's k16n8 fragment: column g, rows 2q, 2q + 1 and 2q + 8, 2q + 9: A's row for g = 0, else zero.
      const int k = k0 + 16 * kk + 2 * q;
      const unsigned bf[2] = {gq == 0 ? *reinterpret_cast<const unsigned*>(arow + k) : 0u,
                              gq == 0 ? *reinterpret_cast<const unsigned*>(arow + k + 8) : 0u};
      ptx::mma_bf16(acc, a[kk], bf);
    }
  }
  if (q != 0) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int n = g.n0 + 16 * warp + gq + 8 * h;
    if (n < g.N) out(h, n, bias ? acc[2 * h] + bias[n] : acc[2 * h]);
  }
}

// Threads 0..kSsuThreads-1 of the block; the others pass by.
__device__ inline void ssu_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kSsuThreads) : "memory"); }

__global__ void __launch_bounds__(kThreads, 1) persistent_decode_kernel(const __grid_constant__ PersistentDecode job) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ u64 full[kStages], empty[kStages];
  const PersistentDecodeShape& sh = job.shape;
  const Layout lo = layout_of(sh);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int t = static_cast<int>(threadIdx.x);
  const int D = sh.hidden, I = sh.inner(), H = sh.heads, conv = sh.conv(), proj = sh.proj();
  const Ring ring{smem, full, empty};
  uint16_t* arow = reinterpret_cast<uint16_t*>(smem + lo.arow);
  float* resid = reinterpret_cast<float*>(smem + lo.resid);
  float* ssm = reinterpret_cast<float*>(smem + lo.ssu);
  if (t == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbar_init(&full[s], 1);    // the producer's expect_tx arrival
      ptx::mbar_init(&empty[s], 32);  // the reading warp's lanes
    }
    ptx::mbar_init_fence();
  }
  for (int i = t; i < D; i += kThreads) resid[i] = job.resid[i];
  __syncthreads();

  const int slot = job.ps.slot[0];
  const SsdShape ssh{H, sh.head_dim, sh.state, sh.groups};
  const int TP = ssu_rows(sh), tiles = (sh.head_dim + TP - 1) / TP;
  const ssd::SsuLayout sl = ssd::ssu_layout(ssh, TP, sh.bf16_state);
  unsigned target = 0, base = 0;

  for (int l = 0; l < sh.layers; ++l) {
    const PersistentMambaLayer& L = job.layers[l];
    const GemmShare in = share_of(L.in_w, proj, D), out = share_of(L.out_w, D, I);
    // The previous GEMM's units are all read (a grid barrier since): in_proj's first ring streams
    // while the block normalises.
    if (warp == kProducer && lane == 0) produce(ring, in, base, 0, first_ring(in));

    // 1. The residual add (the previous layer's out_proj row) and the block's RMSNorm: add_rmsnorm's
    // held form, thread t owning elements t, t + 256, ...; the bf16 copy is in_proj's input.
    {
      float v[norm_row::kHeld], wk[norm_row::kHeld];
#pragma unroll
      for (int k = 0; k < norm_row::kHeld; ++k) {
        const int i = t + k * kThreads;
        wk[k] = i < D ? L.norm_w[i] : 0.0f;
        v[k] = i < D ? resid[i] : 0.0f;
        if (l > 0 && i < D) {
          v[k] = v[k] + job.out[i];  // add_rmsnorm's residual_add(x, y, 1, false)
          resid[i] = v[k];
        }
      }
      norm_row::rms_norm_held(v, wk, D, sh.eps, [&](int i, float o) { arow[i] = norm_row::bf16_bits(o); });
      __syncthreads();  // A's row on chip before a consumer reads it
    }

    // 2. in_proj; the owners of conv channels and dt columns do the conv and dt (conv_epilogue.h).
    if (warp == kProducer) {
      if (lane == 0) produce(ring, in, base, first_ring(in), in.units());
    } else if (warp < in.nt) {
      ConvEpilogue ep;
      ep.col0 = I;
      ep.ch = conv;
      ep.K = sh.conv_kernel;
      ep.w = L.conv_w;
      ep.bias = L.conv_b;
      ep.state = L.conv_state;
      ep.slot = job.ps.slot;
      ep.row_seq = job.ps.row_seq;
      ep.silu = true;
      ep.out = job.xbc;
      ep.dt_col0 = I + conv;
      ep.dt = DtJob{nullptr, 0, H, L.dt_bias, sh.dt_lo, sh.dt_hi, job.dt};
      ConvColumn cc[2];
      if (lane % 4 == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) conv_column_load(ep, 1, 0, in.n0 + 16 * warp + lane / 4 + 8 * h, cc[h]);
      }
      consume(ring, in, base, arow, L.in_b, warp, lane, [&](int h, int n, float v) {
        job.zx[n] = v;
        conv_column_store(ep, cc[h], 0, 0, v);
      });
    }
    base += in.units();
    grid_barrier(job.barrier, target);  // the SSM step reads every channel's conv output and dt

    // 3. The SSM step, a head a block (ssd_ssu.cu's code); out_proj's first ring streams meanwhile.
    if (warp == kProducer && lane == 0) produce(ring, out, base, 0, first_ring(out));
    if (t < kSsuThreads) {
      float *S = ssm + sl.S, *Cs = ssm + sl.C, *Bs = ssm + sl.B, *xs = ssm + sl.x;
      uint16_t* raw = reinterpret_cast<uint16_t*>(ssm + sl.S);
      for (int h = static_cast<int>(blockIdx.x); h < H; h += static_cast<int>(gridDim.x)) {
        const float d = job.dt[h];
        const float dA = kernels::exp_f(d * L.A[h]);
        const float Dh = L.D[h];
        for (int z = 0; z < tiles; ++z) {
          const ssd::Tile tile = ssd::tile_of(ssh, slot, h, TP, z);
          ssd::stage_state(L.ssd, tile, S, raw);
          ssd::ssu_stage_inputs(ssh, tile, h, job.xbc, Cs, Bs, xs);
          ssd::cp_async_commit();
          ssd::cp_async_wait<0>();
          ssu_sync();
          ssd::ssu_tile_step(L.ssd, tile, S, raw, Cs, Bs, xs, d, dA, Dh,
                             job.y + static_cast<std::size_t>(h) * sh.head_dim + tile.p0, ssu_sync);
          ssu_sync();  // the dots have read the tile before the next one lands on it
        }
      }
    }
    grid_barrier(job.barrier, target);  // the gated norm reads every head's output

    // 4. The gated norm of the whole row (gated_rmsnorm's held form, group by group), into out_proj's
    // bf16 input, then out_proj.
    {
      const int group = I / sh.groups;
      for (int gi = 0; gi < sh.groups; ++gi) {
        float wk[norm_row::kHeld];
        norm_row::load_held_weights(L.gate_w + static_cast<std::size_t>(gi) * group, group, wk);
        uint16_t* dst = arow + static_cast<std::size_t>(gi) * group;
        norm_row::gated_norm_held(job.y + static_cast<std::size_t>(gi) * group,
                                  job.zx + static_cast<std::size_t>(gi) * group, group, wk, sh.eps,
                                  sh.norm_before_gate, [&](int i, float o) { dst[i] = norm_row::bf16_bits(o); });
      }
      __syncthreads();
    }
    if (warp == kProducer) {
      if (lane == 0) produce(ring, out, base, first_ring(out), out.units());
    } else if (warp < out.nt) {
      consume(ring, out, base, arow, L.out_b, warp, lane, [&](int, int n, float v) { job.out[n] = v; });
    }
    base += out.units();
    grid_barrier(job.barrier, target);  // the next layer's norm reads the whole row
  }
  // The last layer's residual add (add_inplace's x + y), for the final norm.
  if (blockIdx.x == 0)
    for (int i = t; i < D; i += kThreads) job.resid[i] = resid[i] + job.out[i];
}

std::atomic<bool> persistent_on{kPersistentDecodeDefault};

// The kernel's shared-memory limit, raised once per device (outside any capture in progress).
void allow_smem(std::size_t bytes) {
  static std::mutex mu;
  static std::set<std::pair<int, std::size_t>> done;
  int dev = 0;
  cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
  const std::lock_guard<std::mutex> lock(mu);
  if (done.count({dev, bytes})) return;
  outside_capture(
      [&] {
        return cudaFuncSetAttribute(persistent_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes));
      },
      "persistent decode: shared memory limit");
  done.insert({dev, bytes});
}

}  // namespace

bool persistent_decode() { return persistent_on.load(); }
void set_persistent_decode(bool on) { persistent_on.store(on); }

std::string persistent_decode_unfit(const PersistentDecodeShape& s) {
  if (s.layers <= 0 || s.hidden <= 0 || s.heads <= 0 || s.head_dim <= 0 || s.state <= 0 || s.groups <= 0)
    return "an empty shape";
  if (s.hidden % 16 != 0 || s.inner() % 16 != 0) return "in_proj's or out_proj's K is not a multiple of 16";
  if (s.hidden > norm_row::kHeldMaxWidth) return "hidden size above the held norm's width";
  if (s.inner() % s.groups != 0 || s.inner() / s.groups > norm_row::kHeldMaxWidth)
    return "a gated-norm group above the held norm's width";
  if (s.heads % s.groups != 0) return "heads not a multiple of the groups";
  if (s.conv_kernel < 2 || s.conv_kernel > kConvEpilogueTaps) return "conv kernel outside 2..4";
  if (s.state % 4 != 0 || s.state > ssd::kMaxTileFloats) return "state size not a multiple of 4";
  const int sms = sm_count();
  for (int n : {s.proj(), s.hidden})
    if (((n + 15) / 16 + sms - 1) / sms > kConsumers) return "more 16-column tasks per SM than consumer warps";
  const std::size_t smem = layout_of(s).total;
  if (smem > static_cast<std::size_t>(kMaxSmem)) return "shared memory above the SM's";
  allow_smem(smem);
  if (blocks_per_sm(persistent_decode_kernel, kThreads, smem) < 1) return "no block fits on an SM";
  return {};
}

void persistent_decode_step(const PersistentDecode& job, cudaStream_t s) {
  const std::size_t smem = layout_of(job.shape).total;
  allow_smem(smem);
  cuda_check(cudaMemsetAsync(job.barrier, 0, sizeof(unsigned), s), "persistent decode: barrier");
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(sm_count()));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;  // every block resident at once: the grid barriers need it
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cuda_check(cudaLaunchKernelEx(&cfg, persistent_decode_kernel, job), "persistent decode");
}

}  // namespace parity::cuda
