#pragma once
// What tensor-parallel ranks exchange during a forward (docs/tensor-parallel.md). Every call is made by
// every rank, in the same order, with the same n; a call returns on a rank once that rank's result is
// ready. The CPU ranks' implementation is in_process_collective.h; GPU ranks would implement the same
// calls with NCCL (ncclAllGather, ncclBroadcast on each rank's stream), the seam this interface leaves.
#include <cstddef>

#include "common/error.h"

namespace parity::model {

// What a rank throws when a peer failed (Collective implementations' abort): the peer's own error is
// the one to report.
struct CollectiveAborted : Error {
  CollectiveAborted() : Error("tensor parallelism: another rank failed during this pass") {}
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int size() const = 0;

  // out [size() · n] = [rank 0's mine | rank 1's mine | …] on every rank.
  virtual void all_gather(int rank, const float* mine, std::size_t n, float* out) = 0;
  // Rank 0's data [n] is copied into every other rank's data.
  virtual void broadcast(int rank, float* data, std::size_t n) = 0;

  // The "sum" of a row-split projection: every rank's partial [n] becomes ((p0 + p1) + p2) + … on
  // every rank. An all-gather followed by a local add in rank order, never an all-reduce, so the bits
  // depend only on the partials (not on timing or a library's reduction algorithm): exact mode holds.
  virtual void sum_partials(int rank, float* partial, std::size_t n);
};

// One rank's place in its group, as the layers of a rank's model see it. size 1 (no collective): the
// whole model on one rank, and sum() does nothing.
struct TensorParallelRank {
  int rank = 0;
  int size = 1;
  Collective* collective = nullptr;
  void sum(float* partial, std::size_t n) const {
    if (size > 1) collective->sum_partials(rank, partial, n);
  }
};

}  // namespace parity::model
