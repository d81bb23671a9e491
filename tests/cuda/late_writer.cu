// Test kernels around a programmatic launch (late_writer.h).
#include "tests/cuda/late_writer.h"

#include <cuda_bf16.h>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/programmatic_launch.cuh"
#include "kernels_cuda/ptx.cuh"

namespace parity::test {
namespace {

__global__ void late_write_kernel(const float* src, float* a, uint16_t* a16, std::size_t n, unsigned long long ns,
                                  const unsigned* done, unsigned expect) {
  cuda::release_next_kernel();
  if (threadIdx.x == 0) {
    const unsigned long long t0 = cuda::ptx::global_timer_ns();
    unsigned long long t;
    do {
      __nanosleep(1000);
      t = cuda::ptx::global_timer_ns();
      if (done && *reinterpret_cast<const volatile unsigned*>(done) >= expect) break;
    } while (t - t0 < ns);
  }
  __syncthreads();
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) {
    a[i] = src[i];
    a16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
  }
}

__global__ void copy_without_waiting_kernel(const uint16_t* a16, uint16_t* out, std::size_t n, unsigned* done) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = a16[i];
  __syncthreads();  // every thread's loads have returned (their values are stored)
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(done, 1u);  // a count of finished blocks for late_write's handshake, not part of any result
  }
}

}  // namespace

void late_write(const float* src, float* a, uint16_t* a16, std::size_t n, double microseconds, cudaStream_t s,
                const unsigned* done, unsigned expect) {
  late_write_kernel<<<1, 1024, 0, s>>>(src, a, a16, n, static_cast<unsigned long long>(microseconds * 1000.0), done,
                                       expect);
  cuda::check_launch("late_write");
}

void copy_without_waiting(const uint16_t* a16, uint16_t* out, std::size_t n, unsigned* done, cudaStream_t s) {
  cuda::launch_programmatic_if(true, copy_without_waiting_kernel, dim3(kCopyBlocks), dim3(256), 0, s,
                               "copy_without_waiting", a16, out, n, done);
}

}  // namespace parity::test
