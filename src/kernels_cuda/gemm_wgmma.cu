// The many-rows bf16 GEMM on Hopper: warpgroup tensor-core steps (wgmma) fed by TMA tensor copies.
//
// Why: the mma.sync tiles (gemm_mma.cu) reach ~40 % of cuBLAS at M = 4096; each warp there loads its
// fragments with ldmatrix and issues 16×8×16 steps, and the issue slots, not the tensor cores, bound
// it. Here one producer warp copies whole 64-deep boxes of A and W into a ring of shared-memory
// stages (one TMA instruction per operand and stage, completion counted on an mbarrier), and two
// consumer warpgroups each issue m64nBNk16 steps that read both operands straight from shared
// memory: 64 × BN outputs per warpgroup and instruction. Blocks are persistent (one per SM), walk
// the tiles in raster groups (8 or, for gemm()'s tiles since session 11, 16 block rows sweeping the
// columns, so the weights a wave reads are reused from L2), and the producer runs ahead into the
// next tile while the consumers store the last one: from registers, or (the staged epilogue, EPI > 0)
// through shared-memory buffers that the TMA unit stores while the consumers start the next tile.
// Which tiles a pass takes is a way (kWays, below); docs/performance.md (session 11) has each
// tile's and way's time.
//
// Bits: every output element is the chain the other bf16 kernels compute (gemm.cu): K in 16-deep
// steps ascending into one fp32 accumulator that starts as +0 in registers (scale-d is always 1, so
// the first step adds to +0 as mma.sync's chain from c = 0 does), the bias added once at the end.
// wgmma accumulates such a chain with mma.sync m16n8k16's bits (tests/cuda/cuda_wgmma_bits_test.cpp).
// A stage is a 64-deep box; past K the box holds zeros, and a 32-deep tail stage issues two steps,
// never a step over the zeros (it could turn a -0 into +0). Rows past M and columns past N are
// zeros that feed outputs never stored. The tile shape, the ring depth (64- or 32-deep stages),
// which block takes a tile and when, and how C is written only decide when each step runs, never
// which steps or in what order. tests/cuda/cuda_gemm_wgmma_test.cpp compares every tile with the mma
// tiles bit for bit, cuda_gemm_wgmma_way_test.cpp every way with session 9's.
#include "kernels_cuda/gemm_wgmma.h"

#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <type_traits>

#include "common/error.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/gemm_mma.h"
#include "kernels_cuda/gemm_store.cuh"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/tensor_map.h"
#include "kernels_cuda/wgmma.cuh"

namespace parity::cuda {
namespace {

constexpr int kBK = 64;        // K per stage: one 128-byte swizzled box row, four 16-deep steps
constexpr int kThreads = 384;  // warpgroup 0 produces, 1 and 2 consume
constexpr int kGroup = 8;      // block rows per raster group (main's order; a tile may ask for more)
constexpr int kEpiBytes = 64 * 128;  // a staged epilogue's buffer: 64 rows × 32 fp32 columns
constexpr int kMaxGroups = 256;  // grouped passes: groups (experts) one launch takes

// A BM × BN block tile with STAGES ring stages. PING = false (cooperative): both consumer
// warpgroups work on each tile, 64·MW rows each. PING = true: the consumer warpgroups take
// alternate tiles whole (MW = BM / 64 m64 steps each per k16), one storing its last tile while the
// other runs its steps, so the tensor cores do not wait for the epilogue. F32A: A comes into the
// ring as fp32 straight from the caller's matrix (two 32-deep boxes per stage) and the consumers
// round it to bf16 on the way into the tensor cores (register A operand); no pre-pass. CL = 2: a
// cluster of two blocks takes two vertically adjacent tiles with the same columns, and each block's
// producer copies half of the shared W box into both blocks' rings (TMA multicast), so each W byte
// crosses from L2 once per pair. EPI > 0 (the staged epilogue): each consumer warpgroup writes its
// accumulators into EPI shared-memory buffers of 64 rows × 32 columns in turn and the TMA unit
// stores each buffer to C while the warpgroup fills the next and then runs the next tile's steps;
// EPI = 0: the consumers store C themselves (8-byte stores, a quad of lanes per 32-byte sector).
// BK = 32: 32-deep stages in the 64-byte swizzle, half the bytes each, so twice as many fit and the
// consumers (which hold the stage being read and the one before) keep less of the ring.
template <int BM, int BN, int STAGES, bool PING, bool F32A, int CL, int EPI = 0, int BK = kBK>
struct WgTile {
  static constexpr int MW = PING ? BM / 64 : BM / 128;  // m64 steps per warpgroup and k16
  static constexpr int kRowBytes = BK * 2;              // a bf16 box row: 128 or 64 bytes
  static constexpr int kABytes = BM * BK * (F32A ? 4 : 2);
  static constexpr int kBBytes = BN * BK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kReleaseWarps = (PING ? 4 : 8) * CL;  // arrivals that free a stage (both blocks')
  static constexpr int kBoxN = BN / CL;                      // W rows each block's producer copies
  static constexpr int kEpiOffset = STAGES * kStageBytes;  // the two warpgroups' staging buffers
  // Stages, staging buffers, the barriers, and slack to align the ring to 1024 bytes (the swizzle's anchor).
  static constexpr int kSmemBytes = STAGES * kStageBytes + 2 * EPI * kEpiBytes + 2 * STAGES * 8 + 1024;
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "boxes 1024-byte aligned");
  static_assert(MW >= 1 && BM % 64 == 0 && BN % 16 == 0 && BN <= 256, "whole m64nBN steps");
  static_assert(!F32A || MW == 1, "register A fragments for one m64 step per warpgroup");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
  static_assert((CL == 1 || CL == 2) && (kBoxN * kRowBytes) % 1024 == 0, "multicast halves 1024-byte aligned");
  static_assert(BK == kBK || (BK == 32 && !F32A), "32-deep stages for bf16 A");
};

// Tile t's origin: groups of `group` block rows, each group sweeping all column tiles.
__device__ __forceinline__ void tile_origin(int t, int tiles_m, int tiles_n, int bm, int bn, int group, int& m0,
                                            int& n0) {
  const int per_group = group * tiles_n, first_m = (t / per_group) * group;
  const int rows = min(group, tiles_m - first_m), r = t % per_group;
  m0 = (first_m + r % rows) * bm;
  n0 = (r / rows) * bn;
}

// Where tile t lies: rows base + m0 .. of A and C, of which those below base + limit exist; columns
// n0 ..; weights of group z. Dense passes: one group of M rows, tiles in the raster above. Grouped
// passes (the MoE's experts): group z owns rows [offsets[z], offsets[z+1]) and weights z; its
// tiles follow those of groups < z (prefix[z] of them: prefix lives in shared memory), rows
// fastest, so the tiles that read one expert's weights run side by side. A tile's rows past its
// group's end are the next group's rows or zeros: they feed only outputs never stored.
struct TilePlace {
  int base, m0, limit, n0, z;
};
template <int BM, int BN, int CL>
__device__ __forceinline__ TilePlace tile_place(int t, unsigned rank, int M, int tiles_m, int tiles_n,
                                                const int32_t* offsets, const int* prefix, int groups, int raster) {
  TilePlace p{0, 0, M, 0, 0};
  if (!offsets) {
    tile_origin(t, tiles_m, tiles_n, BM * CL, BN, raster, p.m0, p.n0);
  } else {
    int z = 0;
    while (z + 1 < groups && prefix[z + 1] <= t) ++z;
    const int rows = offsets[z + 1] - offsets[z], local = t - prefix[z];
    const int tiles_mz = (rows + BM * CL - 1) / (BM * CL);
    p = TilePlace{offsets[z], (local % tiles_mz) * BM * CL, rows, (local / tiles_mz) * BN, z};
  }
  p.m0 += static_cast<int>(rank) * BM;
  return p;
}

// Ping-pong turns: warpgroup x arrives on barrier 1 + x once it has issued a tile's last steps (and
// another tile follows); the other waits there before its next tile's steps. Besides the overlap,
// this keeps a warpgroup from waiting on a ring slot whose previous fill (the other warpgroup's) has
// not completed: a parity wait cannot tell fill n from fill n - 2.
__device__ __forceinline__ void turn_arrive(int x) { asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + x) : "memory"); }
__device__ __forceinline__ void turn_wait(int x) { asm volatile("bar.sync %0, 256;\n" ::"r"(1 + x) : "memory"); }

