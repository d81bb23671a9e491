#pragma once
// Programmatic dependent launch (Hopper) for the small kernels of a decode step (issue 11): a kernel
// launched this way may be scheduled while the kernel before it on the stream is still running, and
// waits on the device (wait_for_prior_kernel) until that kernel has completed and its writes are
// visible. What it reads before the wait must not come from the kernels still running: only the
// pass's metadata, weights and state written by earlier passes. The bits cannot change: every kernel
// computes what it did, only the gap between launches shrinks. set_programmatic_launch(false) (ops.h)
// launches them the ordinary way; the device-side calls are then no-ops.
#include <cstddef>

#include <cuda_runtime.h>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/early_start.h"
#include "kernels_cuda/ops.h"

namespace parity::cuda {

// Blocks until the kernel before this one (when this one was launched programmatically) has
// completed and its memory is visible.
__device__ __forceinline__ void wait_for_prior_kernel() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
// Lets the next kernel, when it is launched programmatically, be scheduled now: once every block of
// this kernel has called it (or exited). The next kernel still waits for this one's completion
// before it reads what this one writes.
__device__ __forceinline__ void release_next_kernel() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// wait_for_prior_kernel() and release_next_kernel(), in that order, or the release first: the next
// kernel may then be scheduled while the one before this is still running (it still cannot read
// what this one writes before this one has completed, and this one completes only after its wait).
__device__ __forceinline__ void wait_and_release(bool release_first) {
  if (release_first) release_next_kernel();
  wait_for_prior_kernel();
  if (!release_first) release_next_kernel();
}

// kernel<<<grid, block, smem, s>>>(args...), programmatically after the kernel before it when
// `programmatic`. The kernel must call wait_for_prior_kernel() before it reads what the kernels
// before it write, or writes anything they read.
template <typename... Params, typename... Args>
void launch_programmatic_if(bool programmatic, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
                            cudaStream_t s, const char* what, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic ? 1 : 0;
  cuda_check(cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...), what);
}

// launch_programmatic_if(programmatic_launch(), ...): the small kernels' launch.
template <typename... Params, typename... Args>
void launch_after_prior(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t s,
                        const char* what, Args... args) {
  launch_programmatic_if(programmatic_launch(), kernel, grid, block, smem, s, what, args...);
}

// The flags a decode GEMM launched now runs with (ops.h's GemmEarly): gemm_early() while
// programmatic_launch() is on, else 0 (an ordinary launch, main's order of requests).
inline unsigned gemm_early_flags() { return programmatic_launch() ? gemm_early() : 0u; }

}  // namespace parity::cuda
