// Test kernels around a programmatic launch (late_writer.h).
#include "tests/cuda/late_writer.h"

#include <cuda_bf16.h>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/programmatic_launch.cuh"

namespace parity::test {
namespace {

__global__ void late_write_kernel(const float* src, float* a, uint16_t* a16, std::size_t n, unsigned long long ns) {
  cuda::release_next_kernel();
  if (threadIdx.x == 0) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
      __nanosleep(1000);
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
  }
  __syncthreads();
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) {
    a[i] = src[i];
    a16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
  }
}

__global__ void copy_without_waiting_kernel(const uint16_t* a16, uint16_t* out, std::size_t n) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = a16[i];
}

}  // namespace

void late_write(const float* src, float* a, uint16_t* a16, std::size_t n, double microseconds, cudaStream_t s) {
  late_write_kernel<<<1, 1024, 0, s>>>(src, a, a16, n, static_cast<unsigned long long>(microseconds * 1000.0));
  cuda::check_launch("late_write");
}

void copy_without_waiting(const uint16_t* a16, uint16_t* out, std::size_t n, cudaStream_t s) {
  cuda::launch_programmatic_if(true, copy_without_waiting_kernel, dim3(64), dim3(256), 0, s, "copy_without_waiting",
                               a16, out, n);
}

}  // namespace parity::test
