#pragma once
// A barrier across every block of a cooperative launch (all blocks resident at once), for the
// persistent kernels (persistent_floor.cu, persistent_decode.cu). One device counter, zeroed before
// the launch, only grows: each block arrives once per barrier, and `target` (a block's running
// count of gridDim.x per barrier passed) is the number of arrivals this one waits for. The pattern
// of cooperative groups' grid sync: the block's writes, then one thread's arrival with release
// semantics; that thread's acquire of the count, then the block's reads (__syncthreads carries both
// to the block). No separate fences: __threadfence is fence.sc (MEMBAR.SC.GPU), and the former form
// ran two of them a barrier around a returning atomic, where the release and the acquire suffice.
//
// A wait that has not ended after kHangNs ends the kernel instead (trap: the launch fails with an
// error the host sees) rather than holding the GPU: a step takes milliseconds, and a kernel that never
// ran on a device before should fail a test, not hang the machine's session.
#include "kernels_cuda/ptx.cuh"

namespace parity::cuda {

constexpr unsigned long long kHangNs = 2'000'000'000ull;

// Spins until done() says yes, trapping after kHangNs.
template <class Done>
__device__ __forceinline__ void spin_or_trap(Done done) {
  if (done()) return;
  const unsigned long long t0 = ptx::global_timer_ns();
  while (!done())
    if (ptx::global_timer_ns() - t0 > kHangNs) __trap();
}

struct WholeBlock {
  __device__ void operator()() const { __syncthreads(); }
};
struct Nothing {
  __device__ void operator()() const {}
};

// `before` gathers the threads whose writes the barrier publishes (the whole block by default) and
// `after` releases the threads that read what other blocks wrote; `passed` runs on thread 0 once every
// block has arrived, before `after` (the persistent decode step tells its producer warp, which is in
// `after` only, to stop its copies there).
template <class Before = WholeBlock, class After = WholeBlock, class Passed = Nothing>
__device__ __forceinline__ void grid_barrier(unsigned* count, unsigned& target, Before before = {}, After after = {},
                                             Passed passed = {}) {
  before();
  target += gridDim.x;
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(count), "r"(1u) : "memory");
    const unsigned want = target;
    spin_or_trap([&] {
      unsigned v;
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
      return v >= want;
    });
    passed();
  }
  after();
}

}  // namespace parity::cuda
