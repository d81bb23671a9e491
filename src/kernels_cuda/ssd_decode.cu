// Exact mode's one-row decode, every such sequence of a pass in one launch over (sequence, p-tile,
// head). Row t of head h sits at index j of its cell (rows 0..j-1 in the replay ring, row j in
// this call); with the cell's start state S (the slot: a one-row call folds nothing before it):
//   y_t[p] = row_output(cum_j, dot(C_t, S[p]), Σ_{i≤j} coef_i · x_i[p], D, x_t[p])
//   coef_i = row_weight(cum_j, cum_i, dt_i) · cb_dot(C_t, B_i)
// and, when t is the cell's last row (j = L−1; heads are staggered, so in one step only some heads
// fold), the fold S ← fold_element(exp(cum_j), S, Σ_i (w_i · x_i[p]) · B_i[n]) with w_i the same
// row_weight. Every value is the same sequence of operations as in the prefill phases
// (ssd_outputs.cu for y, ssd_deltas.cu + ssd_chain.cu for the fold; the shared pieces are the
// functions of ssd_device.cuh), so a row decoded here has the bits a prefill gives it.
// Row t also goes into the replay ring (x, dt; B by the group's first head).
//
// Schedule of a block. The replay rows (what the serial part needs) are requested first, the
// state tile right after them in a second group: the cum sum, the coefficient dots, the row's
// intra-cell sum run while the state is still in flight, and after it arrives only the dots
// C·S (and, for a folding head, the fold) remain. Only the state is large; everything that does
// not need it is done before it is waited for.
//
// Launch order: blocks start roughly in index order, so heads are numbered from the ones that fold
// at this row (the most work: the fold's delta and a state write) through those late in their
// cells (more rows to replay) to the lightest: the last blocks to start are short ones and the
// step does not end on a folding block (heavy_first_head; launch order only, no bits depend on it).
#include <atomic>
#include <string>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/programmatic_launch.cuh"
#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_decode_tile.cuh"
#include "kernels_cuda/ssd_prefill.h"
#include "kernels_cuda/ssd_tile.cuh"