// Clusters (CL = 2): this block's rank, a barrier over both blocks' threads, an arrival on the
// mbarrier at `bar`'s offset in block `cta`'s shared memory, and a tensor copy that lands at `dst`'s
// offset in every block of `mask`, completing bytes on the mbarrier at `bar`'s offset in each.
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_in(std::uint64_t* bar, unsigned cta) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(ptx::smem_addr(bar)), "r"(cta));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void tma_load_3d_multicast(unsigned dst, const void* map, int c0, int c1, int c2,
                                                      std::uint64_t* bar, unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
      "%3, %4}], [%5], %6;\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(ptx::smem_addr(bar)), "h"(mask)
      : "memory");
}

// The staged epilogue (EPI > 0). Consumer warpgroup x syncs its own 128 threads on barrier 3 + x
// (0 is __syncthreads, 1 and 2 the ping-pong turns). One thread per warpgroup issues the tensor
// stores, each closing a bulk group; before a buffer is written again, that thread waits until at most
// `pending` of its groups are still reading shared memory, then the warpgroup syncs.
__device__ __forceinline__ void epi_sync(int x) { asm volatile("bar.sync %0, 128;\n" ::"r"(3 + x) : "memory"); }
__device__ __forceinline__ void st_shared_f2(unsigned addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ void tma_store_3d(const void* map, int c0, int c1, int c2, unsigned src) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(map), "r"(c0),
               "r"(c1), "r"(c2), "r"(src)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int Pending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(Pending) : "memory");
}
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// One warpgroup's MW × 64 rows × BN columns of a tile (rows from `row`, columns from n0 of the map's
// C) through its EPI staging buffers at `bufs`, 32 columns at a time; `ep` counts the buffers this
// warpgroup has filled so far (the one filled next is ep % EPI). Each element is the accumulator plus
// the bias, the one addition store_column_pair makes. A buffer is a box of the 128-byte swizzle:
// row r's 16-byte chunk c at c ^ (r % 8), so a warp's eight rows of a chunk fall on distinct banks.
// Rows past `limit` and columns past N are in the map's margin (not written) or skipped whole.
template <int MW, int BN, int EPI>
__device__ __forceinline__ void store_staged(float (&acc)[MW][BN / 2], unsigned bufs, int& ep, const CUtensorMap* map,
                                             int row, int limit, int n0, int N, const float* __restrict__ bias,
                                             int x, int warp, int g, int q, bool leader) {
#pragma unroll
  for (int mi = 0; mi < MW; ++mi) {
    if (row + 64 * mi >= limit) break;  // uniform over the warpgroup
#pragma unroll
    for (int j2 = 0; j2 < BN / 32; ++j2) {
      if (n0 + 32 * j2 >= N) break;
      const unsigned buf = bufs + (ep % EPI) * kEpiBytes;
      if (ep >= EPI) {
        if (leader) bulk_wait_read<EPI - 1>();
        epi_sync(x);
      }
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int j = 4 * j2 + jj, gn = n0 + 8 * j + 2 * q;
        float b0 = 0.0f, b1 = 0.0f;
        if (bias) {
          if (gn < N) b0 = bias[gn];
          if (gn + 1 < N) b1 = bias[gn + 1];
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float v0 = acc[mi][4 * j + 2 * h], v1 = acc[mi][4 * j + 2 * h + 1];
          if (bias) {
            v0 = v0 + b0;
            v1 = v1 + b1;
          }
          const int r = 16 * warp + g + 8 * h;  // r % 8 == g
          st_shared_f2(buf + r * 128 + (((2 * jj + q / 2) ^ g) << 4) + (q % 2) * 8, v0, v1);
        }
      }
      wgmma::fence_proxy_async();  // the tensor store reads what these generic stores wrote
      epi_sync(x);
      if (leader) {
        tma_store_3d(map, n0 + 32 * j2, row + 64 * mi, 0, buf);
        bulk_commit();
      }
      ++ep;
    }
  }
}

