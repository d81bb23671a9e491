#pragma once
// The swap-AB GEMM's device code (gemm_swap_ab.cu has the why, the bits and the launches): a block
// computes Cᵀ for 64·CWG output columns (rows of W) and up to NT rows of A. One producer warp
// streams 64-deep boxes of W (64·CWG rows) and of A (NT rows) through the TMA unit into a ring of
// kStages stages; CWG consumer warpgroups each run one wgmma m64nNTk16 chain on their 64 columns,
// four k16 steps per stage, one stage's group kept in flight. A is the bf16 copy a pre-pass wrote
// (gemm_mma.h's with_bf16_rows).
#include <cuda.h>

#include <cstdint>

#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/wgmma.cuh"

namespace parity::cuda::swap_ab {

using u64 = std::uint64_t;

constexpr int kMaxStages = 24;  // small boxes (few rows): up to ~200 KiB in flight per block

// CWG consumer warpgroups (64 output columns each), NT rows of A per block (a wgmma N: 8..256),
// BPS blocks per SM (each with kRing bytes of stages).
template <int CWG, int NT, int BPS>
struct Config {
  static constexpr int kCols = 64 * CWG;
  static constexpr int kConsumerWarps = 4 * CWG;
  static constexpr int kThreads = 32 * kConsumerWarps + 32;  // the producer warp last: warpgroups stay aligned
  static constexpr int kWBytes = kCols * 128;                // a 64-deep box of the block's W rows
  static constexpr int kXBytes = NT * 128;                   // a 64-deep box of A's rows
  // A stage: W's box, then A's. Multiples of 1024: every box starts swizzle-aligned.
  static constexpr int kStageBytes = kWBytes + kXBytes;
  // 227 KiB of shared memory per SM, less 1 KiB the system keeps per block and 1 KiB to align.
  static constexpr int kRing = BPS == 1 ? 200 * 1024 : BPS == 2 ? 108 * 1024 : 72 * 1024;
  static constexpr int kStages = kRing / kStageBytes < kMaxStages ? kRing / kStageBytes : kMaxStages;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;
  static_assert(NT % 8 == 0 && NT >= 8 && NT <= 256, "a wgmma N");
  static_assert(kStages >= 3, "one stage being read, one in flight, one filling");
};

// The early-start flags (ops.h's GemmEarly) a kernel gets as an argument: 0 is main's order.
constexpr unsigned kEarlyWeights = 1u, kEarlyRelease = 2u, kEarlyL2 = 4u;
// early_start.h's: the consumers wait for the kernel before first; the rest of the block's weight boxes to L2.
constexpr unsigned kEarlyPark = 128u, kEarlyL2Rest = 512u;

// The producer (one thread): box b of K into stage b % S once the consumers released the stage's
// last round: W's box (the block's rows from n0) at the stage's start, A's (rows from m0) kWBytes
// later. Whole boxes: W rows past N, A rows past M and K past the matrix land as zeros and count
// as bytes; the zero rows only feed outputs that are never stored, the zero K is never multiplied.
//
// `early` (launched programmatically after the kernel that writes A): the weights are no output of
// any kernel of the pass, so before griddepcontrol.wait the producer already issues W's boxes of
// the first ring (kEarlyWeights; each stage's barrier expects W's and A's bytes at once, and
// completes only when A's box, requested after the wait, has landed too) and asks L2 for the next
// ring's W boxes (kEarlyL2). After the wait (every kernel before has completed and its writes are
// visible) come A's boxes, then the loop as before; kEarlyRelease lets the next kernel be
// scheduled once the wait has returned. The stages hold the same boxes as without: the same steps.
//
// next (not null): once its own boxes are all requested, the block asks L2 for its share of
// next[0, next_bytes) (ops.h's with_l2_prefetch: the weights the pass multiplies next), in pieces of
// up to 32 KiB; it does not wait for them.
struct NextL2 {
  const unsigned char* next;
  unsigned long long bytes;  // a multiple of 16
};

// A block's place in the grid: (row tile, column block), the row tiles fastest. The blocks of one column
// range read the same weights; launched side by side, the later ones find them in L2 while the first's
// copies are still in flight (session 38: with the column blocks fastest, a pass split into row tiles read
// every weight from DRAM once a tile). The place decides which outputs a block computes, not how.
__host__ __forceinline__ dim3 block_grid(int M, int NT, int N, int cols) {
  return dim3(static_cast<unsigned>((M + NT - 1) / NT), static_cast<unsigned>((N + cols - 1) / cols));
}
__device__ __forceinline__ int column_block() { return static_cast<int>(blockIdx.y); }
__device__ __forceinline__ int row_tile() { return static_cast<int>(blockIdx.x); }

__device__ __forceinline__ void prefetch_share_l2(const NextL2& n) {
  if (n.next == nullptr || n.bytes == 0) return;
  const unsigned long long blocks = static_cast<unsigned long long>(gridDim.x) * gridDim.y,
                           id = static_cast<unsigned long long>(blockIdx.y) * gridDim.x + blockIdx.x;
  const unsigned long long share = ((n.bytes + blocks - 1) / blocks + 15) & ~15ull;
  const unsigned long long lo = id * share, hi = lo + share < n.bytes ? lo + share : n.bytes;
  for (unsigned long long p = lo; p < hi; p += 32768) {
    const unsigned size = static_cast<unsigned>(hi - p < 32768 ? hi - p : 32768);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(n.next + p), "r"(size) : "memory");
  }
}

