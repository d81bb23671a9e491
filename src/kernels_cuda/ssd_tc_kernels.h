#pragma once
// The launches ssd_tc_scan makes between the band and the replay ring (ssd_tc.cu): the
// table pass (ssd_tc_tables.cu), then the tensor-core walk over the cells (ssd_tc_walk.cu) or the relay
// (ssd_tc_relay.cu); and the one-row decode on the same steps.
#include <cstddef>
#include <cstdint>

#include "kernels_cuda/ops.h"

namespace parity::cuda {

// 32-bit words of one (cell task, head) table in the scratch after the band.
inline constexpr int kSsdTcTableWords = 292;

// Every cell task's table for every head into `tables` (p.num_cell_tasks · H · kSsdTcTableWords words,
// 16-byte aligned), from dt, A and the band. programmatic: launched after the band programmatically (ssd_tc.h's
// SsdTcWay::programmatic), waiting on the device for the band before reading it.
void ssd_tc_tables(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
                   const float* A, SsdState st, const float* band, float* tables, cudaStream_t s,
                   bool programmatic = false);

// The walk's C and B as bf16 rows, formed once by the band's launch beside its own fp32 copies (ssd_band.cu):
// every block of every head would otherwise copy the fp32 rows and convert them itself. Slot r < num_rows is
// packed row r; slot num_rows + 15·seq + j holds the ring's B row at position start − 15 + j (where a call starts
// inside a cell). A slot's parts: C head, B head (and C rest, B rest for split products), 128 values each.
inline constexpr int kSsdTcRingRows = 15;
PARITY_HD inline std::size_t ssd_tc_row16_offset(int groups, int slot, int grp, int part, bool split) {
  return ((static_cast<std::size_t>(slot) * groups + grp) * (split ? 4 : 2) + part) * 128;
}
inline std::size_t ssd_tc_rows16_floats(const SsdShape& sh, const PassSeqs& p, bool split) {
  const int slots = p.num_rows + kSsdTcRingRows * p.num_seqs;
  return ssd_tc_row16_offset(sh.groups, slots > 0 ? slots : 0, 0, 0, split) / 2;
}

// The band's dots, the tables and the bf16 rows in one launch (ssd_tc_cell_band.cu; SsdTcWay::tables = 1): what
// ssd::launch_band with rows16 and ssd_tc_tables write to tables and rows16, with the same bits; the band itself
// stays in shared memory.
void ssd_tc_cell_band(bool split, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                      const float* dt, const float* A, SsdState st, float* tables, uint16_t* rows16, cudaStream_t s);

// The walk with warps_p × warps_n warps a block; C and B from the band's bf16 rows.
void ssd_tc_walk(int warps_p, int warps_n, bool split, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p,
                 const float* xbc, int ld, const float* dt, const float* D, SsdState st, const float* tables,
                 const uint16_t* rows16, float* y, cudaStream_t s);

// The relay (ssd_tc_relay.cu): the walk's bits, with a call's cells formed in parallel (cell_warps, 1-4, cells a
// round, each with a delta warp and an output warp) and only the fold chained (by chain_warps, 1, 2 or 4, over
// n); C and B from the band's bf16 rows, as the walk's. It also writes the pass's replay ring. programmatic: launched
// after the table pass programmatically, waiting on the device for it before reading the tables or the rows.
// lean: SsdTcWay::lean's kernels (one group, 2 or 3 cell warps, 2 chain warps; other shapes throw).
void ssd_tc_relay(int cell_warps, int chain_warps, bool split, const SsdShape& sh, const ScanGrid& g,
                  const PassSeqs& p, const float* xbc, int ld, const float* dt, const float* D, SsdState st,
                  const float* tables, const uint16_t* rows16, float* y, cudaStream_t s, bool programmatic = false,
                  bool lean = false);

// The one-row sequences of a pass (exact mode's decode) on the walk's steps (ssd_tc_decode.cu).
void ssd_tc_decode(bool split, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                   const float* dt, const float* A, const float* D, SsdState st, float* y, cudaStream_t s);

}  // namespace parity::cuda