// The register A fragment of k16 step k (0..3) of an fp32 stage: rows r and r + 8 (r ≡ g mod 8) of
// the two 32-deep boxes [BM][32] (128-byte rows, 16-byte chunk c at c ^ (row % 8)), columns
// 2q, 2q + 1 and 2q + 8, 2q + 9 of the step, each pair rounded to bf16 (round to nearest even, as
// the pre-pass rounds: the same bf16 values reach the tensor cores).
template <int BM>
__device__ __forceinline__ void f32_fragment(unsigned stage, int r, int g, int q, int k, std::uint32_t (&a)[4]) {
  const unsigned box = stage + (k / 2) * BM * 128, off = (q % 2) * 8;
  const int c0 = (k % 2) * 4 + q / 2;  // the 16-byte chunk of columns 2q, 2q + 1
  const unsigned r0 = box + r * 128, r1 = r0 + 8 * 128;
  const float2 x0 = ptx::ld_shared_f2(r0 + ((c0 ^ g) << 4) + off), x1 = ptx::ld_shared_f2(r1 + ((c0 ^ g) << 4) + off);
  const float2 x2 = ptx::ld_shared_f2(r0 + (((c0 + 2) ^ g) << 4) + off);
  const float2 x3 = ptx::ld_shared_f2(r1 + (((c0 + 2) ^ g) << 4) + off);
  const __nv_bfloat162 p[4] = {__floats2bfloat162_rn(x0.x, x0.y), __floats2bfloat162_rn(x1.x, x1.y),
                               __floats2bfloat162_rn(x2.x, x2.y), __floats2bfloat162_rn(x3.x, x3.y)};
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const std::uint32_t*>(&p[i]);
}

template <int N>
__device__ __forceinline__ void mma_ss_any(float (&d)[N / 2], std::uint64_t da, std::uint64_t db) {
  if constexpr (N == 160 || N == 192) wgmma::mma_ss_wide<N>(d, da, db);
  else wgmma::mma_ss<N>(d, da, db);
}

// A block of a cluster leaves only with its peer: until then the peer may still arrive on its
// barriers. Every thread of both blocks passes here once.
template <int CL>
__device__ __forceinline__ void finish() {
  if constexpr (CL > 1) cluster_sync();
}