namespace parity::cuda::ssd {
namespace {

// Benchmarks only (decode_probe): per block, 10 values: globaltimer at its start and end (ns), then
// clock64 cycles from its start to: the metadata, the replay rows' arrival, the replay work done (cum,
// coefficients, intra sums), the state's arrival (its first group), the dots done, the end; then
// smid | fold << 16 | j << 20 and the tile rows.
constexpr int kProbeValues = 10;
__device__ inline unsigned smid() {
  unsigned r;
  asm volatile("mov.u32 %0, %smid;" : "=r"(r));
  return r;
}

// Grid: x = sequence · tiles + p-tile, y = launch slot of the head (heavy_first_head). At most 64
// registers (8 blocks of 128 threads an SM; unbounded, ptxas took 80, which allows 6): at the
// default tile shared memory allows 7 fp32 or 10 bf16 blocks an SM.
//
// kF: the schedule's flags (above; the default kRingLate | kFoldQuad | kDots2, measured against every
// other set in one run). The cum is scanned by thread 0, the intra sums formed by thread p, the outputs
// written after a barrier; row t goes into the ring after the first wait from the staged rows
// (kRingLate), else from global memory before it. The same operations on the same values every way (the
// bits do not depend on kF).
//
// Launched programmatically (launch_after_prior, when programmatic_exact_decode()): before the wait
// for the kernel before it (the conv, which writes this row's x, B, C and dt) a block only reads the
// pass's metadata and asks L2 for what earlier passes wrote (its state tile, its head's x ring, its
// group's B ring); every copy is issued after the wait. pdl: 1 that, 2 the metadata only; | 4 the next
// kernel released before the wait (early_start.h's kGemmEarlySsmFirst), else after it.
template <int kF>
__global__ void __launch_bounds__(kStepThreads, 8) decode_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc,
                                                              int ld, const float* dt, const float* A,
                                                              const float* Dskip, SsdState st, int TP, int tiles,
                                                              int ahead, int pdl, unsigned long long* probe,
                                                              float* y) {
  constexpr bool kP = (kF & kProbe) != 0;
  long long c0 = 0;
  unsigned long long g0 = 0;
  if constexpr (kP) {
    g0 = ptx::global_timer_ns();
    c0 = clock64();
  }
  const int seq = static_cast<int>(blockIdx.x) / tiles, z = static_cast<int>(blockIdx.x) - seq * tiles;
  const int tid = threadIdx.x;
  // The sequence's metadata in one round trip, then the test.
  const int n_rows = p.n[seq], slot = p.slot[seq], row0 = p.row0[seq];
  const int64_t start = p.start[seq];
  if (!uses_decode_row(g, n_rows)) return;
  const int tmod = cell_mod(start, g.cell);  // the block's one remainder (row_in_cell)
  const int h = heavy_first_head(g, sh.H, tmod, blockIdx.y);
  // The kernel's own work around the tile: its programmatic launch, the later block's L2 request, the probe.
  struct Hooks {
    const SsdShape& sh;
    const ScanGrid& g;
    int slot, tmod, TP, z, ahead, pdl, tid;
    long long c0;
    unsigned long long g0;
    long long ck[6];
    unsigned long long* probe;
    __device__ void before_copies(const SsdState& st, const Tile& t, std::size_t xbase, std::size_t bbase) {
      if ((pdl & 3) == 1) {
        if (tid == 0) prefetch_state_l2(st, t);
        if (tid == 32 && z == 0) prefetch_ring_l2(st.ring_x + xbase * sh.P, g.cell * sh.P);
        if (tid == 64 && z == 0) prefetch_ring_l2(st.ring_B + bbase * sh.N, g.cell * sh.N);
      }
      wait_and_release((pdl & 4) != 0);  // 4: early_start.h's kGemmEarlySsmFirst
      st_ = st;
    }
    // The state tile (and, once per head, the x ring) of the block `ahead` launch slots later: the
    // same sequence and p-tile, so its head is known here. The step's bytes in flight are otherwise
    // bounded by the tiles resident blocks hold in shared memory (4 fp32 or 7 bf16 whole-head tiles an
    // SM); a later block then finds its state in L2.
    __device__ void after_copies() {
      if (ahead > 0 && tid == 0 && static_cast<int>(blockIdx.y) + ahead < sh.H) {
        const int hn = heavy_first_head(g, sh.H, tmod, static_cast<int>(blockIdx.y) + ahead);
        prefetch_state_l2(st_, tile_of(sh, slot, hn, TP, z));
        if (z == 0)
          prefetch_ring_l2(st_.ring_x + (static_cast<std::size_t>(slot) * sh.H + hn) * g.cell * sh.P, g.cell * sh.P);
      }
    }
    __device__ void mark(int k) {
      if constexpr (kP) ck[k] = clock64() - c0;
    }
    __device__ void finish(bool fold, int j, int tp) {
      if constexpr (kP) {
        ck[5] = clock64() - c0;
        if (tid == 0 && probe != nullptr) {
          unsigned long long* o =
              probe + (static_cast<std::size_t>(blockIdx.y) * gridDim.x + blockIdx.x) * kProbeValues;
          o[0] = g0;
          o[1] = ptx::global_timer_ns();
          for (int k = 0; k < 6; ++k) o[2 + k] = static_cast<unsigned long long>(ck[k]);
          o[8] = smid() | (fold ? 1u << 16 : 0u) | (static_cast<unsigned>(j) << 20);
          o[9] = static_cast<unsigned long long>(tp);
        }
      }
    }
    SsdState st_{};
  };
  Hooks hooks{sh, g, slot, tmod, TP, z, ahead, pdl, tid, c0, g0, {0, 0, 0, 0, 0, 0}, probe};
  extern __shared__ float4 smem4[];
  decode_tile<kF>(sh, g, slot, row0, start, tmod, h, z, TP, xbc, ld, dt, A, Dskip, st, y,
                  reinterpret_cast<float*>(smem4), [] { __syncthreads(); }, hooks);
}

using DecodeKernel = void (*)(SsdShape, ScanGrid, PassSeqs, const float*, int, const float*, const float*,
                              const float*, SsdState, int, int, int, int, unsigned long long*, float*);

// The kernel of each set of flags in kFlags; nullptr for another set.
template <int... kFlags>
DecodeKernel built(int flags) {
  DecodeKernel k = nullptr;
  ((k = flags == kFlags ? decode_kernel<kFlags> : k), ...);
  return k;
}

// The schedules built: session 9's (no flags, the baseline BM_CudaDecodeSsmWay measures against) and the
// default, each also with the probe (BM_CudaDecodeSsmProbe).
DecodeKernel kernel_of(int flags) {
  return built<0, kDefaultF32, kProbe | 0, kProbe | kDefaultF32>(flags);
}

std::atomic<int> forced_ahead{0}, forced_way{0}, forced_pad{0};
std::atomic<unsigned long long*> probe_buffer{nullptr};
// ops.h's modes: 0 ordinary launch, 1 programmatic with L2 requests, 2 without, 3 (the default) 1 for
// passes of up to kProgrammaticDecodeSeqs sequences, else 0.
std::atomic<int> programmatic_decode{kProgrammaticDecodeAuto};
// Session 23 (H200, mamba2-2.7b, BM_CudaModelDecode pdl:1 vs pdl:2, two calls): batch 1 −2.6 % and
// −3.2 % a step; batch 64 ±0 and +0.8 %, batch 256 ±0 (session 11: +3-5 % at 64).
constexpr int kProgrammaticDecodeSeqs = 16;

// Blocks of `kernel` with `smem` bytes the whole device holds at once.
int resident_blocks(DecodeKernel kernel, std::size_t smem) { return blocks_per_sm(kernel, kStepThreads, smem) * sm_count(); }

// The schedule a launch takes: the benchmark's or test's forced way where it is built, else the
// default for the state dtype.
int decode_flags(bool bf16) {
  const int way = forced_way.load();
  if (way >= kWayBase && kernel_of(way - kWayBase) != nullptr) return way - kWayBase;
  return bf16 ? kDefaultBf16 : kDefaultF32;
}

}  // namespace

