// A kernel that keeps the stream busy for a while: a benchmark queues it before its start event so
// that the launches it times queue up behind it, and the events then bracket the device's work
// alone (not the host's launch overhead, which a CUDA graph removes in the models' decode).
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/ptx.cuh"

namespace parity::cuda {
namespace {

__global__ void busy_wait_kernel(unsigned long long ns) {
  const unsigned long long t0 = ptx::global_timer_ns();
  while (ptx::global_timer_ns() - t0 < ns) __nanosleep(1000);
}

}  // namespace

void busy_wait(double microseconds, cudaStream_t s) {
  busy_wait_kernel<<<1, 1, 0, s>>>(static_cast<unsigned long long>(microseconds * 1000.0));
  check_launch("busy_wait");
}

}  // namespace parity::cuda
