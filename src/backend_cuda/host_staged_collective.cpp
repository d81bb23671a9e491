#include "backend_cuda/host_staged_collective.h"

#include "kernels_cuda/cuda_check.h"

namespace parity::backend_cuda {

HostStagedCollective::HostStagedCollective(model::Collective* host)
    : host_(host), staging_(static_cast<std::size_t>(host->size())) {}

void HostStagedCollective::sum_partials(int rank, float* partial, std::size_t n, cudaStream_t s) {
  if (n == 0) return;
  cuda::PinnedBuffer<float>& h = staging_[static_cast<std::size_t>(rank)];
  if (h.size() < n) {
    // The last call's copy back may still be reading the old buffer.
    cuda::cuda_check(cudaStreamSynchronize(s), "tensor parallel sum (staging)");
    h.resize(n);
  }
  cuda::cuda_check(cudaMemcpyAsync(h.data(), partial, n * sizeof(float), cudaMemcpyDeviceToHost, s),
                   "tensor parallel sum (to host)");
  cuda::cuda_check(cudaStreamSynchronize(s), "tensor parallel sum (to host)");
  // Meets the other ranks; the sum is model::Collective's loop, identical on every rank.
  host_->sum_partials(rank, h.data(), n);
  // Queued after this call's reads of h; the next call's copy into h is queued after it.
  cuda::cuda_check(cudaMemcpyAsync(partial, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, s),
                   "tensor parallel sum (to device)");
}

}  // namespace parity::backend_cuda
