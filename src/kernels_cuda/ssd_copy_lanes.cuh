#pragma once
// How a block's threads split the copy of rows × `units` units of 4 floats into shared memory, for
// the prefill walks (ssd_walk.cu, ssd_span.cu): one division per kernel and none per unit. Thread →
// unit u0 of rows r0, r0 + rstep, ...; with more units than threads, units u0, u0 + T, ... of every
// row. Index arithmetic only: which thread copies what changes no value.
namespace parity::cuda::ssd {

struct Lanes {
  int u0, r0, rstep, ustep;
  bool on;
};

template <int T>
__device__ inline Lanes lanes_for(int units) {
  const int t = threadIdx.x;
  if (units <= T) {
    const int per = T / units;
    return {t % units, t / units, per, units, t < per * units};
  }
  return {t, 0, 1, T, true};
}

}  // namespace parity::cuda::ssd