void launch_decode(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                   const float* dt, const float* A, const float* D, const SsdState& st, int tp, float* y,
                   cudaStream_t s) {
  const bool bf16 = st.state_f32 == nullptr;
  int flags = decode_flags(bf16);
  unsigned long long* probe = probe_buffer.load();
  if (probe != nullptr && kernel_of(flags | kProbe) != nullptr) flags |= kProbe;
  const DecodeKernel kernel = kernel_of(flags);
  const std::size_t smem = decode_layout(sh, g.cell, tp, bf16).total * sizeof(float) +
                           static_cast<std::size_t>(forced_pad.load());
  ensure_smem(kernel, smem, "ssd decode smem");
  const int tiles = (sh.P + tp - 1) / tp;
  const int columns = p.num_seqs * tiles;  // blocks per head slot; launch order runs across them first
  const int forced = forced_ahead.load();
  int ahead = forced > 0 ? forced : forced < 0 ? (resident_blocks(kernel, smem) + columns - 1) / columns : 0;
  if (ahead >= sh.H) ahead = 0;  // every block resident at once (or nothing that far)
  const dim3 grid(static_cast<unsigned>(columns), static_cast<unsigned>(sh.H));
  int pdl = exact_decode_launch_mode(p.num_seqs);
  if (pdl != 0 && (gemm_early_flags() & kGemmEarlySsmFirst) != 0) pdl |= 4;
  if (pdl != 0) {
    launch_after_prior(kernel, grid, dim3(kStepThreads), smem, s, "ssd decode", sh, g, p, xbc, ld, dt, A, D, st, tp,
                       tiles, ahead, pdl, probe, y);
  } else {
    kernel<<<grid, kStepThreads, smem, s>>>(sh, g, p, xbc, ld, dt, A, D, st, tp, tiles, ahead, 0, probe, y);
    check_launch("ssd decode");
  }
}

}  // namespace parity::cuda::ssd

namespace parity::cuda {
void ssd_force_step_prefetch(int ahead) { ssd::forced_ahead.store(ahead); }
void ssd_force_decode_way(int way) { ssd::forced_way.store(way); }
void ssd_force_decode_smem_pad(int bytes) { ssd::forced_pad.store(bytes); }
void ssd_decode_probe(unsigned long long* device_buffer) { ssd::probe_buffer.store(device_buffer); }
bool programmatic_exact_decode() { return ssd::programmatic_decode.load() != 0; }
void set_programmatic_exact_decode(bool on, bool l2_requests) {
  ssd::programmatic_decode.store(on ? (l2_requests ? 1 : 2) : 0);
}
void set_programmatic_exact_decode_mode(int mode) {
  if (mode < 0 || mode > kProgrammaticDecodeAuto)
    throw Error("set_programmatic_exact_decode_mode: mode " + std::to_string(mode) + " is not 0..3");
  ssd::programmatic_decode.store(mode);
}
int programmatic_exact_decode_mode() { return ssd::programmatic_decode.load(); }
int exact_decode_launch_mode(int num_seqs) {
  const int mode = programmatic_launch() ? ssd::programmatic_decode.load() : 0;
  if (mode == kProgrammaticDecodeAuto) return num_seqs <= ssd::kProgrammaticDecodeSeqs ? 1 : 0;
  return mode;
}
}  // namespace parity::cuda
