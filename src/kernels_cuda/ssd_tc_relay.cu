// PROTOTYPE: the tensor-core relay (ssd_tc.h, SsdTcWay::relay): the walk's function and bits with the cells of a
// sequence in parallel instead of one after another.
//
// Only the fold chains one cell to the next, and it is elementwise. So a block of W warps owns 16 columns of p of
// one head, warp w takes cells w, w + W, w + 2W, ..., and each warp forms everything of its cell that does not
// depend on the state (its copies, the intra product, the fold's delta on tensor cores) while the warps before it
// are still folding. The state is then relayed: the warp of cell k waits on a named barrier for the warp of
// cell k − 1, reads S_start from shared memory, folds its delta into it (fold_element, as the walk), writes the
// result for the warp of cell k + 1 and releases it, and only then forms C·S_startᵀ and its outputs. The serial
// chain a cell is the handoff and 64 fused multiply-adds a lane; the walk's is the whole cell.
//
// Each value is formed by the walk's steps (ssd_tc_steps.cuh) from the same fp32 operands: the fragments of C
// and B are packed from the fp32 rows in shared memory, the walk's from bf16 copies of the same packing; the
// quarters of C·Sᵀ and their sum, the intra product, the delta, the fold and the outputs are the walk's. So
// the relay gives the walk's bits (CudaSsdTc.BitsDoNotDependOnTheBlockShapeOrSchedule).
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_tc_cells.cuh"
#include "kernels_cuda/ssd_tc_kernels.h"
#include "kernels_cuda/ssd_tc_steps.cuh"

namespace parity::cuda {
namespace ssd {
namespace {

constexpr int kSS = kN + 4;  // a relayed state row (floats)
using St = Stage<1>;
constexpr int kWarpFloats = 2 * (St::kFloats + kCBFloats);  // a warp's two stages

template <int W>
constexpr int relay_smem_floats() {
  return W * kWarpFloats + 2 * kG * kSS;  // the stages, then two relay slots of 16 rows of p
}

// A named barrier shared by two warps, both waiting at it: the producer's shared-memory writes (and its reads of
// the slot it will overwrite next) are ordered before the consumer's accesses. (With the producer only arriving,
// bar.arrive, compute-sanitizer's racecheck reported the consumer's later writes against the producer's reads.)
__device__ __forceinline__ void pair_sync(int id) { asm volatile("bar.sync %0, 64;\n" ::"r"(id) : "memory"); }

template <int W, bool kSplit>
__global__ void __launch_bounds__(32 * W)
    relay_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* Dskip,
                 SsdState st, const float* tables, float* y) {
  const int seq = blockIdx.x, h = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t start = p.start[seq];
  const int t0 = p.task0[seq], K = p.task0[seq + 1] - t0;
  if (K <= 0 || uses_ssu(g, start, p.n[seq])) return;
  int k = warp;
  if (k >= K) return;
  const int P = sh.P, N = sh.N;
  const WalkCtx b{sh, g, source_of(sh, g, p, seq, xbc, ld, dt, st), nullptr, h, h / sh.heads_per_group(),
                  static_cast<int>(blockIdx.z) * 16};
  const bool bf16 = st.state_f32 == nullptr;
  const float Dh = Dskip[h];
  const int gi = lane / 4, q = lane % 4;
  const std::size_t sbase = (static_cast<std::size_t>(b.src.slot) * sh.H + h) * P * N;
  auto table = [&](int kx) { return tables + (static_cast<std::size_t>(t0 + kx) * sh.H + h) * kTabWords; };
  auto cell = [&](int kx) { return first_cell(cell_task(g, p, t0 + kx, h, sh.H)); };

  extern __shared__ __align__(16) float smem[];
  float* const mine = smem + warp * kWarpFloats;
  auto Xb = [&](int it) { return mine + (it % 2) * St::kFloats; };
  auto CBb = [&](int it) { return mine + 2 * St::kFloats + (it % 2) * kCBFloats; };
  float* const relay = smem + W * kWarpFloats;
  auto slot = [&](int kx) { return relay + (kx % 2) * kG * kSS; };

  const bool aligned = (reinterpret_cast<std::uintptr_t>(xbc) & 15) == 0 && ld % 4 == 0;
  const int xoff = h * P + b.p0, boff = sh.H * P + b.grp * N, coff = boff + sh.groups * N;
  auto issue_cell = [&](const CellIn& x, int kx, int it) {
    if (aligned && x.j0 == 0 && x.L == kG && x.cs >= start) {
      const float* rowp = xbc + static_cast<std::size_t>(b.src.row0 + static_cast<int>(x.cs - start)) * ld;
      issue_rows<1, 32>(rowp, ld, xoff, coff, boff, x.fold, table(kx), Xb(it), CBb(it), lane);
    } else {
      issue<1, 32>(b, x, table(kx), Xb(it), CBb(it), lane);
    }
  };
  issue_cell(cell(k), k, 0);
  commit();
  if (k + W < K) issue_cell(cell(k + W), k + W, 1);
  commit();

  for (int it = 0; k < K; ++it, k += W) {
    const CellIn c = cell(k);
    ptx::cp_async_wait<1>();  // cell k's copies (cell k + W's may be in flight)
    __syncwarp();
    const float* F = Xb(it) + St::kTab;
    const float* xs = Xb(it) + St::kX;
    const float* Cs = CBb(it) + kC;
    const float* Bs = CBb(it) + kB;
    float xa[4][2];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int pt = 0; pt < 2; ++pt) xa[a][pt] = xs[(2 * q + (a & 1) + 8 * (a >> 1)) * St::XS + gi + 8 * pt];

    // The fold's delta (no state in it), before the wait.
    float dl[16][4];
    if (c.fold) {
      float wv[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) wv[a] = F[kTabW + 2 * q + (a & 1) + 8 * (a >> 1)];
      Frag4<kSplit> xw;
      xw.set(0, wv[0] * xa[0][0], wv[1] * xa[1][0]);
      xw.set(1, wv[0] * xa[0][1], wv[1] * xa[1][1]);
      xw.set(2, wv[2] * xa[2][0], wv[3] * xa[3][0]);
      xw.set(3, wv[2] * xa[2][1], wv[3] * xa[3][1]);
      const float* b0 = Bs + 2 * q * kRow + gi;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        Frag2<kSplit> bb;
        bb.set(0, b0[8 * j], b0[kRow + 8 * j]);
        bb.set(1, b0[8 * kRow + 8 * j], b0[9 * kRow + 8 * j]);
#pragma unroll
        for (int e = 0; e < 4; ++e) dl[j][e] = 0.0f;
        product<kSplit>(dl[j], xw, bb);
      }
    }