// a_map: A's boxes of 64 × BM rows (bf16 copy) or 32 × BM (fp32, F32A); w_map: W [N][K], boxes of
// 64 × BN / CL rows; c_map (EPI > 0 and c_staged): C [M][N] for the tensor stores, else unused.
// raster: block rows per raster group of a dense pass.
template <int BM, int BN, int STAGES, bool PING, bool F32A, int CL, int EPI, int BK>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_bf16_wgmma_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap w_map,
                           const __grid_constant__ CUtensorMap c_map, bool c_staged, int raster, int M, int K, int N,
                           const float* __restrict__ bias, float* __restrict__ C, int ldc, bool pair_store,
                           const int32_t* __restrict__ offsets, int groups) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // Launched with programmatic serialization: the launch and the block set-up overlap the kernel
  // before (the bf16 pre-pass), and every thread waits here until that kernel has completed and its
  // writes are visible, before any read of global memory (offsets, A, W, bias) or any store.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  using T = WgTile<BM, BN, STAGES, PING, F32A, CL, EPI, BK>;
  extern __shared__ unsigned char smem_raw[];
  const unsigned raw = ptx::smem_addr(smem_raw);
  const unsigned ring = (raw + 1023) & ~1023u;
  auto* full = reinterpret_cast<std::uint64_t*>(smem_raw + (ring - raw) + T::kEpiOffset + 2 * EPI * kEpiBytes);
  // A stage's descriptors: the layout the tensor maps write (128- or 64-byte swizzle).
  auto desc = [](unsigned addr) { return BK == kBK ? wgmma::desc_k_sw128(addr) : wgmma::desc_k_sw64(addr); };
  std::uint64_t* empty = full + STAGES;

  // Tiles of CL vertically adjacent block tiles: the blocks of a cluster walk the same sequence, block
  // `rank` taking the rank-th block rows of each (rows past M: zeros, never stored).
  const unsigned rank = CL > 1 ? cluster_rank() : 0;
  const int tiles_m = (M + BM * CL - 1) / (BM * CL), tiles_n = (N + BN - 1) / BN;
  int tiles = tiles_m * tiles_n;
  // Grouped passes: tiles per group, prefix-summed (kMaxGroups at most; the host checks).
  __shared__ int prefix[kMaxGroups + 1];
  if (offsets) {
    for (int z = threadIdx.x; z < groups; z += blockDim.x)
      prefix[z + 1] = (offsets[z + 1] - offsets[z] + BM * CL - 1) / (BM * CL) * tiles_n;
    __syncthreads();
    if (threadIdx.x == 0) {
      prefix[0] = 0;
      for (int z = 0; z < groups; ++z) prefix[z + 1] += prefix[z];
    }
    __syncthreads();
    tiles = prefix[groups];
  }
  const int first = blockIdx.x / CL, stride = gridDim.x / CL;
  const int ktiles = (K + BK - 1) / BK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      ptx::mbar_init(&full[s], 1);                   // the producer's arrive (+ the boxes' bytes)
      ptx::mbar_init(&empty[s], T::kReleaseWarps);  // every consumer warp done reading
    }
    ptx::mbar_init_fence();
  }
  if constexpr (CL > 1) cluster_sync();  // the peer's barriers exist before any copy or arrival reaches them
  else __syncthreads();

  // Broadcast from lane 0 so that ptxas sees the warpgroup index as warp-uniform: branches on it
  // (the ping-pong tile walk) would otherwise count as divergent and serialize the wgmma steps.
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  if (wg == 0) {
    // The producer: one thread issues every copy; the warpgroup gives its registers to the consumers.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (threadIdx.x == 0) {
      int s = 0;
      unsigned phase = 0;
      for (int t = first; t < tiles; t += stride) {
        const TilePlace p = tile_place<BM, BN, CL>(t, rank, M, tiles_m, tiles_n, offsets, prefix, groups, raster);
        for (int kt = 0; kt < ktiles; ++kt) {
          ptx::mbar_wait(&empty[s], phase ^ 1);  // a fresh barrier's "previous phase" counts as done
          ptx::mbar_arrive_expect_tx(&full[s], T::kStageBytes);
          const unsigned a = ring + s * T::kStageBytes;
          const int arow = p.base + p.m0;
          ptx::tma_load_3d(a, &a_map, kt * BK, arow, 0, &full[s]);
          if constexpr (F32A) ptx::tma_load_3d(a + BM * 128, &a_map, kt * BK + 32, arow, 0, &full[s]);
          if constexpr (CL > 1)
            tma_load_3d_multicast(a + T::kABytes + rank * T::kBoxN * T::kRowBytes, &w_map, kt * BK,
                                  p.n0 + rank * T::kBoxN, p.z, &full[s], (1u << CL) - 1);
          else
            ptx::tma_load_3d(a + T::kABytes, &w_map, kt * BK, p.n0, p.z, &full[s]);
          if (++s == STAGES) {
            s = 0;
            phase ^= 1;
          }
        }
      }
    }
    __syncwarp();  // .aligned cluster barrier: the warp arrives converged
    return finish<CL>();
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int c = wg - 1, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int row0 = PING ? 0 : 64 * T::MW * c;  // this warpgroup's first row in the tile
  // A stage is free once every consumer warp of the cluster is done with it: the producers of both
  // blocks write into it.
  auto release = [](std::uint64_t* bar) {
    if constexpr (CL > 1)
      for (unsigned r = 0; r < CL; ++r) mbar_arrive_in(bar, r);
    else
      ptx::mbar_arrive(bar);
  };
  float acc[T::MW][BN / 2];
  int staged = 0;  // staging buffers this warpgroup has filled (EPI > 0)
  std::uint32_t frag[2][4][4];  // F32A: the A fragments of two stages (one may still be read)
  // Local tile i (the block's i-th) is ring fill i·ktiles + kt for its stage kt.
  for (int i = PING ? c : 0, t = first + i * stride; t < tiles; i += PING ? 2 : 1, t = first + i * stride) {
    const TilePlace p = tile_place<BM, BN, CL>(t, rank, M, tiles_m, tiles_n, offsets, prefix, groups, raster);
#pragma unroll
    for (int mi = 0; mi < T::MW; ++mi)
#pragma unroll
      for (int e = 0; e < BN / 2; ++e) acc[mi][e] = 0.0f;
    if (PING && i > 0) turn_wait(1 - c);
    int fill = i * ktiles, prev = -1;
    // One stage: its k16 steps (4, or 2 in a 32-deep tail: the box's zero half is never multiplied),
    // then the previous stage freed once its steps are done (at most this stage's group pending).
    auto stage = [&](int kt, std::uint32_t (&fa)[4][4], std::uint32_t (&fprev)[4][4]) {
      const int s = fill % STAGES;
      ptx::mbar_wait(&full[s], (fill / STAGES) & 1);
      const unsigned a = ring + s * T::kStageBytes;
      const std::uint64_t db = desc(a + T::kABytes);
      // 4 steps (2 in a 32-deep stage); 2 in a 64-deep tail stage (K % 64 == 32).
      const int steps = BK == kBK && K - kt * BK < BK ? 2 : BK / 16;
      if constexpr (F32A) {
#pragma unroll
        for (int k = 0; k < 4; ++k)
          if (k < steps) f32_fragment<BM>(a, row0 + 16 * warp + g, g, q, k, fa[k]);
      }
      wgmma::fence();
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (k < steps) {
          if constexpr (F32A) {
            wgmma::mma_rs<BN>(acc[0], fa[k], db + 2 * k);
          } else {
#pragma unroll
            for (int mi = 0; mi < T::MW; ++mi)
              mma_ss_any<BN>(acc[mi], desc(a + (row0 + 64 * mi) * T::kRowBytes) + 2 * k, db + 2 * k);
          }
        }
      wgmma::commit_group();
      wgmma::wait_group<1>();
      if constexpr (F32A)
#pragma unroll
        for (int k = 0; k < 4; ++k) wgmma::fence_fragment(fprev[k]);
      if (prev >= 0 && lane == 0) release(&empty[prev]);
      prev = s;
      ++fill;
    };
    // Two stages per turn so that each fragment buffer has a fixed register home.
    for (int kt = 0; kt < ktiles; kt += 2) {
      stage(kt, frag[0], frag[1]);
      if (kt + 1 < ktiles) stage(kt + 1, frag[1], frag[0]);
    }
    if (PING && first + (i + 1) * stride < tiles) turn_arrive(c);
    wgmma::wait_group<0>();
#pragma unroll
    for (int mi = 0; mi < T::MW; ++mi) wgmma::fence_operands(acc[mi]);
    if constexpr (F32A)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        wgmma::fence_fragment(frag[0][k]);
        wgmma::fence_fragment(frag[1][k]);
      }
    if (prev >= 0 && lane == 0) release(&empty[prev]);

    if constexpr (EPI > 0) {
      if (c_staged) {  // dense passes only (the host's choice): p.base = 0, p.limit = M
        store_staged<T::MW, BN, EPI>(acc, ring + T::kEpiOffset + c * EPI * kEpiBytes, staged, &c_map, p.m0 + row0,
                                     p.limit, p.n0, N, bias, c, warp, g, q, threadIdx.x % 128 == 0);
        continue;
      }
    }
    // acc[mi][4j + 2h + e] is row 64·mi + 16·warp + g + 8h of this warpgroup's rows, column
    // 8j + 2q + e: each quad of lanes stores 8 consecutive floats of a row (a whole 32-byte sector).
#pragma unroll
    for (int mi = 0; mi < T::MW; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int lm = p.m0 + row0 + 64 * mi + 16 * warp + g + 8 * h;
        if (lm >= p.limit) continue;
        float* crow = C + static_cast<std::size_t>(p.base + lm) * ldc;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const int gn = p.n0 + 8 * j + 2 * q;
          store_column_pair(crow, gn, N, acc[mi][4 * j + 2 * h], acc[mi][4 * j + 2 * h + 1], bias, pair_store);
        }
      }
  }
  // The staging buffers stay read until the tensor stores complete: the issuing thread waits for them.
  if (EPI > 0 && staged > 0 && threadIdx.x % 128 == 0) bulk_wait_all();
  __syncwarp();
  finish<CL>();
