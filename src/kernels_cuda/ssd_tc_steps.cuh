#pragma once
// The tensor-core cell walk's steps (ssd_tc_walk.cu), kept apart from the walk because they are the bit
// contract the one-row decode (ssd_tc_decode.cu) shares with it: the bf16 packing of a product's factors
// (rounded, or split into a bf16 head and a bf16 rest), the m16n8k16 step, a product in one or three steps, a
// warp's outputs, and the ways a block is shaped. A warp's three products of a cell: ssd_tc_products.cuh.
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {
namespace {

constexpr int kG = 16, kN = 128;

// The partial sums warps ks > 0 hand to warp ks = 0 (finish): [cell parity][ks − 1][pw][8 values][32 lanes].
template <int WP, int KS>
constexpr int kExchange = 2 * (KS - 1) * WP * 8 * 32;

// The ways a block is shaped, (warps over p, warps over n) = (1, 2 or 4) × (1, 2 or 4): calls
// f(integral_constant<WP>, integral_constant<KS>), or throws naming what is out of range.
template <class F>
void by_way(int wp, int ks, const SsdShape& sh, F&& f) {
  if (sh.P % (16 * wp) != 0)
    throw Error("CUDA SSD tc: " + std::to_string(wp) + " warps over p need P a multiple of " + std::to_string(16 * wp) +
                ", got " + std::to_string(sh.P));
  auto by_ks = [&](auto wpc) {
    switch (ks) {
      case 1: f(wpc, std::integral_constant<int, 1>{}); break;
      case 2: f(wpc, std::integral_constant<int, 2>{}); break;
      case 4: f(wpc, std::integral_constant<int, 4>{}); break;
      default: throw Error("CUDA SSD tc: warps over n must be 1, 2 or 4, got " + std::to_string(ks));
    }
  };
  switch (wp) {
    case 1: by_ks(std::integral_constant<int, 1>{}); break;
    case 2: by_ks(std::integral_constant<int, 2>{}); break;
    case 4: by_ks(std::integral_constant<int, 4>{}); break;
    default: throw Error("CUDA SSD tc: warps over p must be 1, 2 or 4, got " + std::to_string(wp));
  }
}


__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (the lower 16 bits) = lo
  return *reinterpret_cast<const uint32_t*>(&v);
}
// What pack(lo, hi) left out: each value minus its bf16 rounding, rounded to bf16 in turn.
__device__ __forceinline__ uint32_t pack_rest(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return pack(lo - __low2float(v), hi - __high2float(v));
}
// c += a·b, m16n8k16, bf16 inputs, fp32 accumulator (not volatile: the compiler may interleave them).
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A product's operand as a fragment of R registers: the bf16 rounding, and with kSplit also what it left out.
template <int R, bool kSplit>
struct Frag {
  uint32_t hi[R], lo[kSplit ? R : 1];
  __device__ __forceinline__ void set(int k, float a, float b) {
    hi[k] = pack(a, b);
    if constexpr (kSplit) lo[k] = pack_rest(a, b);
  }
};
template <bool kSplit>
using Frag4 = Frag<4, kSplit>;  // the m16k16 operand
template <bool kSplit>
using Frag2 = Frag<2, kSplit>;  // the k16n8 operand
// c += a·b (kSplit: lo·hi and hi·lo first, then hi·hi; lo_b: b has a rest worth multiplying).
template <bool kSplit>
__device__ __forceinline__ void product(float (&c)[4], const Frag4<kSplit>& a, const Frag2<kSplit>& b,
                                        bool lo_b = true) {
  if constexpr (kSplit) {
    mma(c, a.lo, b.hi);
    if (lo_b) mma(c, a.hi, b.lo);
  }
  mma(c, a.hi, b.hi);
}

__device__ __forceinline__ void zero4(float* dst) { *reinterpret_cast<float4*>(dst) = make_float4(0.f, 0.f, 0.f, 0.f); }
__device__ __forceinline__ float2 lds2(const float* p) { return *reinterpret_cast<const float2*>(p); }

// The outputs of one warp's rows t = g, g + 8 and columns 2q, 2q+1 of its two p-tiles, held from the
// cell's math to the next barrier when other warps add their quarters (KS > 1).
struct Pending {
  float part[2][4], intra[2][4], e[2];
  float2 x[2][2];  // [hr][pt]: x[t][p] for the D skip
  int row[2];      // packed row of t, or −1 where the call does not output t
};

// y of the pending rows: inter = own part + the others' (KS = 2: (a_0 + a_1) + (a_2 + a_3) with the second
// half from warp 1; KS = 4: (a_0 + a_1) + (a_2 + a_3) with a_1..a_3 from warps 1..3).
template <int WP, int KS>
__device__ void finish(const Pending& pd, const float* xch, int pw, int lane, const SsdShape& sh, int h, int col0,
                       float Dh, float* y) {
  float inter[2][4];
#pragma unroll
  for (int pt = 0; pt < 2; ++pt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      auto other = [&](int ks) { return xch[(((ks - 1) * WP + pw) * 8 + pt * 4 + e) * 32 + lane]; };
      if constexpr (KS == 1) inter[pt][e] = pd.part[pt][e];
      else if constexpr (KS == 2) inter[pt][e] = pd.part[pt][e] + other(1);
      else inter[pt][e] = (pd.part[pt][e] + other(1)) + (other(2) + other(3));
    }
  const int q = lane % 4;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    if (pd.row[hr] < 0) continue;
    float* yr = y + static_cast<std::size_t>(pd.row[hr]) * sh.H * sh.P + static_cast<std::size_t>(h) * sh.P + col0;
#pragma unroll
    for (int pt = 0; pt < 2; ++pt) {
      float2 o;
      o.x = row_output_scaled(pd.e[hr], inter[pt][2 * hr], pd.intra[pt][2 * hr], Dh, pd.x[hr][pt].x);
      o.y = row_output_scaled(pd.e[hr], inter[pt][2 * hr + 1], pd.intra[pt][2 * hr + 1], Dh, pd.x[hr][pt].y);
      *reinterpret_cast<float2*>(yr + 8 * pt + 2 * q) = o;
    }
  }
}

}  // namespace
}  // namespace parity::cuda::ssd
