#pragma once
// A decode step's view of one head's state: a tile of TP rows of p (all N columns), staged on chip
// with asynchronous copies, so that a block keeps the whole tile's bytes in flight at once (the
// state is the step's traffic: a kernel that waits on 4 bytes per thread runs at ~0.5 TB/s).
// Shared by the plain SSU (ssd_ssu.cu) and the exact one-row decode (ssd_decode.cu).
#include <cstdint>

#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {

constexpr int kStepThreads = 256;
constexpr int kMaxTileFloats = 8192;  // TP·N; at most 8 four-float chunks per thread
constexpr int kMaxChunks = kMaxTileFloats / 4 / kStepThreads;

// cp.async: global → shared without registers; .cg (L2 only) for 16 bytes, .ca for 4.
__device__ inline void cp_async16(void* dst, const void* src) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ inline void cp_async4(void* dst, const void* src) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `pending` of the most recently committed groups are still in flight.
template <int pending>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}

__device__ inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Copies `rows` rows of `width` floats, row i from row_ptr(i), into dst (row stride dst_ld floats),
// asynchronously, all threads of the block. A row goes in 16-byte pieces where both ends allow.
template <class RowPtr>
__device__ inline void stage_rows(float* dst, int dst_ld, int rows, int width, RowPtr row_ptr) {
  const bool vec_dst = width % 4 == 0 && dst_ld % 4 == 0 && aligned16(dst);
  if (vec_dst) {
    const int q = width / 4;
    for (int e = threadIdx.x; e < rows * q; e += kStepThreads) {
      const int i = e / q, c = (e % q) * 4;
      const float* s = row_ptr(i) + c;
      float* d = dst + static_cast<std::size_t>(i) * dst_ld + c;
      if (aligned16(s)) {
        cp_async16(d, s);
      } else {
        for (int k = 0; k < 4; ++k) cp_async4(d + k, s + k);
      }
    }
  } else {
    for (int e = threadIdx.x; e < rows * width; e += kStepThreads) {
      const int i = e / width, c = e % width;
      cp_async4(dst + static_cast<std::size_t>(i) * dst_ld + c, row_ptr(i) + c);
    }
  }
}

// The tile's geometry: rows p0 .. p0+tp-1 of head h of the slot; Np = the padded row in shared
// memory (Np/4 odd: eight consecutive rows' 16-byte reads at one column fall in distinct banks).
struct Tile {
  int p0, tp, N, Np;
  std::size_t base;  // element offset of (slot, h, p0, 0) in the state
};
__host__ __device__ inline int padded_row(int N) { return (N + 3) / 4 % 2 == 0 ? (N + 3) / 4 * 4 + 4 : (N + 3) / 4 * 4; }
__device__ inline Tile tile_of(const SsdShape& sh, int slot, int h, int TP) {
  Tile t;
  t.p0 = blockIdx.z * TP;
  t.tp = sh.P - t.p0 < TP ? sh.P - t.p0 : TP;
  t.N = sh.N;
  t.Np = padded_row(sh.N);
  t.base = ((static_cast<std::size_t>(slot) * sh.H + h) * sh.P + t.p0) * sh.N;
  return t;
}

// Starts the tile's copy: fp32 straight into S [tp][Np]; bf16 into raw [tp·N] (widen_tile then
// turns it into S). The caller commits and waits.
__device__ inline void stage_state(const SsdState& st, const Tile& t, float* S, uint16_t* raw) {
  if (st.state_f32) {
    const float* g = st.state_f32 + t.base;
    stage_rows(S, t.Np, t.tp, t.N, [&](int i) { return g + static_cast<std::size_t>(i) * t.N; });
    return;
  }
  // bf16: the tile is one contiguous run of tp·N values; as floats, tp·N/2 of them.
  const uint16_t* g = st.state_bf16 + t.base;
  const int elems = t.tp * t.N;
  if (elems % 8 == 0 && aligned16(g)) {
    for (int e = threadIdx.x; e < elems / 8; e += kStepThreads) cp_async16(raw + 8 * e, g + 8 * e);
  } else {
    for (int e = threadIdx.x; e < elems; e += kStepThreads) raw[e] = g[e];  // odd shapes: plain copies
  }
}
__device__ inline void widen_tile(const Tile& t, const uint16_t* raw, float* S) {
  for (int e = threadIdx.x; e < t.tp * t.N; e += kStepThreads) S[(e / t.N) * t.Np + e % t.N] = widen_bf16(raw[e]);
}

// The tile's elements as chunks of 4 consecutive columns of one row (N % 4 == 0): chunk c covers
// row c / (N/4), columns 4·(c % (N/4)) ..; thread t owns chunks t, t + 256, ... (coalesced).
__device__ inline int tile_chunks(const Tile& t) { return t.tp * t.N / 4; }

// Writes 4 values (already bf16-exact for a bf16 state) at element e of the tile.
__device__ inline void store4(const SsdState& st, const Tile& t, int e, const float v[4]) {
  if (st.state_f32) {
    *reinterpret_cast<float4*>(st.state_f32 + t.base + e) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    uint2 u;
    u.x = (__float_as_uint(v[0]) >> 16) | (__float_as_uint(v[1]) & 0xffff0000u);
    u.y = (__float_as_uint(v[2]) >> 16) | (__float_as_uint(v[3]) & 0xffff0000u);
    *reinterpret_cast<uint2*>(st.state_bf16 + t.base + e) = u;
  }
}

// dot(C, S[p]) for every row p < tp of the tile (rows of stride Np in shared memory), four threads
// per row: thread 4p + q forms quarter q, lane 4p combines the four and calls out(p, dot). Every
// thread of the block must call this (the lanes exchange their sums).
template <class Out>
__device__ inline void tile_dots(const float* C, const float* S, int Np, int N, int tp, Out out) {
  for (int w0 = 0; w0 < 4 * tp; w0 += kStepThreads) {
    const int w = w0 + static_cast<int>(threadIdx.x), p = w >> 2, q = w & 3;
    const float a = p < tp ? quarter_sum(C, S + static_cast<std::size_t>(p) * Np, N, q) : 0.0f;
    const float a1 = __shfl_down_sync(0xffffffffu, a, 1);
    const float a2 = __shfl_down_sync(0xffffffffu, a, 2);
    const float a3 = __shfl_down_sync(0xffffffffu, a, 3);
    if (q == 0 && p < tp) out(p, combine_quarters(a, a1, a2, a3));
  }
}

// Shared-memory carve-up: consecutive float arrays, each starting on 16 bytes.
struct Carve {
  std::size_t at = 0;
  __host__ __device__ std::size_t take(std::size_t floats) {
    const std::size_t o = at;
    at += (floats + 3) / 4 * 4;
    return o;
  }
};

// Launchers (tp: ssd_step_tile's rows of p per block).
void launch_ssu(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
                const float* A, const float* D, const SsdState& st, int tp, float* y, cudaStream_t s);
void launch_decode(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                   const float* dt, const float* A, const float* D, const SsdState& st, int tp, float* y,
                   cudaStream_t s);

}  // namespace parity::cuda::ssd
