#pragma once
// The read loop of the decode floors (stream_floor.cu, persistent_floor.cu): words i, i + stride, ...
// below n of p, kUnroll 16-byte loads a thread in flight, streamed past the caches, folded into a hash
// the caller keeps so that the loads stay.
#include <cstddef>

namespace parity::cuda {

template <int kUnroll>
__device__ __forceinline__ unsigned read_words(const uint4* __restrict__ p, std::size_t n, std::size_t i,
                                               std::size_t stride) {
  unsigned h = 0;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) h ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldcs(p + i);
    h ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  return h;
}

}  // namespace parity::cuda
