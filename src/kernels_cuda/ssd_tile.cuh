#pragma once
// A decode step's view of one head's state: a tile of TP rows of p (all N columns), staged on chip
// with asynchronous copies, so that a block keeps the whole tile's bytes in flight at once (the
// state is the step's traffic: a kernel that waits on 4 bytes per thread runs at ~0.5 TB/s).
// Shared by the plain SSU (ssd_ssu.cu) and the exact one-row decode (ssd_decode.cu).
//
// Blocks are small (128 threads, 16 KB of fp32 state by default) so that many of them sit on an
// SM at once: the step is a stream over the state, and what keeps it near the copy rate is how
// many bytes are requested and not yet arrived, SM by SM, at every moment. A block's own serial
// work (its sequence's metadata, the exact cell's cum and coefficients, the dots) then overlaps
// other blocks' copies. Index arithmetic avoids divisions by run-time values in the loops: a
// thread walks its pieces of a [rows][q] grid with a carried (row, piece) pair (Walk).
#include <cstdint>

#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {

constexpr int kStepThreads = 128;
constexpr int kMaxTileFloats = 8192;      // TP·N of the largest tile (a forced one: 32 KB fp32)
constexpr int kDefaultTileFloats = 4096;  // the default tile's TP·N (16 KB fp32 per block)

// cp.async: global → shared without registers; .cg (L2 only) for 16 bytes, .ca for 4 and 8.
__device__ inline void cp_async16(void* dst, const void* src) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ inline void cp_async8(void* dst, const void* src) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ inline void cp_async4(void* dst, const void* src) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `pending` of the most recently committed groups are still in flight (groups
// complete in commit order: the oldest is waited for first).
template <int pending>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}

__device__ inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
__device__ inline bool aligned8(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7u) == 0; }

// Thread threadIdx.x's pieces of a grid of q pieces per row, in the order e = tid, tid + 128, ...
// (piece e is row e / q, piece e % q): the row and piece carried from one to the next.
struct Walk {
  int r, c, q, dr, dc;
  __device__ explicit Walk(int pieces_per_row) : q(pieces_per_row) {
    const int t = static_cast<int>(threadIdx.x);
    r = t / q;
    c = t - r * q;
    dr = kStepThreads / q;
    dc = kStepThreads - dr * q;
  }
  __device__ void next() {
    r += dr;
    c += dc;
    if (c >= q) {
      c -= q;
      ++r;
    }
  }
};

// Copies `rows` rows of `width` floats, row i from row_ptr(i), into dst (row stride dst_ld floats),
// asynchronously, all threads of the block. A row goes in 16-byte pieces where both ends allow.
template <class RowPtr>
__device__ inline void stage_rows(float* dst, int dst_ld, int rows, int width, RowPtr row_ptr) {
  if (width % 4 == 0 && dst_ld % 4 == 0 && aligned16(dst)) {
    for (Walk w(width / 4); w.r < rows; w.next()) {
      const float* s = row_ptr(w.r) + 4 * w.c;
      float* d = dst + static_cast<std::size_t>(w.r) * dst_ld + 4 * w.c;
      if (aligned16(s)) {
        cp_async16(d, s);
      } else {
        for (int k = 0; k < 4; ++k) cp_async4(d + k, s + k);
      }
    }
  } else {
    for (Walk w(width); w.r < rows; w.next())
      cp_async4(dst + static_cast<std::size_t>(w.r) * dst_ld + w.c, row_ptr(w.r) + w.c);
  }
}
// One row of `width` floats.
__device__ inline void stage_vec(float* dst, const float* src, int width) {
  stage_rows(dst, width, 1, width, [&](int) { return src; });
}

// The tile's geometry: rows p0 .. p0+tp-1 of head h of the slot. On chip a fp32 row has Np floats,
// a bf16 row Nb halves: padded so that a row is a whole number of 16-byte units, an odd number
// (the dots' reads of eight consecutive rows at one column then fall in distinct banks).
struct Tile {
  int p0, tp, N, Np, Nb;
  std::size_t base;  // element offset of (slot, h, p0, 0) in the state
};
__host__ __device__ inline int padded_row(int N) { return (N + 3) / 4 % 2 == 0 ? (N + 3) / 4 * 4 + 4 : (N + 3) / 4 * 4; }
__host__ __device__ inline int padded_row_bf16(int N) {
  const int units = (N + 7) / 8;  // 16-byte units of 8 halves
  return (units % 2 == 0 ? units + 1 : units) * 8;
}
// Floats of shared memory the tile takes: fp32 rows, or bf16 rows (two halves a float).
__host__ __device__ inline std::size_t tile_floats(int tp, int N, bool bf16) {
  return bf16 ? static_cast<std::size_t>(tp) * padded_row_bf16(N) / 2 : static_cast<std::size_t>(tp) * padded_row(N);
}
__device__ inline Tile tile_of(const SsdShape& sh, int slot, int h, int TP, int z) {
  Tile t;
  t.p0 = z * TP;
  t.tp = sh.P - t.p0 < TP ? sh.P - t.p0 : TP;
  t.N = sh.N;
  t.Np = padded_row(sh.N);
  t.Nb = padded_row_bf16(sh.N);
  t.base = ((static_cast<std::size_t>(slot) * sh.H + h) * sh.P + t.p0) * sh.N;
  return t;
}