#endif
}

// The cooperative tile with its epilogue inside the next tile's steps (tiles "...o"): each consumer
// warpgroup keeps two accumulator sets (BN = 160 or 192: 2 × BN / 2 registers fit beside the rest) and
// alternates between them tile by tile. While the steps of tile i run on one set (asynchronously, in
// the tensor cores), the warpgroup stores tile i - 1's set one 8-column block per stage, so the
// tensor cores never wait for the epilogue and the C stores spread over the whole tile instead of
// arriving from every SM at once. The stage's wait for all but its own group (wait_group 1) is what
// makes the previous tile's set final before its first store. Dense passes, bf16 A, 128-row tiles
// (64 rows per warpgroup), one block per SM. Bits: the same steps on the same kind of accumulator as
// gemm_bf16_wgmma_kernel (file comment); only when C is written differs.
template <int BN, int STAGES>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_bf16_wgmma_overlap_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap w_map,
                                   int raster, int M, int K, int N, const float* __restrict__ bias,
                                   float* __restrict__ C, int ldc, bool pair_store) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // as gemm_bf16_wgmma_kernel
  using T = WgTile<128, BN, STAGES, false, false, 1>;
  extern __shared__ unsigned char smem_raw[];
  const unsigned raw = ptx::smem_addr(smem_raw);
  const unsigned ring = (raw + 1023) & ~1023u;
  auto* full = reinterpret_cast<std::uint64_t*>(smem_raw + (ring - raw) + T::kEpiOffset);
  std::uint64_t* empty = full + STAGES;
  const int tiles_m = (M + 127) / 128, tiles_n = (N + BN - 1) / BN, tiles = tiles_m * tiles_n;
  const int ktiles = (K + kBK - 1) / kBK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      ptx::mbar_init(&full[s], 1);
      ptx::mbar_init(&empty[s], T::kReleaseWarps);
    }
    ptx::mbar_init_fence();
  }
  __syncthreads();
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  if (wg == 0) {  // the producer, as gemm_bf16_wgmma_kernel's
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (threadIdx.x == 0) {
      int s = 0;
      unsigned phase = 0;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const TilePlace p = tile_place<128, BN, 1>(t, 0, M, tiles_m, tiles_n, nullptr, nullptr, 1, raster);
        for (int kt = 0; kt < ktiles; ++kt) {
          ptx::mbar_wait(&empty[s], phase ^ 1);
          ptx::mbar_arrive_expect_tx(&full[s], T::kStageBytes);
          const unsigned a = ring + s * T::kStageBytes;
          ptx::tma_load_3d(a, &a_map, kt * kBK, p.m0, 0, &full[s]);
          ptx::tma_load_3d(a + T::kABytes, &w_map, kt * kBK, p.n0, 0, &full[s]);
          if (++s == STAGES) {
            s = 0;
            phase ^= 1;
          }
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int c = wg - 1, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4, row0 = 64 * c;
  float acc[2][BN / 2];
  int fill = 0, prev = -1;
  // One stage of the tile on accumulator set d, then the previous stage freed (as the main kernel's).
  auto stage = [&](float (&d)[BN / 2], int kt) {
    const int s = fill % STAGES;
    ptx::mbar_wait(&full[s], (fill / STAGES) & 1);
    const unsigned a = ring + s * T::kStageBytes;
    const std::uint64_t da = wgmma::desc_k_sw128(a + row0 * 128), db = wgmma::desc_k_sw128(a + T::kABytes);
    const int steps = K - kt * kBK >= kBK ? 4 : 2;
    wgmma::fence();
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (k < steps) mma_ss_any<BN>(d, da + 2 * k, db + 2 * k);
    wgmma::commit_group();
    wgmma::wait_group<1>();
    if (prev >= 0 && lane == 0) ptx::mbar_arrive(&empty[prev]);
    prev = s;
    ++fill;
  };
  // Column block j (8 columns) of a finished tile at p from set d: rows g, g + 8 of this warp's 16.
  auto store_block = [&](const float (&d)[BN / 2], int j, const TilePlace& p) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int lm = p.m0 + row0 + 16 * warp + g + 8 * h;
      if (lm < M)
        store_column_pair(C + static_cast<std::size_t>(lm) * ldc, p.n0 + 8 * j + 2 * q, N, d[4 * j + 2 * h],
                          d[4 * j + 2 * h + 1], bias, pair_store);
    }
  };
  TilePlace pending{0, 0, M, 0, 0};
  bool have_pending = false;
  // Tile i on set B (i % 2): its first BN / 8 stages each followed by one block of the other set's
  // tile (the one before), then the rest of its stages.
  auto tile = [&](auto set, const TilePlace& p) {
    constexpr int B = decltype(set)::value;
#pragma unroll
    for (int e = 0; e < BN / 2; ++e) acc[B][e] = 0.0f;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      if (j < ktiles) stage(acc[B], j);
      if (have_pending) {
        if (j == 0) wgmma::fence_operands(acc[1 - B]);  // final: the first stage waited for its last group
        store_block(acc[1 - B], j, pending);
      }
    }
    for (int kt = BN / 8; kt < ktiles; ++kt) stage(acc[B], kt);
    pending = p;
    have_pending = true;
  };
  int i = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++i) {
    const TilePlace p = tile_place<128, BN, 1>(t, 0, M, tiles_m, tiles_n, nullptr, nullptr, 1, raster);
    if (i % 2 == 0) tile(std::integral_constant<int, 0>{}, p);
    else tile(std::integral_constant<int, 1>{}, p);
  }
  wgmma::wait_group<0>();
  wgmma::fence_operands(acc[0]);
  wgmma::fence_operands(acc[1]);
  if (prev >= 0 && lane == 0) ptx::mbar_arrive(&empty[prev]);
  if (have_pending) {  // the last tile, on set (i - 1) % 2
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      if (i % 2 == 1) store_block(acc[0], j, pending);
      else store_block(acc[1], j, pending);
    }
  }
#endif
}

