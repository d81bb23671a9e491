// See device_compare.h. One pass counts differing elements and keeps the smallest differing index
// (atomics here only tally a test's verdict; they are no part of any computed result).
#include "tests/cuda/device_compare.h"

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/device_buffer.h"

namespace parity::test {
namespace {

__global__ void compare_kernel(const std::uint32_t* a, const std::uint32_t* b, std::size_t n,
                               unsigned long long* out) {
  unsigned long long count = 0, first = ~0ull;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    if (a[i] != b[i]) {
      ++count;
      if (i < first) first = i;
    }
  if (count) {
    atomicAdd(&out[0], count);
    atomicMin(&out[1], first);
  }
}

}  // namespace

std::string device_bit_difference(const float* a, const float* b, std::size_t n, std::size_t cols) {
  cuda::DeviceBuffer<unsigned long long> out(2);
  const unsigned long long init[2] = {0, ~0ull};
  cuda::cuda_check(cudaMemcpy(out.data(), init, sizeof init, cudaMemcpyHostToDevice), "compare init");
  compare_kernel<<<1024, 256>>>(reinterpret_cast<const std::uint32_t*>(a), reinterpret_cast<const std::uint32_t*>(b), n,
                                out.data());
  cuda::check_launch("compare_kernel");
  unsigned long long r[2];
  cuda::cuda_check(cudaMemcpy(r, out.data(), sizeof r, cudaMemcpyDeviceToHost), "compare result");
  if (r[0] == 0) return "";
  float va = 0, vb = 0;
  cuda::cuda_check(cudaMemcpy(&va, a + r[1], 4, cudaMemcpyDeviceToHost), "compare value");
  cuda::cuda_check(cudaMemcpy(&vb, b + r[1], 4, cudaMemcpyDeviceToHost), "compare value");
  std::uint32_t ba = 0, bb = 0;
  std::memcpy(&ba, &va, 4);
  std::memcpy(&bb, &vb, 4);
  char buf[224];
  std::snprintf(buf, sizeof buf, "%llu of %zu differ; first at %llu (row %llu, column %llu): %.9g vs %.9g (0x%08x vs 0x%08x)",
                r[0], n, r[1], cols ? r[1] / cols : 0ull, cols ? r[1] % cols : r[1], double(va), double(vb), ba, bb);
  return buf;
}

}  // namespace parity::test
