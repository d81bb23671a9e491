#pragma once
// The few-rows GEMM's device code (gemm_skinny.cu has the why, the bits, the variants and the
// launches): one producer warp streams a block's weights and A's rows, K slice by K slice, into a
// ring of shared-memory stages; consumer warps take their 8-column tiles of every stage.
//
// A block computes its columns in as few passes as the variant's tiles allow (one for the models'
// shapes), every consumer warp holding up to kTPW tiles at once: a warp's chain of K/16 dependent
// tensor-core steps is what bounds a pass's time, so a block runs one chain per warp, not one per
// pass, and the tiles of a warp interleave their steps.
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels_cuda/ptx.cuh"

namespace parity::cuda::skinny {

using u64 = std::uint64_t;

// How the producer fills a stage. Tensor: the TMA unit, one instruction per 64-deep box of up to
// 256 rows (a 128-byte swizzled layout); Bulk: the TMA unit, one 1D copy per row's slice; CpAsync:
// 16-byte cp.async from the producer warp's lanes. Bulk and CpAsync use padded rows.
enum class Load { Tensor, Bulk, CpAsync };

// Benchmark probes that time one side alone (their outputs are not the GEMM's). NoCompute: the
// pipeline streams, the consumers only wait for and release each stage. NoLoad: nothing is copied
// or waited for, the consumers compute on whatever the ring holds.
enum class Probe { None = 0, NoCompute = 1, NoLoad = 2 };

constexpr int kMaxStages = 8;

// kCW consumer warps of up to kTPW 8-column tiles each; kBPS blocks share an SM (each with
// kRing bytes of stages); kMT m16 tiles of A (up to 16·kMT rows per pass); kMinS: the shallowest
// slice a launch may choose (deeper slices read each W row in longer runs, 2·kS bytes, at the cost
// of fewer rows, so more passes, per block).
template <Load L, int CW, int TPW, int BPS, int MT = 1, int MinS = 64>
struct Variant {
  static constexpr Load kLoad = L;
  static constexpr int kCW = CW, kTPW = TPW, kBPS = BPS, kMT = MT, kMinS = MinS;
  static_assert(MinS % 64 == 0 && MinS <= 1024, "slices are whole 64-deep boxes");
  static constexpr int kThreads = 32 * (CW + 1), kMaxRows = 16 * MT, kMaxTiles = CW * TPW;
  static constexpr bool kSwizzled = L == Load::Tensor;
  // 227 KiB of shared memory per SM, less 1 KiB the system keeps per block and 1 KiB to align.
  static constexpr int kRing = BPS == 1 ? 200 * 1024 : BPS == 2 ? 104 * 1024 : 52 * 1024;
};

// One launch's ring, the same for every block (gemm_skinny.cu's geometry()).
struct Geo {
  int tpp;         // 8-column tiles per pass, at most
  int rows_alloc;  // W rows a stage holds (>= 8·tpp); swizzled: nrb boxes of box_rows
  int box_rows, nrb;
  int kS;          // K per slice: a multiple of 64
  int w_stride;    // bytes from one W row to the next within a stage (128 swizzled: within a 64-deep box)
  int a_stride;    // bytes from one row of A to the next
  int w_bytes;     // a stage's W part; A's rows follow
  int stage_bytes, stages;
};

// One block's work: rows [0, M) of A against W's rows [lo, hi) (matrix z of the tensor map), into
// C's columns [lo, hi).
struct Work {
  const float* A;
  int M, lda;
  const __nv_bfloat16* W;
  int K, lo, hi, z;
  const float* bias;
  float* C;
  int ldc;
};

struct Ring {
  unsigned char* smem;  // 1024-byte aligned
  u64 *full, *empty;
};

// The producer warp: for each pass and K slice in order, waits until the stage is free, then copies
// the pass's W rows and A's rows of the slice into it.
template <typename V, Probe P>
__device__ void produce(const Work& w, const Geo& g, const Ring& r, const CUtensorMap* map, int lane) {
  if constexpr (P == Probe::NoLoad) return;
  const int tiles = (w.hi - w.lo + 7) / 8, passes = (tiles + g.tpp - 1) / g.tpp;
  const int slices = (w.K + g.kS - 1) / g.kS;
  int s = 0, it = 0;
  unsigned parity = 0;  // of the round the stage is in
  for (int p = 0; p < passes; ++p) {
    const int n0 = w.lo + p * 8 * g.tpp, rows = min(w.hi - n0, 8 * g.tpp);
    for (int sl = 0; sl < slices; ++sl, ++it) {
      if (it >= g.stages) ptx::mbar_wait(&r.empty[s], parity ^ 1u);  // the consumers' release of the last round
      const int k0 = sl * g.kS, len = min(g.kS, w.K - k0);  // len: a multiple of 32
      unsigned char* st = r.smem + s * g.stage_bytes;
      unsigned char* as = st + g.w_bytes;
      u64* bar = &r.full[s];
      if constexpr (V::kLoad == Load::CpAsync) {
        // 16-byte chunks, 512 bytes per warp instruction; each lane's arrival (the barrier counts
        // 32) comes when its own copies have landed.
        const int wc = len / 8;
        for (int c = lane; c < rows * wc; c += 32) {
          const int i = c / wc, j = c % wc;
          ptx::cp_async16(st + i * g.w_stride + j * 16, w.W + static_cast<std::size_t>(n0 + i) * w.K + k0 + j * 8);
        }
        const int ac = len / 4;
        for (int c = lane; c < w.M * ac; c += 32) {
          const int m = c / ac, j = c % ac;
          ptx::cp_async16(as + m * g.a_stride + j * 16, w.A + static_cast<std::size_t>(m) * w.lda + k0 + j * 4);
        }
        ptx::cp_async_arrive(bar);
      } else {
        if (lane == 0) {
          // Whole boxes: rows past the block (the neighbour's, or zeros past the matrix) come along
          // and are never stored; K past the matrix lands as zeros and is never multiplied. A box
          // that would start past the block's rows is not copied (it holds nothing the block
          // stores), so no box lies wholly outside the matrix.
          const int nrb = min(g.nrb, (rows + g.box_rows - 1) / g.box_rows);
          const int w_tx = V::kLoad == Load::Tensor ? ((len + 63) / 64) * nrb * g.box_rows * 128 : rows * len * 2;
          ptx::mbar_arrive_expect_tx(bar, w_tx + w.M * len * 4);
          if constexpr (V::kLoad == Load::Tensor) {
            for (int kb = 0; kb < (len + 63) / 64; ++kb)
              for (int rb = 0; rb < nrb; ++rb)
                ptx::tma_load_3d(ptx::smem_addr(st + kb * g.rows_alloc * 128 + rb * g.box_rows * 128), map, k0 + 64 * kb,
                                 n0 + rb * g.box_rows, w.z, bar);
          }
        }
        __syncwarp();
        if constexpr (V::kLoad == Load::Bulk)
          for (int i = lane; i < rows; i += 32)
            ptx::bulk_copy(st + i * g.w_stride, w.W + static_cast<std::size_t>(n0 + i) * w.K + k0, len * 2, bar);
        for (int m = lane; m < w.M; m += 32)
          ptx::bulk_copy(as + m * g.a_stride, w.A + static_cast<std::size_t>(m) * w.lda + k0, len * 4, bar);
      }
      if (++s == g.stages) {
        s = 0;
        parity ^= 1u;
      }
    }
  }
  if constexpr (V::kLoad == Load::CpAsync) ptx::cp_async_wait<0>();
}

// The operands of one 32-deep double step: A's m16k16 fragments of each m16 tile for both 16-deep
// halves, and per 8-column tile b[0..1] (first half) and b[2..3] (second half).
template <int TPW, int MT>
struct Frag {
  unsigned a[MT][2][4];
  unsigned b[TPW][4];
};

// Two adjacent fp32 of A at a shared address, rounded to bf16 (nearest even, as the tiled kernels
// round A) and packed as an mma operand register, the lower column in the lower half.
__device__ __forceinline__ unsigned a_pair(unsigned addr) {
  const float2 f = ptx::ld_shared_f2(addr);
  const __nv_bfloat162 h = __floats2bfloat162_rn(f.x, f.y);
  return *reinterpret_cast<const unsigned*>(&h);
}

// A consumer warp: tiles warp, warp + kCW, … of each pass. Every warp waits for and releases every
// stage, with or without tiles (the empty barriers count all kCW warps' lanes, and a warp that
// released without waiting could release a stage twice in one round).
template <typename V, Probe P>
__device__ void consume(const Work& w, const Geo& g, const Ring& r, int warp, int lane) {
  constexpr int kTPW = V::kTPW, kMT = V::kMT, kCW = V::kCW;
  constexpr bool kCompute = P != Probe::NoCompute, kWait = P != Probe::NoLoad;
  const int gr = lane / 4, q = lane % 4, M = w.M;
  const int tiles_b = (w.hi - w.lo + 7) / 8, passes = (tiles_b + g.tpp - 1) / g.tpp;
  const int dsteps = w.K / 32, ds_per_slice = g.kS / 32;
  const unsigned ring = ptx::smem_addr(r.smem);
  // This lane's ldmatrix address within a stage, less the row: the 16-byte chunk (lane / 8) of the
  // double step. Swizzled: per 64-deep box, chunk c of row r sits at c ^ (r % 8), and the lane's
  // row is 8t + lane % 8; even double steps take chunks 0..3 of the box, odd ones 4..7.
  unsigned koff[2];
  if constexpr (V::kSwizzled) {
    koff[0] = ((0 + lane / 8) ^ (lane % 8)) * 16;
    koff[1] = ((4 + lane / 8) ^ (lane % 8)) * 16;
  } else {
    koff[0] = koff[1] = (lane / 8) * 16;
  }
  const unsigned box_bytes = g.rows_alloc * 128;  // swizzled: one 64-deep box of every row
  // A: lane (gr, q) reads rows gr and gr + 8 at columns 2q (+8) of each 16-deep half.
  const unsigned a_lane = g.w_bytes + gr * g.a_stride + q * 8;

  int s = 0;
  unsigned parity = 0;
  auto acquire = [&] {
    if constexpr (kWait) ptx::mbar_wait(&r.full[s], parity);
  };
  // Every lane releases its own reads: the refill (TMA or bulk copy) is an async-proxy write over
  // bytes this lane read through the generic proxy, so the lane's proxy fence, then its own release
  // arrival, order its reads before it (PTX's rule for a generic access followed by an async one).
  // A lane-0 arrival after __syncwarp orders them in the memory model too, but carries no proxy
  // fence from lanes 1-31, and compute-sanitizer's racecheck does not carry their reads through the
  // __syncwarp: it reported every A byte they read as racing with the refill, lane 0's never.
  auto release = [&] {
    if constexpr (kWait) {
      ptx::fence_proxy_async();
      ptx::mbar_arrive(&r.empty[s]);
    }
    if (++s == g.stages) {
      s = 0;
      parity ^= 1u;
    }
  };

  // c0, c1: row gr of the m16 tile, columns 2q, 2q+1 of the 8-column tile; c2, c3: row gr + 8.
  auto store = [&](const float (&acc)[kTPW][kMT][4], const bool (&has)[kTPW], int n0, int rows) {
    if (!has[0]) return;
#pragma unroll
    for (int j = 0; j < kTPW; ++j) {
      if (!has[j]) continue;
      const int t = warp + kCW * j;
#pragma unroll
      for (int i = 0; i < kMT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = 16 * i + gr + 8 * h;
          if (m >= M) continue;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int c = 8 * t + 2 * q + e;
            if (c >= rows) continue;
            const int n = n0 + c;
            float v = acc[j][i][2 * h + e];
            if (w.bias) v = v + w.bias[n];
            w.C[static_cast<std::size_t>(m) * w.ldc + n] = v;
          }
        }
    }
  };

