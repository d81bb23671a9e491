#pragma once
// A barrier across every block of a cooperative launch (all blocks resident at once), for the
// persistent kernels (persistent_floor.cu, persistent_decode.cu). One device counter, zeroed before
// the launch, only grows: each block arrives once per barrier, and `target` (a block's running
// count of gridDim.x per barrier passed) is the number of arrivals this one waits for. The pattern
// of cooperative groups' grid sync: the block's writes, then one thread's release fence and
// arrival; that thread's acquire of the count, then the block's reads.
namespace parity::cuda {

__device__ __forceinline__ void grid_barrier(unsigned* count, unsigned& target) {
  __syncthreads();
  target += gridDim.x;
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(count, 1u);
    unsigned v = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
    } while (v < target);
    __threadfence();
  }
  __syncthreads();
}

}  // namespace parity::cuda
