#pragma once
// Plain mode's one-token state update of one p-tile of one head, as device code the SSU kernel
// (ssd_ssu.cu) and the persistent decode step (persistent_decode.cu) both run: one copy, one set of
// bits. kStepThreads threads (threadIdx.x < kStepThreads) call it; `sync` orders them (the kernel's
// __syncthreads, a named barrier where the block has more threads).
#include "kernels_cuda/ssd_tile.cuh"

namespace parity::cuda::ssd {

struct SsuLayout {
  std::size_t S, C, B, x, total;  // floats; S is the tile (fp32 or bf16 rows)
};
__host__ __device__ inline SsuLayout ssu_layout(const SsdShape& sh, int tp, bool bf16) {
  Carve c;
  SsuLayout l{};
  l.S = c.take(tile_floats(tp, sh.N, bf16));
  l.C = c.take(sh.N);
  l.B = c.take(sh.N);
  l.x = c.take(tp);
  l.total = c.at;
  return l;
}

// The tile's inputs from the row (xbc's row of the sequence: x, then B, then C of each group) into
// shared memory, asynchronously; the caller commits and waits.
__device__ inline void ssu_stage_inputs(const SsdShape& sh, const Tile& t, int h, const float* row, float* Cs,
                                        float* Bs, float* xs) {
  const int grp = h / sh.heads_per_group(), N = sh.N, I = sh.H * sh.P, GN = sh.groups * N;
  stage_vec(Cs, row + I + GN + grp * N, N);
  stage_vec(Bs, row + I + grp * N, N);
  stage_vec(xs, row + h * sh.P + t.p0, t.tp);
}

//   S[p][n] <- fmaf(exp(dt·A), S[p][n], (dt·x[p])·B[n])   rounded to bf16 for a bf16 state
//   y[p]    = dot(C, S[p]) + D·x[p]                       the quarter-sum dot (ssd_device.cuh)
// with the tile, B, C and x on chip (landed and ordered by the caller); y: the tile's first output.
template <class Sync>
__device__ inline void ssu_tile_step(const SsdState& st, const Tile& t, float* S, uint16_t* raw, const float* Cs,
                                     const float* Bs, const float* xs, float d, float dA, float Dh, float* y,
                                     Sync sync) {
  const bool bf16 = st.state_f32 == nullptr;
  const int N = t.N;
  // Four consecutive columns of one row per piece: updated on chip (for the dots) and in the state.
  for (Walk w(N / 4); w.r < t.tp; w.next()) {
    const int r = w.r, n = 4 * w.c;
    const float dx = d * xs[r];
    const float4 old = tile_load4(t, S, raw, bf16, r, n);
    const float4 b = *reinterpret_cast<const float4*>(Bs + n);
    float v[4] = {fmaf(dA, old.x, dx * b.x), fmaf(dA, old.y, dx * b.y), fmaf(dA, old.z, dx * b.z),
                  fmaf(dA, old.w, dx * b.w)};
    if (bf16) {
      for (int k = 0; k < 4; ++k) v[k] = round_bf16(v[k]);
      *reinterpret_cast<uint2*>(raw + r * t.Nb + n) = pack_bf16x4(v);
    } else {
      *reinterpret_cast<float4*>(S + r * t.Np + n) = make_float4(v[0], v[1], v[2], v[3]);
    }
    store4(st, t, r * N + n, v);
  }
  sync();
  tile_dots(Cs, t, S, raw, bf16, [&](int r, float dot) { y[r] = dot + Dh * xs[r]; });
}

}  // namespace parity::cuda::ssd
