#include "model/collective.h"

#include "common/aligned.h"

namespace parity::model {

void Collective::sum_partials(int rank, float* partial, std::size_t n) {
  const int ranks = size();
  // Per thread, kept between calls: a rank's worker sums every layer of every pass.
  thread_local AlignedBuffer<float> all;
  if (all.size() < n * std::size_t(ranks)) all.resize(n * std::size_t(ranks));
  all_gather(rank, partial, n, all.data());
  for (std::size_t i = 0; i < n; ++i) {
    float s = all[i];
    for (int r = 1; r < ranks; ++r) s = s + all[std::size_t(r) * n + i];
    partial[i] = s;
  }
}

}  // namespace parity::model
