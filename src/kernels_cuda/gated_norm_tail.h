#pragma once
// A decode pass's gated RMSNorm run by plain mode's SSU launch (issue 11: one launch fewer on a decode
// step's critical path, between the SSM step and out_proj). Every block of a sequence counts itself
// done on that sequence's counter; the last one runs the norm over the sequence's row with 256 threads,
// gated_rmsnorm's held form (norm_row.cuh: the same thread owns the same elements, the same block_sum
// tree), and sets the counter back to zero for the next pass. So out and out16 get gated_rmsnorm's bits
// (CudaFusedModel.GatedNormInTheSsuLaunchGivesTheLogitsOfItsOwnLaunch). The counter is a count, not a
// reduction: the values are summed in one block in a fixed order (DESIGN rule 5's "no atomics in a
// reduction" holds).
#include <cstdint>
#include <functional>

#include "kernels_cuda/gated_a.h"

namespace parity::cuda {

struct GatedNormTail {
  GatedA a;        // y, z (rows of ldz), w, group, eps, norm_before_gate, z_activated, as gated_rmsnorm takes them
  int ldz = 0;
  int dim = 0;     // the row's width: a multiple of group (one held norm a group, in group order)
  float* out = nullptr;
  std::uint16_t* out16 = nullptr;  // null: fp32 only
  int* counts = nullptr;           // [sequences of the pass], zero between passes
};

// Runs enqueue (which calls ssd_scan) with the job on this thread. The SSU launch takes it when every
// sequence of the pass is one plain SSU row, the group is within the held form (norm_row::kHeldMaxWidth)
// and the switch is on; returns whether it did (else the caller launches gated_rmsnorm).
bool with_gated_norm_tail(const GatedNormTail& job, const std::function<void()>& enqueue);
// Off by default until measured faster on a device (a model's graphs record it).
inline constexpr bool kGatedNormTailDefault = false;
bool gated_norm_tail();
void set_gated_norm_tail(bool on);

}  // namespace parity::cuda