// Asks L2 for the tile's bytes (its rows are contiguous in the state; one bulk prefetch, by thread 0).
// A kernel launched programmatically calls it before it waits for the kernel before it: the state it
// will stage is then in L2 by the time that kernel is done (the prefetch changes no value).
__device__ inline void prefetch_state_l2(const SsdState& st, const Tile& t) {
  if (threadIdx.x != 0) return;
  const void* g = st.state_f32 ? static_cast<const void*>(st.state_f32 + t.base)
                               : static_cast<const void*>(st.state_bf16 + t.base);
  const unsigned bytes = static_cast<unsigned>(t.tp) * static_cast<unsigned>(t.N) * (st.state_f32 ? 4u : 2u);
  if (!aligned16(g) || bytes % 16 != 0) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(g), "r"(bytes) : "memory");
}

// Starts the tile's copy: fp32 into S [tp][Np], bf16 into raw [tp][Nb] (kept as bf16 on chip: the
// values are read through widen_bf16, which is exact). The caller commits and waits.
__device__ inline void stage_state(const SsdState& st, const Tile& t, float* S, uint16_t* raw) {
  if (st.state_f32) {
    const float* g = st.state_f32 + t.base;
    stage_rows(S, t.Np, t.tp, t.N, [&](int i) { return g + static_cast<std::size_t>(i) * t.N; });
    return;
  }
  const uint16_t* g = st.state_bf16 + t.base;  // rows of N halves, N % 4 == 0
  if (t.N % 8 == 0 && aligned16(g)) {
    for (Walk w(t.N / 8); w.r < t.tp; w.next())
      cp_async16(raw + w.r * t.Nb + 8 * w.c, g + static_cast<std::size_t>(w.r) * t.N + 8 * w.c);
  } else if (aligned8(g)) {
    for (Walk w(t.N / 4); w.r < t.tp; w.next())
      cp_async8(raw + w.r * t.Nb + 4 * w.c, g + static_cast<std::size_t>(w.r) * t.N + 4 * w.c);
  } else {  // not seen in practice (a slot's rows start on 8 bytes): plain copies
    for (Walk w(t.N); w.r < t.tp; w.next()) raw[w.r * t.Nb + w.c] = g[static_cast<std::size_t>(w.r) * t.N + w.c];
  }
}

// A bf16 row on chip, read as floats (widen_bf16: exact).
struct Bf16Row {
  const uint16_t* r;
  __device__ float operator[](int n) const { return widen_bf16(r[n]); }
};

// Four consecutive values (element n % 4 == 0) of a tile row on chip, as floats.
__device__ inline float4 tile_load4(const Tile& t, const float* S, const uint16_t* raw, bool bf16, int r, int n) {
  if (!bf16) return *reinterpret_cast<const float4*>(S + r * t.Np + n);
  const uint2 u = *reinterpret_cast<const uint2*>(raw + r * t.Nb + n);
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                     __uint_as_float(u.y & 0xffff0000u));
}
// Four bf16-exact floats as four halves (their high 16 bits).
__device__ inline uint2 pack_bf16x4(const float v[4]) {
  uint2 u;
  u.x = (__float_as_uint(v[0]) >> 16) | (__float_as_uint(v[1]) & 0xffff0000u);
  u.y = (__float_as_uint(v[2]) >> 16) | (__float_as_uint(v[3]) & 0xffff0000u);
  return u;
}

// Writes 4 values (already bf16-exact for a bf16 state) at element e of the tile in the state.
__device__ inline void store4(const SsdState& st, const Tile& t, int e, const float v[4]) {
  if (st.state_f32) {
    *reinterpret_cast<float4*>(st.state_f32 + t.base + e) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    *reinterpret_cast<uint2*>(st.state_bf16 + t.base + e) = pack_bf16x4(v);
  }
}

// dot(C, S[p]) for every row p < tp of the tile on chip, four threads per row: thread 4p + q forms
// quarter q (quarter_sum), lane 4p combines the four and calls out(p, dot). Every thread of the
// block must call this (the lanes exchange their sums).
template <class Out>
__device__ inline void tile_dots(const float* C, const Tile& t, const float* S, const uint16_t* raw, bool bf16,
                                 Out out) {
  for (int w0 = 0; w0 < 4 * t.tp; w0 += kStepThreads) {
    const int w = w0 + static_cast<int>(threadIdx.x), p = w >> 2, q = w & 3;
    float a = 0.0f;
    if (p < t.tp) {
      a = bf16 ? quarter_sum(C, Bf16Row{raw + p * t.Nb}, t.N, q) : quarter_sum(C, S + p * t.Np, t.N, q);
    }
    const float a1 = __shfl_down_sync(0xffffffffu, a, 1);
    const float a2 = __shfl_down_sync(0xffffffffu, a, 2);
    const float a3 = __shfl_down_sync(0xffffffffu, a, 3);
    if (q == 0 && p < t.tp) out(p, combine_quarters(a, a1, a2, a3));
  }
}