struct Launch {
  const float* A;  // fp32 [M][lda]
  const void* a16;  // its bf16 copy [M][K] (nullptr for the F32A tiles, which take A itself)
  int M, K, lda;
  const void* W;
  int N;
  const float* bias;
  float* C;
  int ldc;
  bool pair_store;
  cudaStream_t s;
  const int32_t* offsets = nullptr;  // grouped: [groups + 1] row offsets on the device; M = all rows
  int groups = 1;
  std::int64_t w_stride = 0;  // grouped: elements between consecutive groups' weights
};

// Blocks (clusters of CL) that fit on the device at once: a persistent grid larger than that would
// run its last blocks after the others. Asked of the runtime once per kernel and device.
template <typename Kernel>
int resident_clusters(Kernel kernel, int cl, int smem, std::atomic<int>& cached) {
  if (cl == 1) return sm_count();
  if (const int n = cached.load()) return n;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(cl), 1, 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = static_cast<std::size_t>(smem);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cl);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  outside_capture([&] { return cudaOccupancyMaxActiveClusters(&n, kernel, &cfg); }, "cudaOccupancyMaxActiveClusters");
  n = std::max(n, 1);
  cached.store(n);
  return n;
}

// RASTER: block rows per raster group of a dense pass (the order tiles are taken in, never their steps).
template <int BM, int BN, int STAGES, bool PING, bool F32A, int CL, int EPI = 0, int RASTER = kGroup, int BK = kBK>
void launch(const Launch& l) {
  using T = WgTile<BM, BN, STAGES, PING, F32A, CL, EPI, BK>;
  auto* kernel = gemm_bf16_wgmma_kernel<BM, BN, STAGES, PING, F32A, CL, EPI, BK>;
  static std::atomic<std::uint64_t> opted{0};
  static std::atomic<int> clusters{0};
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), T::kSmemBytes, opted);
  const CUtensorMap a_map = F32A ? f32_rows_tensor_map_sw128(l.A, l.K, l.M, l.lda, BM)
                                 : bf16_rows_tensor_map_cached(l.a16, l.K, l.M, BM, BK);
  const CUtensorMap w_map = l.offsets ? bf16_rows_tensor_map(l.W, l.K, l.N, l.groups, l.w_stride, T::kBoxN, BK)
                                      : bf16_rows_tensor_map_cached(l.W, l.K, l.N, T::kBoxN, BK);
  // The staged epilogue takes dense passes whose C rows the TMA unit can address and end on a 16-byte
  // boundary (f32_store_tensor_map_fits); the others store from registers (same values, same bits).
  const bool c_staged = EPI > 0 && !l.offsets && f32_store_tensor_map_fits(l.C, l.N, l.ldc);
  const CUtensorMap c_map = c_staged ? f32_store_tensor_map_cached(l.C, l.N, l.M, l.ldc) : CUtensorMap{};
  // Grouped: each group's last tile may be partial, so at most groups more block rows than dense.
  const long tiles = long((l.M + BM * CL - 1) / (BM * CL) + (l.offsets ? l.groups : 0)) * long((l.N + BN - 1) / BN);
  const long groups = std::min<long>(tiles, resident_clusters(kernel, CL, T::kSmemBytes, clusters));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(groups * CL), 1, 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = T::kSmemBytes;
  cfg.stream = l.s;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = CL;
  attr[1].val.clusterDim.y = 1;
  attr[1].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = CL > 1 ? 2 : 1;
  cuda_check(cudaLaunchKernelEx(&cfg, kernel, a_map, w_map, c_map, c_staged, RASTER, l.M, l.K, l.N, l.bias, l.C, l.ldc,
                                l.pair_store, l.offsets, l.groups),
             "gemm_bf16_wgmma launch");
}

// The overlap tiles (gemm_bf16_wgmma_overlap_kernel): dense passes; a grouped pass takes the 128×160
// tile of the main kernel instead (the same bits).
template <int BN, int STAGES>
void launch_overlap(const Launch& l) {
  if (l.offsets) return launch<128, 160, 6, false, false, 1>(l);
  using T = WgTile<128, BN, STAGES, false, false, 1>;
  auto* kernel = gemm_bf16_wgmma_overlap_kernel<BN, STAGES>;
  static std::atomic<std::uint64_t> opted{0};
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), T::kSmemBytes, opted);
  const CUtensorMap a_map = bf16_rows_tensor_map_cached(l.a16, l.K, l.M, 128);
  const CUtensorMap w_map = bf16_rows_tensor_map_cached(l.W, l.K, l.N, BN);
  const long tiles = long((l.M + 127) / 128) * long((l.N + BN - 1) / BN);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(std::min<long>(tiles, sm_count())), 1, 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = T::kSmemBytes;
  cfg.stream = l.s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cuda_check(cudaLaunchKernelEx(&cfg, kernel, a_map, w_map, kGroup, l.M, l.K, l.N, l.bias, l.C, l.ldc, l.pair_store),
             "gemm_bf16_wgmma_overlap launch");
}

