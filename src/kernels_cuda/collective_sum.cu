// The rank-ordered sum of tensor-parallel partial sums (ops.h, sum_rank_partials): each element is a
// left-to-right chain of fp32 adds over the ranks, the order model::Collective::sum_partials uses on
// the CPU, so a NCCL all-gather followed by this kernel gives what the host-staged collective gives.
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ops.h"

namespace parity::cuda {
namespace {

__global__ void sum_ranks_kernel(const float* g, int ranks, std::size_t n, float* out) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = g[i];
  for (int r = 1; r < ranks; ++r) s = __fadd_rn(s, g[static_cast<std::size_t>(r) * n + i]);
  out[i] = s;
}

}  // namespace

void sum_rank_partials(const float* gathered, int ranks, std::size_t n, float* out, cudaStream_t s) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  sum_ranks_kernel<<<blocks, 256, 0, s>>>(gathered, ranks, n, out);
  check_launch("sum_rank_partials");
}

}  // namespace parity::cuda
