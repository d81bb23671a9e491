#pragma once
// Which implementation of the scan's multi-row part ssd_scan runs. Every choice computes each output
// and state with the same sequence of fp32 operations (the bits do not depend on it); they differ in
// speed and scratch. The default is the fused walk with its tile chosen by size; the tests and the
// benchmarks name each one to pin that they agree and to time them side by side.
#include <cstddef>

#include "kernels_cuda/ops.h"

namespace parity::cuda {

enum class SsdPrefill {
  automatic = 0,  // plain mode: the chunk scan (chunked, below). Exact mode: at G = 16, N = 128, P % 64 == 0
                  // the span walk for one sequence and the pipelined lane walk (ssd_pipe_auto()'s shape) from two on;
                  // elsewhere the span walk for a batch too small for the walk's blocks to fill the GPU,
                  // else the fused walk with its tile chosen by size
  walk = 1,       // the fused walk with its tile chosen from the batch's size (automatic's choice past
                  // the span walk's batches; the benchmarks time it beside the span walk)
  walk16 = 16,    // the fused walk (ssd_band.cu, ssd_walk.cu), 16, 32 or 64 columns of p per block
  walk32 = 32,
  walk64 = 64,
  span16 = 116,   // the span walk (ssd_band.cu, ssd_span.cu): K = 64 / G cells per step, 16 columns of p
                  // per block, rows copied by the TMA unit where 16-byte aligned (else cp.async);
                  // N % 4 == 0, N <= 128, G = 16, 32 or 64 (else it throws)
  lanes = 200,    // the lane walk (ssd_band.cu, ssd_lanes.cu): the state in registers, one block per
                  // (sequence, head, tile of p), its shape chosen by size; N % 4 == 0, N <= 128,
                  // G <= 16 (else it throws)
  lanes32 = 232,  // the lane walk's shapes: 32 or 64 columns of p a block, two a lane;
  lanes64 = 264,
  lanes64r = 464,   // 64 columns, two a lane, two blocks an SM (more registers a thread than 264's three)
  lanes1x16 = 316,  // 16 or 32 columns of p a block, one a lane (twice the lanes, half the work each)
  lanes1x32 = 332,
  pipe64 = 564,   // the pipelined lane walk (ssd_band.cu, ssd_pipe.cu): the lane walk's lanes with one barrier
                  // a cell, the coefficients a cell ahead, C and B copied by quarter, the quarter sums and the
                  // fold in one loop; 64 columns of p a block, three blocks an SM (168 registers)
  pipe64r = 664,  // the same, two blocks an SM (up to 255 registers)
  pipe64t = 674,  // 664 with every cell's coefficients formed by a pass before the walk (a table in scratch)
                  // and copied with the cell's rows
  pipe64q = 684,  // 674 with C and B of every row laid out by quarter by a pass before the walk (scratch), so a
                  // whole cell's are two contiguous blocks of 16-byte copies instead of 4-byte ones
  three_phase = -1,  // the earlier deltas / chain / outputs kernels, which store every cell's start state
  chunked = 300,     // plain mode only (it throws in exact mode): the chunk scan (ssd_chunk.cu), vLLM's three
                     // phases at its 256-row chunks with register-tiled products (CB, the chunks' deltas, the
                     // chain, the outputs). Automatic's choice in plain mode. Its sums run in their own order, so
                     // its bits are not the walks' (plain mode promises none across schedules); a row still
                     // depends only on its own chunk's rows and start state.
};

// The pipelined lane walk automatic takes (664, 674 or 684; set_ssd_pipe_auto throws for another). The
// same bits each way; a switch for the benchmarks to time them side by side. 684: on an H100 (session 41,
// one call) the walk alone 1,077 → 995 µs at 8 × 2048 and 4,150 → 3,757 at 32 × 2048 (32 heads), mamba2-2.7b's
// exact prefill of 8 × 2048 tokens 379 → 356 ms (674: 361).
inline constexpr SsdPrefill kSsdPipeDefault = SsdPrefill::pipe64q;
SsdPrefill ssd_pipe_auto();
void set_ssd_pipe_auto(SsdPrefill way);

// The exact one-row decode can ask L2 for the state tile (and x ring) of the block `ahead` head slots
// later in its launch, so that blocks not yet resident find their state there. Not measured yet, so
// off by default (0); a benchmark or test may force a distance (> 0) or one resident set ahead (< 0:
// the launch's resident blocks over its sequence·tile columns). A hint only: no value depends on it.
void ssd_force_step_prefetch(int ahead);

// The exact one-row decode's schedule (ssd_decode.cu's flags): 0 = the default for the state dtype, else
// 100 + flags (kDots2 8, kFoldQuad 512, kRingLate 1024; the sets ssd_decode.cu's kernel_of builds: 100,
// session 9's, and 1644, the default; another falls back to the default). Benchmarks and tests: every way
// gives the same bits.
void ssd_force_decode_way(int way);
// Benchmarks only: extra bytes of shared memory per exact decode block (fewer blocks an SM), to see how
// the step's time follows the blocks resident.
void ssd_force_decode_smem_pad(int bytes);
// Benchmarks only: where the exact decode writes 10 values per block (blockIdx.y · gridDim.x +
// blockIdx.x; ssd_decode.cu's kProbeValues: globaltimer at start and end, clock64 cycles from its
// start to each step, smid | fold << 16 | j << 20, tile rows), or nullptr (the default).
void ssd_decode_probe(unsigned long long* device_buffer);

// Whether the span walk takes this shape and grid.
bool ssd_span_supported(const SsdShape& sh, const ScanGrid& g);
// Whether the lane walk takes this shape and grid.
bool ssd_lanes_supported(const SsdShape& sh, const ScanGrid& g);

// Benchmarks only: where the span walk's first block writes the clock cycles of its steps (24 values:
// wait for copies, cum and coefficients, deltas, fold, outputs, end barrier, next copies, as thread 0
// sees them; the span count; each warp's own outputs step), or nullptr (the default: nothing written).
void ssd_span_probe(long long* device_buffer);

// Benchmarks only: the lane walk's probe (6 values: thread 0 of the first block's clock cycles summed
// over its cells in each step: wait, quarters and coefficients, next copies, outputs, delta and fold;
// the cell count), or nullptr; and how many of its blocks of one shape (232, 264, 464, 316, 332) an SM holds.
// The pipelined walk's shapes (564, 664) write the same probe with their own steps: wait, next copies
// issued, next cell's coefficients, quarter sums and fold, exchange and outputs.
void ssd_lanes_probe(long long* device_buffer);
int ssd_lanes_resident(int way, const SsdShape& sh);

// Scratch in floats that ssd_scan needs with this implementation on this grid.
std::size_t ssd_scratch_floats(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g, SsdPrefill which);

void ssd_scan(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld_xbc,
              const float* dt, const float* A, const float* D, SsdState st, float* scratch, std::size_t scratch_floats,
              float* y, cudaStream_t s, SsdPrefill which);

}  // namespace parity::cuda
