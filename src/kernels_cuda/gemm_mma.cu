// The many-rows bf16 GEMM: the activations are rounded to bf16 once per call into a scratch buffer,
// then mma.sync tensor-core tiles stream both operands through a multi-stage cp.async pipeline.
//
// Bits: every output element is the one chain the other bf16 kernels in gemm.cu compute — K in
// 16-deep tensor-core steps, ascending, into one fp32 accumulator starting at 0, bias added once at
// the end. Rounding A in a pre-pass is the same round-to-nearest-even of the same fp32 values the
// WMMA tiles perform while staging, so the tensor cores see the same bf16 inputs. A 16×16×16 WMMA
// step is two m16n8k16 instructions on this hardware, so the tile shape chosen below (by M and N,
// never by timing), the stage depth, the pipeline and the order in which blocks visit tiles change
// no bit: they only decide when each step of an element's chain runs, never which steps or in what
// order. tests/cuda/cuda_gemm_test.cpp compares every M from 1 to 4096 and every tile against the
// WMMA tiles.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/gemm_mma.h"
#include "kernels_cuda/gemm_store.cuh"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/ptx.cuh"

namespace parity::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kBK = 64;             // K per pipeline stage: four 16-deep steps
constexpr int kChunks = kBK / 8;    // 16-byte chunks per shared row (128 bytes: one full bank sweep)
constexpr int kAlignK = 32;         // K granularity this kernel accepts (the tail stage runs two steps)

// Chunk c of shared row r is stored at chunk c ^ (r % 8): the 8 rows one ldmatrix phase reads (8
// consecutive rows, one chunk column) then fall on 8 different 16-byte bank groups, and cp.async's
// row-contiguous writes stay whole 16-byte chunks.
__device__ __forceinline__ int swizzle(int r, int c) { return r * kBK + ((c ^ (r & 7)) << 3); }

using ptx::cp_async16;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::ldmatrix_x4;
using ptx::mma_bf16;

// A BM×BN block tile, WM×WN warps, STAGES shared-memory stages of kBK of K.
template <int BM, int BN, int WM, int WN, int STAGES>
struct Tile {
  static constexpr int kThreads = 32 * WM * WN;
  static constexpr int kWarpM = BM / WM, kWarpN = BN / WN;
  static constexpr int MI = kWarpM / 16, NI = kWarpN / 8;  // m16 and n8 tiles per warp
  static constexpr int kStageElems = (BM + BN) * kBK;
  static constexpr int kSmemBytes = STAGES * kStageElems * 2;
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "B fragments load two n8 tiles at a time");
  static_assert(BM * kChunks % kThreads == 0 && BN * kChunks % kThreads == 0, "whole chunks per thread");
  static_assert(STAGES >= 2, "the pipeline overlaps at least one stage");
};

// KSTEPS 16-deep steps of one stage, ascending. The fragments of step ks + 1 are read from shared
// memory while the tensor cores work on step ks.
template <typename T, int KSTEPS>
__device__ __forceinline__ void compute_stage(const bf16* as, const bf16* ws, int a_row, int b_row, int lane,
                                              float (&acc)[T::MI][T::NI][4]) {
  unsigned a[2][T::MI][4], b[2][T::NI][2];
  auto load = [&](int buf, int ks) {
    // ldmatrix x4 for A: lanes 0-15 address rows 0-15 at chunk 2ks, lanes 16-31 the same rows at
    // chunk 2ks+1: registers a0..a3 are m16n8k16's A fragment. For W ([n][k] rows, mma's "col" B):
    // lanes 0-7 / 8-15 address n 0-7 at chunks 2ks / 2ks+1, lanes 16-31 the same for n 8-15: the
    // registers are b0, b1 of two n8 tiles.
    const int xr = lane & 7;  // every row a lane addresses is ≡ lane (mod 8)
    const int ca = ((2 * ks + lane / 16) ^ xr) << 3;
    const int cb = ((2 * ks + (lane / 8) % 2) ^ xr) << 3;
#pragma unroll
    for (int i = 0; i < T::MI; ++i) ldmatrix_x4(as + (a_row + 16 * i) * kBK + ca, a[buf][i]);
#pragma unroll
    for (int j = 0; j < T::NI; j += 2) {
      unsigned r[4];
      ldmatrix_x4(ws + (b_row + 8 * j) * kBK + cb, r);
      b[buf][j][0] = r[0];
      b[buf][j][1] = r[1];
      b[buf][j + 1][0] = r[2];
      b[buf][j + 1][1] = r[3];
    }
  };
  load(0, 0);
#pragma unroll
  for (int ks = 0; ks < KSTEPS; ++ks) {
    if (ks + 1 < KSTEPS) load((ks + 1) & 1, ks + 1);
#pragma unroll
    for (int i = 0; i < T::MI; ++i)
#pragma unroll
      for (int j = 0; j < T::NI; ++j) mma_bf16(acc[i][j], a[ks & 1][i], b[ks & 1][j]);
  }
}