  for (int p = 0; p < passes; ++p) {
    const int n0 = w.lo + p * 8 * g.tpp, rows = min(w.hi - n0, 8 * g.tpp), tiles = (rows + 7) / 8;
    bool has[kTPW];
    unsigned brow[kTPW];  // this lane's W row within a stage, in bytes
#pragma unroll
    for (int j = 0; j < kTPW; ++j) {
      const int t = warp + kCW * j;
      has[j] = t < tiles;
      brow[j] = static_cast<unsigned>(8 * t + lane % 8) * g.w_stride;
    }
    const bool active = kCompute && has[0];
    float acc[kTPW][kMT][4];
#pragma unroll
    for (int j = 0; j < kTPW; ++j)
#pragma unroll
      for (int i = 0; i < kMT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][i][e] = 0.0f;

    // The fragments of double step ds of the slice in the stage at shared address st.
    auto load = [&](Frag<kTPW, kMT>& f, unsigned st, int ds) {
#pragma unroll
      for (int i = 0; i < kMT; ++i) {
        if (16 * i >= M) break;  // uniform over the warp; the m16 tiles past M are never multiplied
        const int m = 16 * i + gr;
        const unsigned a0 = st + a_lane + (16 * i) * g.a_stride + ds * 128;  // column 32·ds + 2q, 4 bytes each
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const unsigned a = a0 + h * 64;
          // Rows past M read nothing (their region is not allocated) and enter as zeros.
          f.a[i][h][0] = m < M ? a_pair(a) : 0u;
          f.a[i][h][1] = m + 8 < M ? a_pair(a + 8 * g.a_stride) : 0u;
          f.a[i][h][2] = m < M ? a_pair(a + 32) : 0u;
          f.a[i][h][3] = m + 8 < M ? a_pair(a + 8 * g.a_stride + 32) : 0u;
        }
      }
      const unsigned kpart = V::kSwizzled ? st + (ds / 2) * box_bytes + ((ds & 1) ? koff[1] : koff[0])
                                          : st + ds * 64 + koff[0];
#pragma unroll
      for (int j = 0; j < kTPW; ++j)
        if (has[j]) ptx::ldmatrix_x4(kpart + brow[j], f.b[j]);  // uniform over the warp
    };