template <int S, int kStageBytes, int kWBytes>
__device__ __forceinline__ void produce(unsigned ring, u64* full, u64* empty, const CUtensorMap* wmap,
                                        const CUtensorMap* xmap, int kboxes, int n0, int m0, unsigned early,
                                        const NextL2& next) {
  ptx::prefetch_tensor_map(wmap);
  ptx::prefetch_tensor_map(xmap);
  int first = 0;  // boxes whose W was requested before the wait
  if (early != 0) {
    if (early & kEarlyWeights) {
      first = kboxes < S ? kboxes : S;
      for (int b = 0; b < first; ++b) {
        ptx::mbar_arrive_expect_tx(&full[b], kStageBytes);
        ptx::tma_load_3d(ring + b * kStageBytes, wmap, 64 * b, n0, 0, &full[b]);
      }
    }
    if (early & kEarlyL2)
      for (int b = S; b < kboxes && b < 2 * S; ++b) ptx::tma_prefetch_l2_3d(wmap, 64 * b, n0, 0);
    if (early & kEarlyL2Rest)
      for (int b = S; b < kboxes; ++b) ptx::tma_prefetch_l2_3d(wmap, 64 * b, n0, 0);
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    if (early & kEarlyRelease) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    for (int b = 0; b < first; ++b) ptx::tma_load_3d(ring + b * kStageBytes + kWBytes, xmap, 64 * b, m0, 0, &full[b]);
  }
  for (int b = first; b < kboxes; ++b) {
    const int s = b % S;
    if (b >= S) ptx::mbar_wait(&empty[s], ((b / S) - 1) & 1);
    ptx::mbar_arrive_expect_tx(&full[s], kStageBytes);
    const unsigned st = ring + s * kStageBytes;
    ptx::tma_load_3d(st, wmap, 64 * b, n0, 0, &full[s]);
    ptx::tma_load_3d(st + kWBytes, xmap, 64 * b, m0, 0, &full[s]);
  }
  prefetch_share_l2(next);
}

template <int CWG, int NT, int BPS>
__global__ void __launch_bounds__(Config<CWG, NT, BPS>::kThreads, BPS)
    swap_ab_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap, int M, int K,
                   int N, const float* __restrict__ bias, float* __restrict__ C, int ldc, unsigned early,
                   NextL2 next) {
  using Cfg = Config<CWG, NT, BPS>;
  constexpr int S = Cfg::kStages;
  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 full[S], empty[S];
  // 1024-byte aligned: the 128-byte swizzle repeats every 8 rows of 128 bytes from such an address.
  const unsigned ring = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n0 = column_block() * Cfg::kCols, m0 = row_tile() * NT;
  const int kboxes = (K + 63) / 64;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      ptx::mbar_init(&full[s], 1);                     // the producer's expect_tx arrival
      ptx::mbar_init(&empty[s], Cfg::kConsumerWarps);  // one arrival per consumer warp
    }
    ptx::mbar_init_fence();
  }
  __syncthreads();

  if (warp == Cfg::kConsumerWarps) {
    if (lane == 0) produce<S, Cfg::kStageBytes, Cfg::kWBytes>(ring, full, empty, &wmap, &xmap, kboxes, n0, m0, early, next);
    return;
  }

  // Parked until the kernel before has completed (its ring cannot fill before: A's boxes come after the
  // producer's wait).
  if (early & kEarlyPark) asm volatile("griddepcontrol.wait;\n" ::: "memory");
  // A consumer warpgroup: columns n0 + 64·wg .. +63 of C, as rows of the m64 wgmma tile.
  const int wg = warp / 4;
  float d[NT / 2];
#pragma unroll
  for (int i = 0; i < NT / 2; ++i) d[i] = 0.0f;  // every step accumulates onto them (wgmma.cuh)
  wgmma::fence_operands(d);
  // Box b's k16 steps (STEPS of them: 4, or 2 for a 32-deep last box, whose zero half is never
  // multiplied: a step on zeros could turn a -0 accumulator into +0), then the release of box
  // b - 1's stage once at most box b's group is pending.
  auto box = [&]<int STEPS>(int b) {
    const int s = b % S;
    ptx::mbar_wait(&full[s], (b / S) & 1);
    __syncwarp();
    const unsigned st = ring + s * Cfg::kStageBytes;
    const unsigned wa = st + wg * 64 * 128, xa = st + Cfg::kWBytes;
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < STEPS; ++kk)
      wgmma::mma_ss<NT>(d, wgmma::desc_k_sw128(wa + 32 * kk), wgmma::desc_k_sw128(xa + 32 * kk));
    wgmma::commit_group();
    wgmma::fence_operands(d);
    wgmma::wait_group<1>();
    wgmma::fence_operands(d);
    if (b > 0 && lane == 0) ptx::mbar_arrive(&empty[(b - 1) % S]);
  };
  const int whole = K / 64;  // K is a multiple of 32
  for (int b = 0; b < whole; ++b) box.template operator()<4>(b);
  if (whole < kboxes) box.template operator()<2>(whole);
  wgmma::wait_group<0>();
  wgmma::fence_operands(d);

  // d[4j + 2h + e]: tile row 16·(warp % 4) + g + 8h (output column n), tile column 8j + 2q + e (row m of A).
  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int n = n0 + 64 * wg + 16 * (warp % 4) + g + 8 * h;
    if (n >= N) continue;
    const float bn = bias ? bias[n] : 0.0f;
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int m = m0 + 8 * j + 2 * q + e;
        if (m < M) C[static_cast<std::size_t>(m) * ldc + n] = bias ? d[4 * j + 2 * h + e] + bn : d[4 * j + 2 * h + e];
      }
  }
}

}  // namespace parity::cuda::swap_ab