// The block tile at (m0, n0) of C = A · Wᵀ; both kernels below run exactly this.
template <int BM, int BN, int WM, int WN, int STAGES>
__device__ __forceinline__ void mma_block_tile(const bf16* __restrict__ A, int M, int K, const bf16* __restrict__ W,
                                               int w_rows, int N, const float* __restrict__ bias,
                                               float* __restrict__ C, int ldc, bool pair_store, int m0, int n0) {
  using T = Tile<BM, BN, WM, WN, STAGES>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* smem = reinterpret_cast<bf16*>(smem_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = (warp / WN) * T::kWarpM, wn = (warp % WN) * T::kWarpN;

  float acc[T::MI][T::NI][4];
#pragma unroll
  for (int i = 0; i < T::MI; ++i)
#pragma unroll
    for (int j = 0; j < T::NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // Rows past M or w_rows and the second half of a 32-deep tail stage are zero-filled; the tail's
  // zero half is never multiplied (compute_stage<.., 2> below), so no step is added to any chain.
  auto load_stage = [&](int buf, int k0) {
    bf16* as = smem + buf * T::kStageElems;
    bf16* ws = as + BM * kBK;
    const int chunks = K - k0 < kBK ? (K - k0) / 8 : kChunks;
#pragma unroll
    for (int i = 0; i < BM * kChunks / T::kThreads; ++i) {
      const int idx = tid + T::kThreads * i, r = idx / kChunks, c = idx % kChunks, gm = m0 + r;
      const bool ok = gm < M && c < chunks;
      cp_async16(as + swizzle(r, c), ok ? A + static_cast<std::size_t>(gm) * K + k0 + c * 8 : A, ok);
    }
#pragma unroll
    for (int i = 0; i < BN * kChunks / T::kThreads; ++i) {
      const int idx = tid + T::kThreads * i, r = idx / kChunks, c = idx % kChunks, gn = n0 + r;
      const bool ok = gn < w_rows && c < chunks;
      cp_async16(ws + swizzle(r, c), ok ? W + static_cast<std::size_t>(gn) * K + k0 + c * 8 : W, ok);
    }
  };

  // Stage t lives in buffer t % STAGES. Every iteration commits one group (empty past the end), so
  // waiting until at most STAGES - 2 groups are pending means stage t has landed; the barrier after
  // it also tells every warp that buffer (t - 1) % STAGES, refilled next, is no longer being read.
  const int ktiles = (K + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) load_stage(s, s * kBK);
    cp_async_commit();
  }
  const int a_row = wm + lane % 16;
  const int b_row = wn + lane % 8 + (lane / 16) * 8;
  for (int t = 0; t < ktiles; ++t) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = t + STAGES - 1;
    if (next < ktiles) load_stage(next % STAGES, next * kBK);
    cp_async_commit();
    const bf16* as = smem + (t % STAGES) * T::kStageElems;
    const bf16* ws = as + BM * kBK;
    if (K - t * kBK >= kBK) compute_stage<T, kBK / 16>(as, ws, a_row, b_row, lane, acc);
    else compute_stage<T, kAlignK / 16>(as, ws, a_row, b_row, lane, acc);
  }
  cp_async_wait<0>();

  // Each quad of lanes owns 8 consecutive columns of a row: float2 stores fill whole 32-byte sectors.
  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int i = 0; i < T::MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int gm = m0 + wm + 16 * i + g + 8 * h;
      if (gm >= M) continue;
      float* crow = C + static_cast<std::size_t>(gm) * ldc;
#pragma unroll
      for (int j = 0; j < T::NI; ++j) {
        const int gn = n0 + wn + 8 * j + 2 * q;
        store_column_pair(crow, gn, N, acc[i][j][2 * h], acc[i][j][2 * h + 1], bias, pair_store);
      }
    }
}

