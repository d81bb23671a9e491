#pragma once
// PROTOTYPE (issue 11): the tensor-core cell walk (ssd_tc_walk.cu), which ssd_tc_scan launches between the
// band and the replay ring.
#include "kernels_cuda/ops.h"

namespace parity::cuda {

// 32-bit words of one (cell task, head) table in the scratch after the band.
inline constexpr int kSsdTcTableWords = 292;

// The table pass, then the walk with warps_p × warps_n warps a block; `tables` holds
// p.num_cell_tasks · H · kSsdTcTableWords words (16-byte aligned).
void ssd_tc_walk(int warps_p, int warps_n, bool split, const SsdShape& sh, const ScanGrid& g,
                 const PassSeqs& p, const float* xbc, int ld, const float* dt, const float* A, const float* D,
                 SsdState st, const float* band, float* tables, float* y, cudaStream_t s);

}  // namespace parity::cuda