    // The cell's start state: the slot's own for the call's first cell, else what the warp before relayed.
    float S[16][4];
    if (k == 0) {
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const std::size_t i = sbase + static_cast<std::size_t>(b.p0 + gi + 4 * e) * N + 8 * j + 2 * q;
          float2 v;
          if (bf16) {
            const uint32_t u = *reinterpret_cast<const uint32_t*>(st.state_bf16 + i);
            v = make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
          } else {
            v = *reinterpret_cast<const float2*>(st.state_f32 + i);
          }
          S[j][e] = v.x;
          S[j][e + 1] = v.y;
        }
    } else {
      pair_sync(1 + warp);
      const float* in = slot(k - 1);
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const float2 v = lds2(in + (gi + 4 * e) * kSS + 8 * j + 2 * q);
          S[j][e] = v.x;
          S[j][e + 1] = v.y;
        }
    }
    // The fold into the next slot, then the release of the warp of cell k + 1.
    const bool last_fold = c.fold && (k + 1 == K || !cell(k + 1).fold);
    float* const out = slot(k);
    auto fold_out = [&](auto bf16_state) {
      const float decay = F[kTabDecay];
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          float2 v = make_float2(S[j][e], S[j][e + 1]);
          if (c.fold) {
            v.x = fold_element(decay, v.x, dl[j][e], decltype(bf16_state)::value);
            v.y = fold_element(decay, v.y, dl[j][e + 1], decltype(bf16_state)::value);
          }
          if (k + 1 < K) *reinterpret_cast<float2*>(out + (gi + 4 * e) * kSS + 8 * j + 2 * q) = v;
          if (last_fold) {
            const std::size_t i = sbase + static_cast<std::size_t>(b.p0 + gi + 4 * e) * N + 8 * j + 2 * q;
            if (bf16)  // already bf16-exact
              *reinterpret_cast<uint32_t*>(st.state_bf16 + i) =
                  (__float_as_uint(v.x) >> 16) | (__float_as_uint(v.y) & 0xffff0000u);
            else *reinterpret_cast<float2*>(st.state_f32 + i) = v;
          }
        }
    };
    if (bf16) fold_out(std::true_type{});
    else fold_out(std::false_type{});
    if (k + 1 < K) {
      __syncwarp();
      pair_sync(1 + (warp + 1) % W);
    }

    // C·S_startᵀ as the walk forms it (quarters from zero, added pairwise), the intra product, the outputs.
    float part[2][4];
    auto quarters = [&](auto bf16_state) {
      constexpr bool kRest = kSplit && !decltype(bf16_state)::value;
      auto quarter = [&](int m, float (&acc)[2][4]) {
#pragma unroll
        for (int pt = 0; pt < 2; ++pt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[pt][e] = 0.0f;
#pragma unroll
        for (int s2 = 0; s2 < 2; ++s2) {
          const int jl = 2 * m + s2;
          const float* c0 = Cs + gi * kRow + 16 * jl + 2 * q;
          const float2 v0 = lds2(c0), v1 = lds2(c0 + 8 * kRow), v2 = lds2(c0 + 8), v3 = lds2(c0 + 8 * kRow + 8);
          Frag4<kSplit> ca;
          ca.set(0, v0.x, v0.y);
          ca.set(1, v1.x, v1.y);
          ca.set(2, v2.x, v2.y);
          ca.set(3, v3.x, v3.y);
#pragma unroll
          for (int pt = 0; pt < 2; ++pt) {
            Frag2<kRest> sb;
            sb.set(0, S[2 * jl][2 * pt], S[2 * jl][2 * pt + 1]);
            sb.set(1, S[2 * jl + 1][2 * pt], S[2 * jl + 1][2 * pt + 1]);
            Frag2<kSplit> b2;
            b2.hi[0] = sb.hi[0], b2.hi[1] = sb.hi[1];
            if constexpr (kRest) b2.lo[0] = sb.lo[0], b2.lo[1] = sb.lo[1];
            product<kSplit>(acc[pt], ca, b2, kRest);
          }
        }
      };
      float half[2][4];
#pragma unroll
      for (int hp = 0; hp < 2; ++hp) {
        float a0[2][4], a1[2][4];
        quarter(2 * hp, a0);
        quarter(2 * hp + 1, a1);
#pragma unroll
        for (int pt = 0; pt < 2; ++pt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float sum = a0[pt][e] + a1[pt][e];
            if (hp == 0) half[pt][e] = sum;
            else part[pt][e] = half[pt][e] + sum;
          }
      }
    };
    if constexpr (!kSplit) quarters(std::true_type{});
    else if (bf16) quarters(std::true_type{});
    else quarters(std::false_type{});

    float ya[2][4] = {};
    {
      Frag4<kSplit> fa;
      const uint4 hv = *reinterpret_cast<const uint4*>(F + kTabHi + 4 * lane);
      fa.hi[0] = hv.x, fa.hi[1] = hv.y, fa.hi[2] = hv.z, fa.hi[3] = hv.w;
      if constexpr (kSplit) {
        const uint4 lv = *reinterpret_cast<const uint4*>(F + kTabLo + 4 * lane);
        fa.lo[0] = lv.x, fa.lo[1] = lv.y, fa.lo[2] = lv.z, fa.lo[3] = lv.w;
      }
#pragma unroll
      for (int pt = 0; pt < 2; ++pt) {
        Frag2<kSplit> xb;
        xb.set(0, xa[0][pt], xa[1][pt]);
        xb.set(1, xa[2][pt], xa[3][pt]);
        product<kSplit>(ya[pt], fa, xb);
      }
    }
    Pending pd{};
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int t = gi + 8 * hr;
      pd.row[hr] = t >= c.j0 && t < c.L ? b.src.row0 + static_cast<int>(c.cs + t - b.src.start) : -1;
      pd.e[hr] = F[kTabE + t];
#pragma unroll
      for (int pt = 0; pt < 2; ++pt) pd.x[hr][pt] = lds2(xs + t * St::XS + 8 * pt + 2 * q);
    }
