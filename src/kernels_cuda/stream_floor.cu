// stream_floor.h: a decode step's launches with the work taken out (benchmarks only).
#include "kernels_cuda/stream_floor.h"

#include <cstdint>

#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/programmatic_launch.cuh"

namespace parity::cuda {
namespace {

constexpr int kThreads = 256, kBlocksPerSm = 4, kUnroll = 8;

__global__ void __launch_bounds__(kThreads) stream_read_kernel(const uint4* __restrict__ p, std::size_t n, bool early,
                                                                unsigned* sink) {
  if (early) release_next_kernel();
  else wait_and_release(false);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x;
  unsigned h = 0;
  // kUnroll independent 16-byte loads a thread in flight: ~17 MB over the device, well above what
  // its read rate times the memory latency needs.
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
  if (early) wait_for_prior_kernel();
  if (h == 0x9e3779b9u) *sink = h;  // keeps the reads; a hit (one thread in 2^32) writes a value nobody reads
}

__global__ void empty_step_kernel() { wait_and_release(false); }

}  // namespace

void stream_read(const void* p, std::size_t bytes, bool early, unsigned* sink, cudaStream_t s) {
  launch_programmatic_if(true, stream_read_kernel, dim3(static_cast<unsigned>(kBlocksPerSm * sm_count())),
                         dim3(kThreads), 0, s, "stream_read", static_cast<const uint4*>(p), bytes / 16, early, sink);
}

void empty_step(cudaStream_t s) { launch_programmatic_if(true, empty_step_kernel, dim3(1), dim3(32), 0, s, "empty_step"); }

}  // namespace parity::cuda