    // The pass's double steps in K order; the operands of step d + 1 are read while the tensor
    // cores work on step d, across stage boundaries too.
    Frag<kTPW, kMT> cur, nxt;
    acquire();
    int ds = 0;  // double step within the slice
    if (active) load(cur, ring + s * g.stage_bytes, 0);
    for (int d = 0; d < dsteps; ++d) {
      const bool more = d + 1 < dsteps;
      if (more) {
        if (++ds == ds_per_slice) {  // step d + 1 opens the next slice
          release();
          acquire();
          ds = 0;
        }
        if (active) load(nxt, ring + s * g.stage_bytes, ds);
      } else {
        release();
      }
      if (active) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int i = 0; i < kMT; ++i) {
            if (16 * i >= M) break;
#pragma unroll
            for (int j = 0; j < kTPW; ++j) {
              if (!has[j]) continue;
              const unsigned b[2] = {cur.b[j][2 * h], cur.b[j][2 * h + 1]};
              ptx::mma_bf16(acc[j][i], cur.a[i][h], b);
            }
          }
        if (more) cur = nxt;
      }
    }
    if constexpr (kCompute) store(acc, has, n0, rows);
  }
}

template <typename V, Probe P>
__device__ __forceinline__ void skinny_block(const Work& w, const Geo& g, const CUtensorMap* map,
                                             unsigned char* smem_raw, u64* bars) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  Ring r;
  // 1024-byte aligned (the 128-byte swizzle repeats every 8 rows of 128 bytes from such an address).
  r.smem = smem_raw + ((1024u - (ptx::smem_addr(smem_raw) & 1023u)) & 1023u);
  r.full = bars;
  r.empty = bars + kMaxStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < g.stages; ++s) {
      // The producer's expect_tx arrival, or its 32 lanes' cp.async arrivals.
      ptx::mbar_init(&r.full[s], V::kLoad == Load::CpAsync ? 32 : 1);
      ptx::mbar_init(&r.empty[s], 32 * V::kCW);  // every consumer lane's arrival (consume's release)
    }
    ptx::mbar_init_fence();
  }
  __syncthreads();
  if (warp == V::kCW) produce<V, P>(w, g, r, map, lane);
  else consume<V, P>(w, g, r, warp, lane);
}