#pragma unroll
    for (int pt = 0; pt < 2; ++pt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        pd.part[pt][e] = part[pt][e];
        pd.intra[pt][e] = ya[pt][e];
      }
    finish<1, 1>(pd, nullptr, 0, lane, sh, h, b.p0, Dh, y);

    __syncwarp();  // this stage's reads done: cell k + 2W's copies into it
    if (k + 2 * W < K) issue_cell(cell(k + 2 * W), k + 2 * W, it);
    commit();
  }
}

template <int W, bool kSplit>
void launch(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* D, const SsdState& st, const float* tables, float* y, cudaStream_t s) {
  constexpr std::size_t smem = static_cast<std::size_t>(relay_smem_floats<W>()) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(sh.H), static_cast<unsigned>(sh.P / 16));
  ensure_smem(relay_kernel<W, kSplit>, smem, "ssd tc relay smem");
  relay_kernel<W, kSplit><<<grid, 32 * W, smem, s>>>(sh, g, p, xbc, ld, dt, D, st, tables, y);
  check_launch("ssd tc relay");
}

}  // namespace
}  // namespace ssd

void ssd_tc_relay(int warps, bool split, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc,
                  int ld, const float* dt, const float* D, SsdState st, const float* tables, float* y,
                  cudaStream_t s) {
  if (sh.P % 16 != 0) throw Error("CUDA SSD tc relay: P a multiple of 16, got " + std::to_string(sh.P));
  switch (warps) {
    case 2:
      if (split) ssd::launch<2, true>(sh, g, p, xbc, ld, dt, D, st, tables, y, s);
      else ssd::launch<2, false>(sh, g, p, xbc, ld, dt, D, st, tables, y, s);
      break;
    case 4:
      if (split) ssd::launch<4, true>(sh, g, p, xbc, ld, dt, D, st, tables, y, s);
      else ssd::launch<4, false>(sh, g, p, xbc, ld, dt, D, st, tables, y, s);
      break;
    default: throw Error("CUDA SSD tc relay: 2 or 4 warps, got " + std::to_string(warps));
  }
}

}  // namespace parity::cuda