struct TileChoice {
  int bm, bn, cl;
  bool f32a;  // takes fp32 A itself (no bf16 pre-pass)
  const char* name;
  double rate;  // relative throughput of a full wave (a way's plan weighs its tiles by it); 0: in no way
  void (*run)(const Launch&);
};
// Tiles 0 and 1 were session 9's choice (H200: at M = 4096, 128×256 for in_proj and lm_head, 128×128
// or a row cut of both for out_proj; way 0 below). Also kept as measured comparisons: the ping-pong
// tile (0.85–0.9× of 0: the epilogue overlap does not pay), fp32 A without a pre-pass (0.7–0.8×), the
// cluster of two with W multicast, 128×160. Session 11's candidates, measured against 0 and 1 in one
// benchmark run (BM_CudaGemmWgmma; docs/performance.md): suffix s: the staged TMA-store epilogue
// (EPI = 2; s4: EPI = 4); rNN: raster groups of NN block rows (else kGroup); c2: a cluster of two
// with W multicast; k32: 32-deep stages in the 64-byte swizzle; ping64x256: ping-pong on m64n256
// steps; 256×128: two m64n128 steps per warpgroup and k16; o: the epilogue inside the next tile's
// steps (two accumulator sets). A way (below) names the tiles gemm() plans with.
const TileChoice kTiles[] = {
    {128, 256, 1, false, "coop128x256x4", 1.00, launch<128, 256, 4, false, false, 1>},    // 192 KiB of stages
    {128, 128, 1, false, "coop128x128x6", 0.93, launch<128, 128, 6, false, false, 1>},    // 192 KiB
    {128, 128, 1, false, "ping128x128x6", 0.00, launch<128, 128, 6, true, false, 1>},     // 192 KiB
    {128, 256, 1, true, "coop128x256x3f", 0.00, launch<128, 256, 3, false, true, 1>},     // 192 KiB, fp32 A
    {128, 256, 2, false, "coop128x256x4c2", 0.00, launch<128, 256, 4, false, false, 2>},  // W multicast to 2 blocks
    {128, 160, 1, false, "coop128x160x6", 0.00, launch<128, 160, 6, false, false, 1>},    // 216 KiB
    {128, 256, 1, false, "coop128x256x4s", 1.00, launch<128, 256, 4, false, false, 1, 2>},       // 192 + 32 KiB
    {128, 128, 1, false, "coop128x128x6s", 0.92, launch<128, 128, 6, false, false, 1, 2>},       // 192 + 32 KiB
    {128, 256, 1, false, "coop128x256x4sr16", 1.00, launch<128, 256, 4, false, false, 1, 2, 16>},
    {128, 256, 2, false, "coop128x256x4c2s", 0.00, launch<128, 256, 4, false, false, 2, 2>},
    {128, 256, 1, false, "coop128x256x3s4", 0.00, launch<128, 256, 3, false, false, 1, 4>},      // 144 + 64 KiB
    {64, 256, 1, false, "ping64x256x5", 0.00, launch<64, 256, 5, true, false, 1>},               // 200 KiB
    {64, 256, 2, false, "ping64x256x5c2", 0.00, launch<64, 256, 5, true, false, 2>},             // W multicast
    {256, 128, 1, false, "coop256x128x4", 0.00, launch<256, 128, 4, false, false, 1>},           // 192 KiB
    {256, 128, 1, false, "coop256x128x4s", 0.00, launch<256, 128, 4, false, false, 1, 2>},       // 192 + 32 KiB
    {128, 192, 1, false, "coop128x192x5o", 0.00, launch_overlap<192, 5>},                        // 200 KiB
    {128, 160, 1, false, "coop128x160x6o", 0.00, launch_overlap<160, 6>},                        // 216 KiB
    {128, 256, 1, false, "coop128x256k32x8sr16", 1.00, launch<128, 256, 8, false, false, 1, 2, 16, 32>},  // 192 + 32 KiB
    {128, 256, 2, false, "coop128x256k32x8c2sr16", 0.00, launch<128, 256, 8, false, false, 2, 2, 16, 32>},
    {128, 256, 2, false, "coop128x256x4c2sr16", 0.00, launch<128, 256, 4, false, false, 2, 2, 16>},
    {128, 256, 1, false, "coop128x256k32x9r16", 0.00, launch<128, 256, 9, false, false, 1, 0, 16, 32>},   // 216 KiB
    {128, 256, 2, false, "coop128x256x4c2r16", 1.00, launch<128, 256, 4, false, false, 2, 0, 16>},
    {128, 256, 1, false, "coop128x256x4sr32", 0.00, launch<128, 256, 4, false, false, 1, 2, 32>},
    {128, 160, 1, false, "coop128x160x5sr16", 0.93, launch<128, 160, 5, false, false, 1, 2, 16>},  // 180 + 32 KiB
    {128, 256, 2, false, "coop128x256k32x8c2r16", 1.00, launch<128, 256, 8, false, false, 2, 0, 16, 32>},
};
constexpr int kTileCount = sizeof(kTiles) / sizeof(kTiles[0]);

// Persistent blocks each take every sms-th tile one after the other: a pass costs the most tiles a
// block takes times a tile's work over its rate. A function of M, N and the SM count only.
double pass_cost(const TileChoice& t, int M, int N, int sms) {
  if (M <= 0) return 0;
  const long tiles = long((M + t.bm * t.cl - 1) / (t.bm * t.cl)) * long((N + t.bn - 1) / t.bn);
  const long slots = sms / t.cl;  // clusters
  return double((tiles + slots - 1) / slots) * t.bm * t.bn * t.cl / t.rate;
}

// A way: the tiles gemm_bf16_wgmma plans a pass with (the cheapest by pass_cost, or a row cut of two
// of them). Way 0 is main's (session 9's 128×256 and 128×128), way 1 their twins with the staged
// epilogue; 2-4 session 11's candidates (raster groups of 16 block rows, the staged 128×160 tile
// for out_proj's 2560 columns; 2: staged 128×256, 3: its cluster twin with W multicast, 4: 32-deep
// stages, 5: 32-deep stages in a cluster); kDefaultWay is gemm()'s. Every way gives the same bits (the tiles differ in when steps
// run and how C is written, never in the steps).
struct Way {
  const char* name;
  int tiles[3];  // indices into kTiles; -1: none
};
const Way kWays[] = {{"main", {0, 1, -1}},          {"staged", {6, 7, -1}}, {"staged-r16", {8, 7, 23}},
                     {"c2-r16", {21, 7, 23}}, {"k32", {17, 7, 23}},    {"k32-c2", {24, 7, 23}}};
constexpr int kWayCount = sizeof(kWays) / sizeof(kWays[0]);
constexpr int kDefaultWay = 2;  // session 11: every tile of it measured faster than main's twin (H200, run 1)

int choose_tile(int M, int N, int way) {
  const int sms = sm_count();
  int best = kWays[way].tiles[0];
  for (int t : kWays[way].tiles)
    if (t >= 0 && pass_cost(kTiles[t], M, N, sms) < pass_cost(kTiles[best], M, N, sms)) best = t;
  return best;
}

