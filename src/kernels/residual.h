#pragma once
// The residual stream's add. One operation per element, so any split over threads gives the same
// bits; a prefill's add (rows × hidden floats a layer) is split over the threads, where left to the
// calling thread it kept the others waiting at the next parallel region.
#include <cstddef>

namespace parity::kernels {

// resid[i] += x[i] for i < n.
void residual_add(float* resid, const float* x, std::size_t n);

}  // namespace parity::kernels