// A: bf16 [M][K] (the pre-pass's scratch), W: bf16 [w_rows][K]. Blocks visit tiles in groups of 8
// block rows sweeping the columns, so the weights a wave reads are reused from L2 by 8 block rows.
template <int BM, int BN, int WM, int WN, int STAGES>
__global__ void __launch_bounds__(32 * WM * WN) gemm_bf16_mma_kernel(const bf16* __restrict__ A, int M, int K,
                                                                     const bf16* __restrict__ W, int w_rows, int N,
                                                                     const float* __restrict__ bias,
                                                                     float* __restrict__ C, int ldc, bool pair_store) {
  constexpr int kGroup = 8;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int id = static_cast<int>(blockIdx.x), per_group = kGroup * tiles_n;
  const int first_m = (id / per_group) * kGroup;
  const int group_rows = tiles_m - first_m < kGroup ? tiles_m - first_m : kGroup;
  const int m0 = (first_m + (id % per_group) % group_rows) * BM;
  const int n0 = ((id % per_group) / group_rows) * BN;
  mma_block_tile<BM, BN, WM, WN, STAGES>(A, M, K, W, w_rows, N, bias, C, ldc, pair_store, m0, n0);
}

// The MoE's experts: group z owns rows [offsets[z], offsets[z+1]) of A (bf16 scratch, row stride K) and
// C, and the weights at W + z·w_stride ([N][K]). grid (n tiles, m tiles of the largest group, groups);
// tiles past a group's rows return at once. A group's rows get the bits gemm() gives them alone.
template <int BM, int BN, int WM, int WN, int STAGES>
__global__ void __launch_bounds__(32 * WM * WN) gemm_grouped_mma_kernel(const bf16* __restrict__ A,
                                                                        const int32_t* __restrict__ offsets, int K,
                                                                        const bf16* __restrict__ W, int64_t w_stride,
                                                                        int N, float* __restrict__ C, int ldc,
                                                                        bool pair_store) {
  const int z = blockIdx.z, r0 = offsets[z], rows = offsets[z + 1] - r0, m0 = blockIdx.y * BM;
  if (m0 >= rows) return;
  mma_block_tile<BM, BN, WM, WN, STAGES>(A + static_cast<std::size_t>(r0) * K, rows, K, W + z * w_stride, N, N,
                                         nullptr, C + static_cast<std::size_t>(r0) * ldc, ldc, pair_store, m0,
                                         blockIdx.x * BN);
}

// fp32 [M][lda] → bf16 [M][K], 8 elements (two float4 in, one 16-byte store out) per thread.
__global__ void __launch_bounds__(256) round_to_bf16_kernel(const float* __restrict__ A, int M, int K, int lda,
                                                            bf16* __restrict__ out) {
  // A GEMM launched after this kernel with programmatic serialization (gemm_wgmma.cu) may start its
  // prologue now; it waits for this kernel's completion (griddepcontrol.wait) before reading memory.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int per_row = K / 8;
  const std::size_t total = static_cast<std::size_t>(M) * per_row;
  for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < total;
       e += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t r = e / per_row;
    const int c = static_cast<int>(e % per_row) * 8;
    const float4* src = reinterpret_cast<const float4*>(A + r * lda + c);
    const float4 x = src[0], y = src[1];
    const __nv_bfloat162 p[4] = {__floats2bfloat162_rn(x.x, x.y), __floats2bfloat162_rn(x.z, x.w),
                                 __floats2bfloat162_rn(y.x, y.y), __floats2bfloat162_rn(y.z, y.w)};
    *reinterpret_cast<uint4*>(out + r * K + c) = *reinterpret_cast<const uint4*>(p);
  }
}

// The bf16 copy of A lives in a grow-only device buffer per (device, stream) — per host thread too
// for the default and per-thread streams, whose handle may name a different stream in each thread.
// Passes on different streams never share a buffer; passes on one stream are ordered by it, and the
// lock, held while a pass enqueues its pre-pass and its GEMM, keeps two host threads that share a
// stream from interleaving them. A buffer that is outgrown stays allocated: freeing it would need a
// synchronisation, and a CUDA graph captured earlier may still hold its address. Growth is by at
// least half, so the outgrown buffers add up to less than twice the largest.
class ScratchPool {
 public:
  template <typename Enqueue>
  void with(cudaStream_t s, std::size_t elems, Enqueue&& enqueue) {
    int device = 0;
    cuda_check(cudaGetDevice(&device), "cudaGetDevice");
    const bool thread_stream = s == nullptr || s == cudaStreamPerThread;
    const std::thread::id thread = thread_stream ? std::this_thread::get_id() : std::thread::id();
    std::lock_guard<std::mutex> lock(mu_);
    Entry* entry = nullptr;
    for (Entry& e : entries_)
      if (e.device == device && e.stream == s && e.thread == thread) entry = &e;
    if (!entry) entry = &entries_.emplace_back(Entry{device, s, thread, nullptr, 0});
    if (entry->elems < elems) {
      const std::size_t grown = std::max(elems, entry->elems + entry->elems / 2);
      void* p = nullptr;
      outside_capture([&] { return cudaMalloc(&p, grown * sizeof(bf16)); }, "cudaMalloc (GEMM bf16 scratch)");
      entry->p = static_cast<bf16*>(p);  // the outgrown buffer stays allocated (see above)
      entry->elems = grown;
    }
    enqueue(entry->p);
  }

