#pragma once
// The calling thread's current CUDA device, set for a scope and restored after it. Tensor-parallel
// ranks may live on different GPUs (rank r on GPU r % device count): everything a rank allocates,
// launches or frees must happen with its device current, whichever thread does it.
#include <cuda_runtime_api.h>

#include "kernels_cuda/cuda_check.h"

namespace parity::backend_cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cuda::cuda_check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (device != previous_) cuda::cuda_check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace parity::backend_cuda