// A dense pass may be cut by rows into two launches on two tiles: rows [0, rows_first) on `first`,
// the rest on `second`, so that neither leaves most of a last round of blocks idle (out_proj at
// M = 4096: 320 tiles of 128×256 are 2.4 rounds on 132 SMs, 640 of 128×128 are 4.8; 26 block rows
// of 128×256 then 6 of 128×128 are 2.0 + 0.9). Each row is still computed whole by one tile, so the
// bits are those of either tile alone. Chosen from M, N and the SM count only; a second launch must
// save more than kLaunchCost of work units to be worth it.
struct Plan {
  int first, second, rows_first;
};
constexpr double kLaunchCost = 16;
Plan choose_plan(int M, int N, int way) {
  const int sms = sm_count();
  Plan best{choose_tile(M, N, way), 0, M};
  double best_cost = pass_cost(kTiles[best.first], M, N, sms);
  for (int a : kWays[way].tiles)
    for (int b : kWays[way].tiles) {
      if (a < 0 || b < 0 || a == b || kTiles[a].f32a || kTiles[b].f32a) continue;
      const TileChoice &ta = kTiles[a], &tb = kTiles[b];
      const int step = ta.bm * ta.cl;
      for (int m1 = step; m1 < M; m1 += step) {
        const double cost = pass_cost(ta, m1, N, sms) + pass_cost(tb, M - m1, N, sms) + kLaunchCost;
        if (cost < best_cost) {
          best = Plan{a, b, m1};
          best_cost = cost;
        }
      }
    }
  return best;
}

void run_tile(int tile, const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C,
              int ldc, cudaStream_t s) {
  if (M <= 0 || N <= 0) return;
  const bool pair_store = ldc % 2 == 0 && reinterpret_cast<std::uintptr_t>(C) % 8 == 0;
  if (kTiles[tile].f32a) {
    kTiles[tile].run(Launch{A, nullptr, M, K, lda, W, N, bias, C, ldc, pair_store, s});
  } else {
    with_bf16_rows(A, M, K, lda, s, [&](const void* a16) {
      kTiles[tile].run(Launch{A, a16, M, K, lda, W, N, bias, C, ldc, pair_store, s});
    });
  }
  check_launch("gemm_bf16_wgmma");
}

}  // namespace

int gemm_wgmma_max_groups() { return kMaxGroups; }

void gemm_grouped_bf16_wgmma_tile(int tile, const float* A, int lda, const int32_t* offsets, int groups,
                                  int total_rows, int K, const void* W, int64_t w_stride, int N, float* C, int ldc,
                                  cudaStream_t s) {
  if (groups <= 0 || total_rows <= 0 || N <= 0) return;
  if (groups > kMaxGroups) throw Error("gemm_grouped_bf16_wgmma: more groups than one launch takes");
  const bool pair_store = ldc % 2 == 0 && reinterpret_cast<std::uintptr_t>(C) % 8 == 0;
  Launch l{A, nullptr, total_rows, K, lda, W, N, nullptr, C, ldc, pair_store, s};
  l.offsets = offsets;
  l.groups = groups;
  l.w_stride = w_stride;
  if (kTiles[tile].f32a) {
    kTiles[tile].run(l);
  } else {
    with_bf16_rows(A, total_rows, K, lda, s, [&](const void* a16) {
      l.a16 = a16;
      kTiles[tile].run(l);
    });
  }
  check_launch("gemm_grouped_bf16_wgmma");
}

void gemm_grouped_bf16_wgmma(const float* A, int lda, const int32_t* offsets, int groups, int total_rows, int K,
                             const void* W, int64_t w_stride, int N, float* C, int ldc, cudaStream_t s) {
  gemm_grouped_bf16_wgmma_tile(choose_tile((total_rows + groups - 1) / groups, N, kDefaultWay), A, lda, offsets, groups,
                               total_rows, K, W, w_stride, N, C, ldc, s);
}

bool gemm_wgmma_fits(const float* A, int K, int lda, const void* W) { return gemm_mma_fits(A, K, lda, W); }

void gemm_bf16_wgmma(const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C, int ldc,
                     cudaStream_t s) {
  gemm_bf16_wgmma_way(kDefaultWay, A, M, K, lda, W, N, bias, C, ldc, s);
}

int gemm_wgmma_way_count() { return kWayCount; }
int gemm_wgmma_default_way() { return kDefaultWay; }
const char* gemm_wgmma_way_name(int way) { return way >= 0 && way < kWayCount ? kWays[way].name : "?"; }

void gemm_bf16_wgmma_way(int way, const float* A, int M, int K, int lda, const void* W, int N, const float* bias,
                         float* C, int ldc, cudaStream_t s) {
  if (M <= 0 || N <= 0) return;
  if (way < 0 || way >= kWayCount) throw Error("gemm_bf16_wgmma_way: no way " + std::to_string(way));
  const Plan plan = choose_plan(M, N, way);
  if (plan.rows_first >= M) {
    run_tile(plan.first, A, M, K, lda, W, N, bias, C, ldc, s);
    return;
  }
  // Two launches on one bf16 copy of A (both tiles take the pre-pass's copy: choose_plan skips fp32-A tiles).
  const bool pair_store = ldc % 2 == 0 && reinterpret_cast<std::uintptr_t>(C) % 8 == 0;
  const int m1 = plan.rows_first;
  with_bf16_rows(A, M, K, lda, s, [&](const void* a16) {
    kTiles[plan.first].run(Launch{A, a16, m1, K, lda, W, N, bias, C, ldc, pair_store, s});
    const auto* rest = static_cast<const unsigned char*>(a16) + std::size_t(m1) * K * 2;
    kTiles[plan.second].run(Launch{A + std::size_t(m1) * lda, rest, M - m1, K, lda, W, N, bias,
                                   C + std::size_t(m1) * ldc, ldc, pair_store, s});
  });
  check_launch("gemm_bf16_wgmma");
}

int gemm_wgmma_tile_count() { return kTileCount; }
const char* gemm_wgmma_tile_name(int tile) { return tile >= 0 && tile < kTileCount ? kTiles[tile].name : "?"; }

void gemm_bf16_wgmma_tile(int tile, const float* A, int M, int K, int lda, const void* W, int N, const float* bias,
                          float* C, int ldc, cudaStream_t s) {
  run_tile(tile, A, M, K, lda, W, N, bias, C, ldc, s);
}

}  // namespace parity::cuda