 private:
  struct Entry {
    int device;
    cudaStream_t stream;
    std::thread::id thread;
    bf16* p;
    std::size_t elems;
  };
  std::mutex mu_;
  std::vector<Entry> entries_;
};

ScratchPool& scratch_pool() {
  static ScratchPool* pool = new ScratchPool;  // never destroyed: no cudaFree after the context is gone
  return *pool;
}

struct Launch {
  const bf16* A;
  int M, K;
  const bf16* W;
  int w_rows, N;
  const float* bias;
  float* C;
  int ldc;
  bool pair_store;
  cudaStream_t s;
};

template <int BM, int BN, int WM, int WN, int STAGES>
void launch(const Launch& l) {
  using T = Tile<BM, BN, WM, WN, STAGES>;
  auto* kernel = gemm_bf16_mma_kernel<BM, BN, WM, WN, STAGES>;
  static std::atomic<std::uint64_t> opted{0};
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), T::kSmemBytes, opted);
  const long tiles = long((l.M + BM - 1) / BM) * long((l.N + BN - 1) / BN);
  kernel<<<static_cast<unsigned>(tiles), T::kThreads, T::kSmemBytes, l.s>>>(l.A, l.M, l.K, l.W, l.w_rows, l.N, l.bias,
                                                                          l.C, l.ldc, l.pair_store);
}

struct GroupedLaunch {
  const bf16* A;
  const int32_t* offsets;
  int groups, max_rows, K;
  const bf16* W;
  int64_t w_stride;
  int N;
  float* C;
  int ldc;
  bool pair_store;
  cudaStream_t s;
};

template <int BM, int BN, int WM, int WN, int STAGES>
void launch_grouped(const GroupedLaunch& l) {
  using T = Tile<BM, BN, WM, WN, STAGES>;
  auto* kernel = gemm_grouped_mma_kernel<BM, BN, WM, WN, STAGES>;
  static std::atomic<std::uint64_t> opted{0};
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), T::kSmemBytes, opted);
  const dim3 grid(static_cast<unsigned>((l.N + BN - 1) / BN), static_cast<unsigned>((l.max_rows + BM - 1) / BM),
                  static_cast<unsigned>(l.groups));
  kernel<<<grid, T::kThreads, T::kSmemBytes, l.s>>>(l.A, l.offsets, l.K, l.W, l.w_stride, l.N, l.C, l.ldc,
                                                    l.pair_store);
}

// The tiles, largest first. blocks_per_sm is what shared memory and registers allow; rate is the
// relative per-SM throughput of a full wave (bigger warp tiles reuse each fragment more).
struct TileChoice {
  int bm, bn, blocks_per_sm;
  double rate;
  void (*run)(const Launch&);
};
const TileChoice kTiles[] = {
    {128, 256, 1, 1.00, launch<128, 256, 2, 4, 4>},  // 64×64 per warp, 192 KiB of stages
    {128, 128, 2, 0.95, launch<128, 128, 2, 2, 3>},  // 64×64 per warp, 96 KiB
    {64, 128, 3, 0.80, launch<64, 128, 2, 2, 3>},    // 32×64 per warp, 72 KiB
    {32, 64, 4, 0.55, launch<32, 64, 2, 2, 4>},      // 16×32 per warp, 48 KiB
};
constexpr int kTileCount = sizeof(kTiles) / sizeof(kTiles[0]);
// The same tiles for the grouped kernel, in kTiles' order.
void (*const kGroupedTiles[])(const GroupedLaunch&) = {launch_grouped<128, 256, 2, 4, 4>, launch_grouped<128, 128, 2, 2, 3>,
                                                       launch_grouped<64, 128, 2, 2, 3>, launch_grouped<32, 64, 2, 2, 4>};
static_assert(sizeof(kGroupedTiles) / sizeof(kGroupedTiles[0]) == kTileCount, "one grouped launch per tile");

