#include "kernels/residual.h"

#include <algorithm>

#include "kernels/isa.h"

namespace parity::kernels {

void residual_add(float* resid, const float* x, std::size_t n) {
  // Below this a parallel region costs more than the adds (waking a thread is microseconds).
  constexpr std::size_t kBlock = std::size_t(1) << 15;
  const long blocks = static_cast<long>((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static) num_threads(num_threads()) if (blocks > 1 || force_parallel())
  for (long b = 0; b < blocks; ++b) {
    const std::size_t i0 = std::size_t(b) * kBlock, i1 = std::min(n, i0 + kBlock);
    for (std::size_t i = i0; i < i1; ++i) resid[i] += x[i];
  }
}

}  // namespace parity::kernels
