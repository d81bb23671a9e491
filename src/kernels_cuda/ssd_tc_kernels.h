#pragma once
// PROTOTYPE (issue 11): the launches ssd_tc_scan makes between the band and the replay ring (ssd_tc.cu): the
// table pass (ssd_tc_tables.cu), then one of the tensor-core walks over the cells (ssd_tc_walk.cu: a block's
// warps on one cell at a time; ssd_tc_relay.cu: a block's warps on successive cells, the state relayed).
#include "kernels_cuda/ops.h"

namespace parity::cuda {

// 32-bit words of one (cell task, head) table in the scratch after the band.
inline constexpr int kSsdTcTableWords = 292;

// Every cell task's table for every head into `tables` (p.num_cell_tasks · H · kSsdTcTableWords words,
// 16-byte aligned), from dt, A and the band.
void ssd_tc_tables(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
                   const float* A, SsdState st, const float* band, float* tables, cudaStream_t s);

// The walk with warps_p × warps_n warps a block.
void ssd_tc_walk(int warps_p, int warps_n, bool split, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p,
                 const float* xbc, int ld, const float* dt, const float* D, SsdState st, const float* tables,
                 float* y, cudaStream_t s);

// The relay with `warps` (2 or 4) warps a block of 16 columns of p, warp w taking cells w, w + warps, ...
void ssd_tc_relay(int warps, bool split, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc,
                  int ld, const float* dt, const float* D, SsdState st, const float* tables, float* y,
                  cudaStream_t s);

}  // namespace parity::cuda
