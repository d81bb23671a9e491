#include "backend_cuda/host_logits.h"

#include <cuda_runtime_api.h>

namespace parity::backend_cuda {

model::HostFloats pinned_host_floats(std::size_t n) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, n * sizeof(float), cudaHostAllocPortable) == cudaSuccess)
    return model::HostFloats(static_cast<float*>(p), [](float* q) { cudaFreeHost(q); });
  cudaGetLastError();  // clear the failed allocation's error: the next CUDA call must not see it
  return model::HostFloats(new float[n], [](float* q) { delete[] q; });
}

}  // namespace parity::backend_cuda
