#pragma once
// A kernel that needs more than 48 KB of dynamic shared memory must raise its limit first. The
// attribute is per device and costs host time on every call, so it is set once per (kernel,
// device) and then only when a larger size is asked for (the decode step's host side stays a
// launch and nothing else).
#include <cstddef>
#include <map>
#include <mutex>
#include <utility>

#include <cuda_runtime_api.h>

#include "kernels_cuda/cuda_check.h"

namespace parity::cuda {

template <class Kernel>
void ensure_smem(Kernel* kernel, std::size_t bytes, const char* what) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, std::size_t> done;
  int dev = 0;
  cuda_check(cudaGetDevice(&dev), what);
  const std::lock_guard<std::mutex> lock(mu);
  std::size_t& have = done[{reinterpret_cast<const void*>(kernel), dev}];
  if (have >= bytes && have > 0) return;
  cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), what);
  cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100), what);
  have = bytes;
}

}  // namespace parity::cuda