// Estimated time of the pass with each tile: whole waves (a partial wave costs a full one) times
// the work an SM does per wave. A function of M, N and the device's SM count only.
int choose_tile(int M, int N) {
  const int sms = sm_count();
  int best = 0;
  double best_cost = 0;
  for (int i = 0; i < kTileCount; ++i) {
    const TileChoice& t = kTiles[i];
    const long tiles = long((M + t.bm - 1) / t.bm) * long((N + t.bn - 1) / t.bn);
    const long slots = long(sms) * t.blocks_per_sm;
    const double cost = double((tiles + slots - 1) / slots) * t.blocks_per_sm * t.bm * t.bn / t.rate;
    if (i == 0 || cost < best_cost) {
      best = i;
      best_cost = cost;
    }
  }
  return best;
}

void run_tile(int tile, const float* A, int M, int K, int lda, const void* W, int w_rows, int N, const float* bias,
              float* C, int ldc, cudaStream_t s) {
  if (M <= 0 || N <= 0) return;
  const bool pair_store = ldc % 2 == 0 && reinterpret_cast<std::uintptr_t>(C) % 8 == 0;
  with_bf16_rows(A, M, K, lda, s, [&](const void* a16) {
    kTiles[tile].run(
        Launch{static_cast<const bf16*>(a16), M, K, static_cast<const bf16*>(W), w_rows, N, bias, C, ldc, pair_store, s});
  });
  check_launch("gemm_bf16_mma");
}

}  // namespace

namespace {

// The copy with_rounded_rows lends to the GEMM being enqueued on this thread (null: none).
struct RoundedRows {
  const float* A;
  int M, K;
  const void* a16;
};
thread_local const RoundedRows* t_rounded = nullptr;

}  // namespace

void with_rounded_rows(const float* A, int M, int K, const void* a16, const std::function<void()>& enqueue) {
  struct Restore {
    const RoundedRows* prev;
    ~Restore() { t_rounded = prev; }
  } restore{t_rounded};
  const RoundedRows r{A, M, K, a16};
  t_rounded = &r;
  enqueue();
}

void with_bf16_rows(const float* A, int M, int K, int lda, cudaStream_t s,
                    const std::function<void(const void* a16)>& enqueue) {
  if (t_rounded && t_rounded->A == A && t_rounded->M == M && t_rounded->K == K) {
    enqueue(t_rounded->a16);  // the caller's buffer: no scratch, so no pool lock either
    return;
  }
  const std::size_t chunks = std::size_t(M) * (K / 8);
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((chunks + 255) / 256, 64 * 1024));
  scratch_pool().with(s, std::size_t(M) * K, [&](bf16* a16) {
    round_to_bf16_kernel<<<blocks, 256, 0, s>>>(A, M, K, lda, a16);
    enqueue(a16);
  });
}

bool gemm_mma_fits(const float* A, int K, int lda, const void* W) {
  return K > 0 && K % kAlignK == 0 && lda % 4 == 0 && reinterpret_cast<std::uintptr_t>(A) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(W) % 16 == 0;
}

void gemm_bf16_mma(const float* A, int M, int K, int lda, const void* W, int w_rows, int N, const float* bias, float* C,
                   int ldc, cudaStream_t s) {
  if (M <= 0 || N <= 0) return;
  run_tile(choose_tile(M, N), A, M, K, lda, W, w_rows, N, bias, C, ldc, s);
}

int gemm_mma_tile_count() { return kTileCount; }

void gemm_bf16_mma_tile(int tile, const float* A, int M, int K, int lda, const void* W, int w_rows, int N,
                        const float* bias, float* C, int ldc, cudaStream_t s) {
  run_tile(tile, A, M, K, lda, W, w_rows, N, bias, C, ldc, s);
}

void gemm_grouped_bf16_mma(const float* A, int lda, const int32_t* offsets, int groups, int max_rows, int total_rows,
                           int K, const void* W, int64_t w_stride, int N, float* C, int ldc, cudaStream_t s) {
  if (groups <= 0 || max_rows <= 0 || total_rows <= 0 || N <= 0) return;
  const bool pair_store = ldc % 2 == 0 && reinterpret_cast<std::uintptr_t>(C) % 8 == 0;
  // The tile is chosen from the mean group (a function of the shapes alone, as gemm()'s is); every
  // tile gives the same bits.
  const int tile = choose_tile((total_rows + groups - 1) / groups, N);
  with_bf16_rows(A, total_rows, K, lda, s, [&](const void* a16) {
    kGroupedTiles[tile](GroupedLaunch{static_cast<const bf16*>(a16), offsets, groups, max_rows, K, static_cast<const bf16*>(W), w_stride, N, C,
                                      ldc, pair_store, s});
  });
  check_launch("gemm_grouped_bf16_mma");
}

}  // namespace parity::cuda