// Block b of G computes columns [N·b/G, N·(b+1)/G).
template <typename V, Probe P>
__global__ void __launch_bounds__(V::kThreads, V::kBPS)
    skinny_kernel(const __grid_constant__ CUtensorMap map, const float* A, int M, int K, int lda,
                  const __nv_bfloat16* W, int N, const float* bias, float* C, int ldc, Geo g) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 bars[2 * kMaxStages];
  const long b = blockIdx.x, G = gridDim.x;
  const int lo = static_cast<int>(N * b / G), hi = static_cast<int>(N * (b + 1) / G);
  if (hi <= lo) return;  // the whole block
  skinny_block<V, P>(Work{A, M, lda, W, K, lo, hi, 0, bias, C, ldc}, g, &map, smem_raw, bars);
}

// Grouped: block (x, z, y) computes group z's rows [16y, 16y + 16) against columns
// [cols·x, cols·x + cols) of the group's weights, exactly as the plain kernel computes those rows alone.
template <typename V>
__global__ void __launch_bounds__(V::kThreads, V::kBPS)
    skinny_grouped_kernel(const __grid_constant__ CUtensorMap map, const float* A, int lda, const int32_t* offsets,
                          int K, const __nv_bfloat16* W, int64_t w_stride, int N, float* C, int ldc, int cols, Geo g) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 bars[2 * kMaxStages];
  const int z = blockIdx.y, r0 = offsets[z] + static_cast<int>(blockIdx.z) * 16;
  const int rows = offsets[z + 1] - r0;
  if (rows <= 0) return;  // the whole block: its group has no rows here
  const int lo = static_cast<int>(blockIdx.x) * cols, hi = min(N, lo + cols);
  skinny_block<V, Probe::None>(Work{A + static_cast<std::size_t>(r0) * lda, min(rows, 16), lda, W + z * w_stride, K, lo,
                                    hi, z, nullptr, C + static_cast<std::size_t>(r0) * ldc, ldc},
                               g, &map, smem_raw, bars);
}

}  // namespace parity::cuda::skinny
