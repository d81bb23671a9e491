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
// tile's and way's time, and session 12 lists the tiles measured slower and removed since.
//
// Bits: every output element is the chain the other bf16 kernels compute (gemm.cu): K in 16-deep
// steps ascending into one fp32 accumulator that starts as +0 in registers (scale-d is always 1, so
// the first step adds to +0 as mma.sync's chain from c = 0 does), the bias added once at the end.
// wgmma accumulates such a chain with mma.sync m16n8k16's bits (tests/cuda/cuda_wgmma_bits_test.cpp).
// A stage is a 64-deep box; past K the box holds zeros, and a 32-deep tail stage issues two steps,
// never a step over the zeros (it could turn a -0 into +0). Rows past M and columns past N are
// zeros that feed outputs never stored. The tile shape, the ring depth, which block takes a tile
// and when, and how C is written only decide when each step runs, never
// which steps or in what order. tests/cuda/cuda_gemm_wgmma_test.cpp compares every tile with the mma
// tiles bit for bit, cuda_gemm_wgmma_way_test.cpp every way with session 9's.
#include "kernels_cuda/gemm_wgmma.h"

#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <string>

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

// A BM × BN block tile with STAGES ring stages of 64-deep boxes; both consumer warpgroups work on
// each tile, 64·MW rows each. EPI > 0 (the staged epilogue): each consumer warpgroup writes its
// accumulators into EPI shared-memory buffers of 64 rows × 32 columns in turn and the TMA unit
// stores each buffer to C while the warpgroup fills the next and then runs the next tile's steps;
// EPI = 0: the consumers store C themselves (8-byte stores, a quad of lanes per 32-byte sector).
template <int BM, int BN, int STAGES, int EPI = 0>
struct WgTile {
  static constexpr int MW = BM / 128;  // m64 steps per warpgroup and k16
  static constexpr int kABytes = BM * kBK * 2;
  static constexpr int kBBytes = BN * kBK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kReleaseWarps = 8;                  // arrivals that free a stage: every consumer warp
  static constexpr int kEpiOffset = STAGES * kStageBytes;  // the two warpgroups' staging buffers
  // Stages, staging buffers, the barriers, and slack to align the ring to 1024 bytes (the swizzle's anchor).
  static constexpr int kSmemBytes = STAGES * kStageBytes + 2 * EPI * kEpiBytes + 2 * STAGES * 8 + 1024;
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "boxes 1024-byte aligned");
  static_assert(MW >= 1 && BM % 64 == 0 && BN % 16 == 0 && BN <= 256, "whole m64nBN steps");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
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
template <int BM, int BN>
__device__ __forceinline__ TilePlace tile_place(int t, int M, int tiles_m, int tiles_n, const int32_t* offsets,
                                                const int* prefix, int groups, int raster) {
  TilePlace p{0, 0, M, 0, 0};
  if (!offsets) {
    tile_origin(t, tiles_m, tiles_n, BM, BN, raster, p.m0, p.n0);
  } else {
    int z = 0;
    while (z + 1 < groups && prefix[z + 1] <= t) ++z;
    const int rows = offsets[z + 1] - offsets[z], local = t - prefix[z];
    const int tiles_mz = (rows + BM - 1) / BM;
    p = TilePlace{offsets[z], (local % tiles_mz) * BM, rows, (local / tiles_mz) * BN, z};
  }
  return p;
}

// The staged epilogue (EPI > 0). Consumer warpgroup x syncs its own 128 threads on barrier 3 + x
// (0 is __syncthreads; 1 and 2 were the turns of the ping-pong tiles removed in session 12). One
// thread per warpgroup issues the tensor stores, each closing a bulk group; before a buffer is written
// again, that thread waits until at most `pending` of its groups are still reading shared memory, then
// the warpgroup syncs.
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
      ptx::fence_proxy_async();  // the tensor store reads what these generic stores wrote
      epi_sync(x);
      if (leader) {
        tma_store_3d(map, n0 + 32 * j2, row + 64 * mi, 0, buf);
        bulk_commit();
      }
      ++ep;
    }
  }
}