// tile_dots with two lanes a row (N % 4 == 0), for rows p_begin .. p_end-1 of the tile: lane
// 2(p mod 64) + k forms quarters 2k and 2k + 1 side by side (each quarter_sum's fmaf chain, n
// ascending), adds them, and lane 2(p mod 64) forms (a0 + a1) + (a2 + a3), combine_quarters'
// expression: the same bits as tile_dots with half its dependent chain and 64 rows a pass. A row's
// lane does not depend on the range (a caller may do rows 0..31, then 32..63, and find row p on the
// same lane). Every thread of the block must call this.
template <class Out>
__device__ inline void tile_dots_pairs(const float* C, const Tile& t, const float* S, const uint16_t* raw, bool bf16,
                                       int p_begin, int p_end, Out out) {
  const int N = t.N;
  for (int w0 = p_begin / (kStepThreads / 2) * kStepThreads; w0 < 2 * p_end; w0 += kStepThreads) {
    const int w = w0 + static_cast<int>(threadIdx.x), p = w >> 1, q = 2 * (w & 1);
    float a0 = 0.0f, a1 = 0.0f;
    if (p >= p_begin && p < p_end) {
      if (bf16) {
        const uint16_t* r = raw + p * t.Nb + q;
        for (int n = 0; n < N; n += 4) {
          const float2 c = *reinterpret_cast<const float2*>(C + n + q);
          const uint32_t u = *reinterpret_cast<const uint32_t*>(r + n);
          a0 = fmaf(c.x, __uint_as_float(u << 16), a0);
          a1 = fmaf(c.y, __uint_as_float(u & 0xffff0000u), a1);
        }
      } else {
        const float* r = S + p * t.Np + q;
        for (int n = 0; n < N; n += 4) {
          const float2 c = *reinterpret_cast<const float2*>(C + n + q);
          const float2 s = *reinterpret_cast<const float2*>(r + n);
          a0 = fmaf(c.x, s.x, a0);
          a1 = fmaf(c.y, s.y, a1);
        }
      }
    }
    const float half = a0 + a1;
    const float other = __shfl_down_sync(0xffffffffu, half, 1);
    if (q == 0 && p >= p_begin && p < p_end) out(p, half + other);
  }
}

// A one-row exact call's place in head h's cell: the row's index j in it, the x ring slot of the
// cell's first row, whether the row ends the cell (the fold). The values of call_cell and
// ring_x_slot (ssd_device.cuh) for that row, from tmod = start mod cell in 32-bit arithmetic (a
// block's index math was dozens of 64-bit divisions, each a long serial routine). A cell starts at
// the head's offset o plus a multiple of the cell, so its first row's x slot is 0; the first cell
// ([0, o) when o > 0) is the exception: slot cell − o.
struct RowInCell {
  int j, xs0;
  bool fold;
};
__device__ inline RowInCell row_in_cell(const ScanGrid& g, int h, int H, int64_t start, int tmod) {
  const int o = head_offset(g, h, H);
  RowInCell r;
  if (start < o) {  // the head's first cell, [0, o)
    r.j = static_cast<int>(start);
    r.xs0 = g.cell - o;
    r.fold = start + 1 == o;
  } else {
    const int d = tmod - o;
    r.j = d < 0 ? d + g.cell : d;
    r.xs0 = 0;
    r.fold = r.j == g.cell - 1;
  }
  return r;
}

// The head that launch slot y of a decode step works on (tmod = start mod cell): a rotation of the
// heads that starts at the first one whose cell ends at this row, i.e. whose stagger offset is
// (start + 1) mod cell (the offsets of exact_grid.h grow with the head number). Blocks start roughly
// in index order, so the heads that fold (the most work) start first and the step does not end on
// one (launch order only: no bits depend on it).
__device__ inline int heavy_first_head(const ScanGrid& g, int H, int tmod, int y) {
  if (!g.stagger || g.cell <= 1) return y;
  const int all = g.model_heads > 0 ? g.model_heads : H;
  const int o = tmod + 1 == g.cell ? 0 : tmod + 1;
  int h0 = ((o * all + g.cell - 1) / g.cell - g.first_head) % H;
  if (h0 < 0) h0 += H;
  const int h = h0 + y;
  return h >= H ? h - H : h;
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

// Launchers (tp: ssd_step_tile's rows of p per block, at most kStepThreads).
void launch_ssu(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
                const float* A, const float* D, const SsdState& st, int tp, float* y, cudaStream_t s);
void launch_decode(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                   const float* dt, const float* A, const float* D, const SsdState& st, int tp, float* y,
                   cudaStream_t s);

}  // namespace parity::cuda::ssd
