// Phase 2 of the scan: the only sequential part, and elementwise. Per (sequence, head) each
// element of the state walks the call's cells in order:
//   scratch[cell] ← S (the cell's start state, for the outputs),  S ← exp(cum_{L-1})·S + delta
// (fmaf(decay, S, delta): the fold's expression, the one a decode step that completes the cell
// evaluates too), rounded to bf16 after every fold when the state is bf16. The slot's state is
// written only where a cell was folded.
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {
namespace {

// Each thread owns 4 consecutive elements. The deltas of kAhead cells are loaded before any of
// them is used: they do not depend on S, so the walk waits on memory once per kAhead cells.
constexpr int kThreads = 256, kVec = 4, kAhead = 8;

__device__ inline void load4(const float* s, int e, int PN, bool vec, float v[kVec]) {
  if (vec) {
    const float4 q = *reinterpret_cast<const float4*>(s + e);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    for (int j = 0; j < kVec; ++j) v[j] = e + j < PN ? s[e + j] : 0.0f;
  }
}
__device__ inline void store4(float* s, int e, int PN, bool vec, const float v[kVec]) {
  if (vec) {
    *reinterpret_cast<float4*>(s + e) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    for (int j = 0; j < kVec; ++j)
      if (e + j < PN) s[e + j] = v[j];
  }
}

__global__ void __launch_bounds__(kThreads) chain_kernel(SsdShape sh, ScanGrid g, PassSeqs p, SsdState st, Scratch sc) {
  const int seq = blockIdx.x, h = blockIdx.y;
  const int PN = sh.P * sh.N, e = (blockIdx.z * kThreads + threadIdx.x) * kVec;
  const int t0 = p.task0[seq], K = p.task0[seq + 1] - t0;
  if (K == 0 || e >= PN) return;  // a sequence without cell tasks (SSU, one-row exact decode): not ours
  const bool vec = PN % kVec == 0;
  const std::size_t sbase = (static_cast<std::size_t>(p.slot[seq]) * sh.H + h) * PN;
  const bool bf16 = st.state_f32 == nullptr;

  float S[kVec];
  if (bf16) {
    for (int j = 0; j < kVec; ++j) S[j] = e + j < PN ? widen_bf16(st.state_bf16[sbase + e + j]) : 0.0f;
  } else {
    load4(st.state_f32 + sbase, e, PN, vec, S);
  }
  bool folded = false, done = false;
  for (int k0 = 0; k0 < K && !done; k0 += kAhead) {
    float dl[kAhead][kVec], dec[kAhead];
    bool fold[kAhead], keep[kAhead];
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      const int k = k0 + a;
      CellTask t{};
      if (k < K) t = cell_task(g, p, t0 + k, h, sh.H);
      fold[a] = k < K && t.fold;
      keep[a] = k < K && t.live && start_state_in_scratch(t);
      dec[a] = 0.0f;
      if (fold[a]) {
        load4(sc.state(sh, t0 + k, h), e, PN, vec, dl[a]);
        dec[a] = sc.cell_decay[static_cast<std::size_t>(t0 + k) * sh.H + h];
      }
    }
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      if (keep[a]) store4(sc.state(sh, t0 + k0 + a, h), e, PN, vec, S);
      if (!fold[a]) {
        done = k0 + a < K;  // a live cell left open (exact) or no cell left: the walk ends
        if (done) break;
        continue;
      }
      for (int j = 0; j < kVec; ++j) S[j] = fold_element(dec[a], S[j], dl[a][j], bf16);
      folded = true;
    }
  }
  if (!folded) return;
  if (bf16) {
    for (int j = 0; j < kVec; ++j)
      if (e + j < PN) st.state_bf16[sbase + e + j] = static_cast<uint16_t>(__float_as_uint(S[j]) >> 16);  // bf16-exact
  } else {
    store4(st.state_f32 + sbase, e, PN, vec, S);
  }
}

}  // namespace

void launch_chain(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const SsdState& st, Scratch sc,
                  cudaStream_t s) {
  if (p.num_cell_tasks <= 0) return;
  const int PN = sh.P * sh.N;
  const unsigned blocks = static_cast<unsigned>((PN + kThreads * kVec - 1) / (kThreads * kVec));
  chain_kernel<<<dim3(p.num_seqs, sh.H, blocks), kThreads, 0, s>>>(sh, g, p, st, sc);
  check_launch("ssd chain");
}

}  // namespace parity::cuda::ssd