template <int N>
__device__ __forceinline__ void mma_ss_any(float (&d)[N / 2], std::uint64_t da, std::uint64_t db) {
  if constexpr (N == 160) wgmma::mma_ss_wide<N>(d, da, db);
  else wgmma::mma_ss<N>(d, da, db);
}

// a_map: A's boxes of 64 × BM rows (its bf16 copy); w_map: W [N][K], boxes of 64 × BN rows; c_map
// (EPI > 0 and c_staged): C [M][N] for the tensor stores, else unused. raster: block rows per raster
// group of a dense pass.
template <int BM, int BN, int STAGES, int EPI>
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
  using T = WgTile<BM, BN, STAGES, EPI>;
  extern __shared__ unsigned char smem_raw[];
  const unsigned raw = ptx::smem_addr(smem_raw);
  const unsigned ring = (raw + 1023) & ~1023u;
  auto* full = reinterpret_cast<std::uint64_t*>(smem_raw + (ring - raw) + T::kEpiOffset + 2 * EPI * kEpiBytes);
  std::uint64_t* empty = full + STAGES;

  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  int tiles = tiles_m * tiles_n;
  // Grouped passes: tiles per group, prefix-summed (kMaxGroups at most; the host checks).
  __shared__ int prefix[kMaxGroups + 1];
  if (offsets) {
    for (int z = threadIdx.x; z < groups; z += blockDim.x)
      prefix[z + 1] = (offsets[z + 1] - offsets[z] + BM - 1) / BM * tiles_n;
    __syncthreads();
    if (threadIdx.x == 0) {
      prefix[0] = 0;
      for (int z = 0; z < groups; ++z) prefix[z + 1] += prefix[z];
    }
    __syncthreads();
    tiles = prefix[groups];
  }
  const int first = blockIdx.x, stride = gridDim.x;
  const int ktiles = (K + kBK - 1) / kBK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      ptx::mbar_init(&full[s], 1);                   // the producer's arrive (+ the boxes' bytes)
      ptx::mbar_init(&empty[s], T::kReleaseWarps);  // every consumer warp done reading
    }
    ptx::mbar_init_fence();
  }
  __syncthreads();

  // Broadcast from lane 0 so that ptxas sees the warpgroup index as warp-uniform: branches on it
  // would otherwise count as divergent and serialize the wgmma steps.
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  if (wg == 0) {
    // The producer: one thread issues every copy; the warpgroup gives its registers to the consumers.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (threadIdx.x == 0) {
      int s = 0;
      unsigned phase = 0;
      for (int t = first; t < tiles; t += stride) {
        const TilePlace p = tile_place<BM, BN>(t, M, tiles_m, tiles_n, offsets, prefix, groups, raster);
        for (int kt = 0; kt < ktiles; ++kt) {
          ptx::mbar_wait(&empty[s], phase ^ 1);  // a fresh barrier's "previous phase" counts as done
          ptx::mbar_arrive_expect_tx(&full[s], T::kStageBytes);
          const unsigned a = ring + s * T::kStageBytes;
          ptx::tma_load_3d(a, &a_map, kt * kBK, p.base + p.m0, 0, &full[s]);
          ptx::tma_load_3d(a + T::kABytes, &w_map, kt * kBK, p.n0, p.z, &full[s]);
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
  const int g = lane / 4, q = lane % 4;
  const int row0 = 64 * T::MW * c;  // this warpgroup's first row in the tile
  float acc[T::MW][BN / 2];
  int staged = 0;  // staging buffers this warpgroup has filled (EPI > 0)
  // Local tile i (the block's i-th) is ring fill i·ktiles + kt for its stage kt.
  for (int i = 0, t = first; t < tiles; ++i, t = first + i * stride) {
    const TilePlace p = tile_place<BM, BN>(t, M, tiles_m, tiles_n, offsets, prefix, groups, raster);
#pragma unroll
    for (int mi = 0; mi < T::MW; ++mi)
#pragma unroll
      for (int e = 0; e < BN / 2; ++e) acc[mi][e] = 0.0f;
    int fill = i * ktiles, prev = -1;
    // One stage: its k16 steps (4, or 2 in a 32-deep tail: the box's zero half is never multiplied),
    // then the previous stage freed once its steps are done (at most this stage's group pending).
    auto stage = [&](int kt) {
      const int s = fill % STAGES;
      ptx::mbar_wait(&full[s], (fill / STAGES) & 1);
      const unsigned a = ring + s * T::kStageBytes;
      const std::uint64_t db = wgmma::desc_k_sw128(a + T::kABytes);
      const int steps = K - kt * kBK < kBK ? 2 : 4;
      wgmma::fence();
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (k < steps) {
#pragma unroll
          for (int mi = 0; mi < T::MW; ++mi)
            mma_ss_any<BN>(acc[mi], wgmma::desc_k_sw128(a + (row0 + 64 * mi) * 128) + 2 * k, db + 2 * k);
        }
      wgmma::commit_group();
      wgmma::wait_group<1>();
      if (prev >= 0 && lane == 0) ptx::mbar_arrive(&empty[prev]);
      prev = s;
      ++fill;
    };
    // Two stages a turn: the loop as it was measured (session 11), when a removed tile kept register
    // fragments of two stages.
    for (int kt = 0; kt < ktiles; kt += 2) {
      stage(kt);
      if (kt + 1 < ktiles) stage(kt + 1);
    }
    wgmma::wait_group<0>();
#pragma unroll
    for (int mi = 0; mi < T::MW; ++mi) wgmma::fence_operands(acc[mi]);
    if (prev >= 0 && lane == 0) ptx::mbar_arrive(&empty[prev]);

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
#endif
}

struct Launch {
  const void* a16;  // A's bf16 copy [M][K]
  int M, K;
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

// RASTER: block rows per raster group of a dense pass (the order tiles are taken in, never their steps).
template <int BM, int BN, int STAGES, int EPI = 0, int RASTER = kGroup>
void launch(const Launch& l) {
  using T = WgTile<BM, BN, STAGES, EPI>;
  auto* kernel = gemm_bf16_wgmma_kernel<BM, BN, STAGES, EPI>;
  static std::atomic<std::uint64_t> opted{0};
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), T::kSmemBytes, opted);
  const CUtensorMap a_map = bf16_rows_tensor_map_cached(l.a16, l.K, l.M, BM);
  const CUtensorMap w_map = l.offsets ? bf16_rows_tensor_map(l.W, l.K, l.N, l.groups, l.w_stride, BN)
                                      : bf16_rows_tensor_map_cached(l.W, l.K, l.N, BN);
  // The staged epilogue takes dense passes whose C rows the TMA unit can address and end on a 16-byte
  // boundary (f32_store_tensor_map_fits); the others store from registers (same values, same bits).
  const bool c_staged = EPI > 0 && !l.offsets && f32_store_tensor_map_fits(l.C, l.N, l.ldc);
  const CUtensorMap c_map = c_staged ? f32_store_tensor_map_cached(l.C, l.N, l.M, l.ldc) : CUtensorMap{};
  // Grouped: each group's last tile may be partial, so at most groups more block rows than dense.
  const long tiles = long((l.M + BM - 1) / BM + (l.offsets ? l.groups : 0)) * long((l.N + BN - 1) / BN);
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
  cuda_check(cudaLaunchKernelEx(&cfg, kernel, a_map, w_map, c_map, c_staged, RASTER, l.M, l.K, l.N, l.bias, l.C, l.ldc,
                                l.pair_store, l.offsets, l.groups),
             "gemm_bf16_wgmma launch");
}

struct TileChoice {
  int bm, bn;
  const char* name;
  double rate;  // relative throughput of a full wave (a way's plan weighs its tiles by it)
  void (*run)(const Launch&);
};
// Tiles 0 and 1 were session 9's choice (H200: at M = 4096, 128×256 for in_proj and lm_head, 128×128
// or a row cut of both for out_proj; way 0 below), kept as the reference the ways are tested and
// measured against. 2-4 are gemm()'s since session 11 (way 1): suffix s, the staged TMA-store
// epilogue (EPI = 2); r16, raster groups of 16 block rows (else kGroup). Session 11 measured twenty
// more beside them (ping-pong, fp32 A without a pre-pass, clusters of two with W multicast, 32-deep
// stages, 3 stages with 4 staging buffers, 256×128, C stored during the next tile's steps); none was
// taken by a way gemm() uses, and session 12 removed them (docs/performance.md has their figures).
const TileChoice kTiles[] = {
    {128, 256, "coop128x256x4", 1.00, launch<128, 256, 4>},                  // 192 KiB of stages
    {128, 128, "coop128x128x6", 0.93, launch<128, 128, 6>},                  // 192 KiB
    {128, 256, "coop128x256x4sr16", 1.00, launch<128, 256, 4, 2, 16>},       // 192 + 32 KiB
    {128, 128, "coop128x128x6s", 0.92, launch<128, 128, 6, 2>},              // 192 + 32 KiB
    {128, 160, "coop128x160x5sr16", 0.93, launch<128, 160, 5, 2, 16>},       // 180 + 32 KiB
};
constexpr int kTileCount = sizeof(kTiles) / sizeof(kTiles[0]);

// Persistent blocks each take every sms-th tile one after the other: a pass costs the most tiles a
// block takes times a tile's work over its rate. A function of M, N and the SM count only.
double pass_cost(const TileChoice& t, int M, int N, int sms) {
  if (M <= 0) return 0;
  const long tiles = long((M + t.bm - 1) / t.bm) * long((N + t.bn - 1) / t.bn);
  return double((tiles + sms - 1) / sms) * t.bm * t.bn / t.rate;
}

// A way: the tiles gemm_bf16_wgmma plans a pass with (the cheapest by pass_cost, or a row cut of two
// of them). Way 0 is session 9's (128×256 and 128×128), kept as the reference; way 1 gemm()'s since
// session 11 (kDefaultWay; "staged-r16", way 2 before session 12): the staged epilogue, raster groups
// of 16 block rows, and the staged 128×160 tile for out_proj's 2560 columns. Session 11's other ways
// (staged tiles in raster groups of 8, clusters of two, 32-deep stages, 32-deep stages in clusters)
// were not faster and were removed in session 12. Every way gives the same bits (the tiles differ in
// when steps run and how C is written, never in the steps).
struct Way {
  const char* name;
  int tiles[3];  // indices into kTiles; -1: none
};
const Way kWays[] = {{"main", {0, 1, -1}}, {"staged-r16", {2, 3, 4}}};
constexpr int kWayCount = sizeof(kWays) / sizeof(kWays[0]);
constexpr int kDefaultWay = 1;  // session 11: every tile of it measured faster than main's twin (H200, run 1)

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
      if (a < 0 || b < 0 || a == b) continue;
      const TileChoice &ta = kTiles[a], &tb = kTiles[b];
      const int step = ta.bm;
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
  with_bf16_rows(A, M, K, lda, s, [&](const void* a16) {
    kTiles[tile].run(Launch{a16, M, K, W, N, bias, C, ldc, pair_store, s});
  });
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
  Launch l{nullptr, total_rows, K, W, N, nullptr, C, ldc, pair_store, s};
  l.offsets = offsets;
  l.groups = groups;
  l.w_stride = w_stride;
  with_bf16_rows(A, total_rows, K, lda, s, [&](const void* a16) {
    l.a16 = a16;
    kTiles[tile].run(l);
  });
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
  // Two launches on one bf16 copy of A.
  const bool pair_store = ldc % 2 == 0 && reinterpret_cast<std::uintptr_t>(C) % 8 == 0;
  const int m1 = plan.rows_first;
  with_bf16_rows(A, M, K, lda, s, [&](const void* a16) {
    kTiles[plan.first].run(Launch{a16, m1, K, W, N, bias, C, ldc, pair_store, s});
    const auto* rest = static_cast<const unsigned char*>(a16) + std::size_t(m1) * K * 2;
    kTiles[plan.second].run(Launch{rest, M - m1, K, W, N, bias, C + std::size_t(m1) * ldc, ldc, pair_store, s});
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
