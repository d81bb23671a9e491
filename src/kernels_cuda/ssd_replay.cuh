#pragma once
// Exact mode's one-row decode in two launches (the default; ssd_decode.cu's one-kernel form stays
// selectable, ssd_prefill.h's SsdDecode):
//   replay (ssd_replay.cu)       per (sequence, group, chunk of heads): everything the row needs that
//                                does not depend on the state. The C·B dots once per group (every
//                                head of a group shares B and C), then per head its cell's cum, the
//                                coefficients and the intra-cell sums Σ_i coef_i·x_i[p], written to
//                                a record in scratch; the row goes into the replay ring.
//   state  (ssd_decode_state.cu) per (sequence, p-tile, head), launched so that it starts while the
//                                replay runs (programmatic dependent launch): the state tile's copy
//                                first, then the record, the dots C·S and the output; a head whose
//                                cell ends at this row folds it.
// Each value is the same sequence of fp32 operations as in ssd_decode.cu (hence as in prefill): the
// split moves where a value is computed, never how. A record holds fp32 values, stored and read
// back unchanged.
#include <cstddef>

#include "kernels_cuda/ops.h"

namespace parity::cuda::ssd {

// One (sequence, head) record: [0] cum_j of the row; [4, 4 + P) the intra-cell sums by p; then, for
// a head that folds at this row, its cell's fold weights w_i = row_weight(cum_j, cum_i, dt_i), i < L.
__host__ __device__ inline std::size_t replay_record_floats(int P, int cell) {
  return 4 + static_cast<std::size_t>(P + 3) / 4 * 4 + static_cast<std::size_t>(cell + 3) / 4 * 4;
}
__host__ __device__ inline std::size_t replay_intra_at() { return 4; }
__host__ __device__ inline std::size_t replay_w_at(int P) { return 4 + static_cast<std::size_t>(P + 3) / 4 * 4; }
// Scratch floats the records of a pass take (one per sequence and head; 0 without one-row calls).
inline std::size_t replay_floats(const SsdShape& sh, const PassSeqs& p, int cell) {
  return p.num_decode_seqs > 0 ? static_cast<std::size_t>(p.num_seqs) * sh.H * replay_record_floats(sh.P, cell) : 0;
}

// The replay launch; the state launch after it (pdl: with programmatic dependent launch, so its
// blocks start while the replay runs and wait for it where they first need a record).
void launch_replay(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                   const float* dt, const float* A, const SsdState& st, float* records, cudaStream_t s);
void launch_decode_state(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                         const float* D, const SsdState& st, const float* records, int tp, bool pdl, float* y,
                         cudaStream_t s);

}  // namespace parity::cuda::ssd
