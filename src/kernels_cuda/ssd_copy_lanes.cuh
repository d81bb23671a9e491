#pragma once
// The prefill walks' copies into shared memory. Lanes: how a block's threads split the copy of rows ×
// `units` units of 4 floats (ssd_walk.cu, ssd_span.cu): one division per kernel and none per unit. Thread →
// unit u0 of rows r0, r0 + rstep, ...; with more units than threads, units u0, u0 + T, ... of every
// row. Index arithmetic only: which thread copies what changes no value.
#include <cstdint>

namespace parity::cuda::ssd {

struct Lanes {
  int u0, r0, rstep, ustep;
  bool on;
};

template <int T>
__device__ inline Lanes lanes_for(int units) {
  const int t = threadIdx.x;
  if (units <= T) {
    const int per = T / units;
    return {t % units, t / units, per, units, t < per * units};
  }
  return {t, 0, 1, T, true};
}

// ---- asynchronous copies with zero fill (the span and lane walks) ------------------------------
// Internal linkage, as when each walk defined them: the walks' code stays what it was instruction for instruction.
namespace {
__device__ __forceinline__ unsigned saddr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp16(float* dst, const float* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr(dst)), "l"(src) : "memory");
}
// 4 bytes, or 4 zero bytes when !valid (src is then not read).
__device__ __forceinline__ void cp4(float* dst, const float* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(saddr(dst)), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// dst[0..3] = row[c..c+3], zeros past `end`: one 16-byte copy where aligned and whole.
__device__ __forceinline__ void copy4(float* dst, const float* row, int c, int end) {
  if (c + 4 <= end && (reinterpret_cast<std::uintptr_t>(row + c) & 15) == 0) {
    cp16(dst, row + c);
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) cp4(dst + j, c + j < end ? row + c + j : row, c + j < end);
}
}  // namespace

}  // namespace parity::cuda::ssd
