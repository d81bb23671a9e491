// The Mamba2 recurrent core on the GPU, on the grid of ops.h's ScanGrid.
//
// A cell's output row t (rows i of the cell up to t, cum_i = Σ dt·A from the cell's start):
//   y_t = (exp(cum_t) · (C_t · S_start) + Σ_{i≤t} (exp(cum_t − cum_i) · dt_i · (C_t · B_i)) · x_i) + D · x_t
// and at the cell's end   S_end = exp(cum_L) · S_start + Σ_i (exp(cum_L − cum_i) · dt_i · x_i) ⊗ B_i.
// Calls of several rows take two launches (the pipelined walk two more, its passes before it):
//   band  (ssd_band.cu)  per (rows, group), in parallel: C_t · B_{t−d} for d < cell, every pair any
//         head's cell needs (the dot products do not depend on the head or its stagger);
//   walk  (ssd_walk.cu)  per (sequence, head, tile of p): walks the call's cells in order with the
//         state on chip: each cell's output rows from its start state, then the cell's sum and the
//         fold (plain: every cell, so the state ends after the last row; exact: the cells the call
//         completes); the slot's state is written once, at the end. For batches too small to fill
//         the GPU with those blocks, the span walk (ssd_span.cu) does the same with 64 rows (several
//         cells) per step, larger blocks and the next rows prefetched; for larger ones at the default
//         grid (G = 16, N = 128), the lane walk (ssd_lanes.cu) keeps the state in registers instead,
//         automatic its pipelined form (ssd_pipe.cu: one barrier a cell, every cell's coefficients from a
//         table pass and C and B laid out by quarter by another, both before it);
// then (exact) ring (ssd_ring.cu): the call's last rows of every head's open cell into the replay ring.
// Plain mode's prefill takes the chunk scan instead (ssd_chunk.cu: vLLM's three phases at its 256-row chunks, every
// product register-tiled, between them ssd_chain.cu's chain); its sums have their own order, since plain
// mode promises its bits only across the batch (rule 1), not across schedules or builds. One-row calls
// skip them: plain mode's decode is the SSU update (ssd_ssu.cu), exact mode's the one-row
// decode (ssd_decode.cu), which computes the row, folds a completed cell and writes the ring in one
// launch for the whole batch. Every value is one fixed sequence of fp32 operations (dot products
// over n ascending, sums over rows ascending, cum as a left-to-right sum); which call, pass or tile
// a row came in changes nothing in it. The earlier three-phase kernels (ssd_deltas.cu, ssd_chain.cu,
// ssd_outputs.cu: per-cell sums, a chain that stores every cell's start state in scratch, outputs)
// compute the same sequences; ssd_prefill.h still selects them, so the tests pin that the two agree
// bit for bit and the benchmarks time them side by side.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ssd_device.cuh"
#include "kernels_cuda/ssd_prefill.h"
#include "kernels_cuda/ssd_tc.h"
#include "kernels_cuda/ssd_tile.cuh"

namespace parity::cuda {
namespace {

__global__ void dt_kernel(const float* dt_raw, int ld, int H, const float* bias, float lo, float hi, float* dt) {
  const int t = blockIdx.x;
  for (int h = threadIdx.x; h < H; h += blockDim.x)
    dt[static_cast<std::size_t>(t) * H + h] = dt_value(dt_raw[static_cast<std::size_t>(t) * ld + h], bias[h], lo, hi);
}

std::atomic<int> forced_tile{0};

}  // namespace

void ssd_force_step_tile(int rows_of_p) { forced_tile.store(rows_of_p); }

// Rows of p per block, by kernel and state dtype: plain, a 16 KB tile (kDefaultTileFloats floats
// fp32: 32 rows at N = 128; twice the rows bf16); exact, the largest tile (kMaxTileFloats: the whole
// head at N = 128), whose replay work (dt, cum, the C·B coefficients, the intra-cell sums: the same
// for every tile of a head) is then done once per head. Halved down to 16 rows while the batch gives
// fewer than 2048 blocks (a small batch then still spreads over the SMs). At most kMaxTileFloats per
// tile and one row per thread (the row's outputs). H200, batch 64 (BM_CudaDecodeSsm, session 9):
// exact G=16 fp32 47.3 -> 43.4 us (32 rows before), exact bf16 42.7 -> 30.7, plain bf16 30.3 -> 25.3;
// plain fp32 stays best at 32 rows (41.3 vs 43.1 at 64, BM_CudaDecodeSsmTile).
int ssd_step_tile(const SsdShape& sh, int seqs, bool exact, bool bf16) {
  const int most = std::min(sh.P, std::min(ssd::kStepThreads, std::max(1, ssd::kMaxTileFloats / sh.N)));
  const int forced = forced_tile.load();
  if (forced > 0) return std::min(forced, most);
  const int floats = exact ? ssd::kMaxTileFloats : bf16 ? 2 * ssd::kDefaultTileFloats : ssd::kDefaultTileFloats;
  int tp = std::min(most, std::max(1, floats / sh.N));
  while (tp > 16 && static_cast<long>(seqs) * sh.H * ((sh.P + tp - 1) / tp) < 2048) tp = (tp + 1) / 2;
  return tp;
}

void ssd_dt(const float* dt_raw, int ld, int T, int H, const float* dt_bias, float lo, float hi, float* dt,
            cudaStream_t s) {
  if (T <= 0) return;
  dt_kernel<<<T, 64, 0, s>>>(dt_raw, ld, H, dt_bias, lo, hi, dt);
  check_launch("ssd_dt");
}

bool ssd_span_supported(const SsdShape& sh, const ScanGrid& g) { return ssd::span_supported(sh, g); }
bool ssd_lanes_supported(const SsdShape& sh, const ScanGrid& g) { return ssd::lanes_supported(sh, g); }
void ssd_lanes_probe(long long* device_buffer) {
  ssd::lanes_probe(device_buffer);
  ssd::pipe_probe(device_buffer);
}
int ssd_lanes_resident(int way, const SsdShape& sh) {
  return ssd::pipe_way(way) ? ssd::pipe_resident(way) : ssd::lanes_resident(way, sh);
}
void ssd_span_probe(long long* device_buffer) { ssd::span_probe(device_buffer); }

namespace {
// Plain mode's automatic choice is the chunk scan.
SsdPrefill resolved(const ScanGrid& g, SsdPrefill which) {
  return which == SsdPrefill::automatic && !g.exact ? SsdPrefill::chunked : which;
}
std::size_t band_floats(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g) {
  return p.num_cell_tasks > 0 ? static_cast<std::size_t>(p.num_rows) * sh.groups * g.cell : 0;
}
std::size_t chain_floats(const SsdShape& sh, const PassSeqs& p) {
  return static_cast<std::size_t>(p.num_cell_tasks) * sh.H * (static_cast<std::size_t>(sh.P) * sh.N + 1);
}
// The chunk scan's CB, rounded up so the states after it stay 16-byte aligned (the chain reads them by float4).
std::size_t chunk_cb_span(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g) {
  return (ssd::chunk_cb_floats(sh, p, g) + 63) / 64 * 64;
}

std::atomic<int> pipe_auto_way{static_cast<int>(kSsdPipeDefault)};

// The pipelined walk a pass would take: the way named, or automatic's where it may take one (over-counting
// the one-sequence passes that take the span walk); 0 for none.
int pipe_way_of(const SsdShape& sh, const ScanGrid& g, SsdPrefill which) {
  const int way = static_cast<int>(which);
  if (ssd::pipe_way(way)) return way;
  return which == SsdPrefill::automatic && g.exact && ssd::lanes_preferred(sh, g) ? pipe_auto_way.load() : 0;
}
// Scratch: the band, then (16-byte aligned) 674 and 684's coefficient table, then 684's quarter rows.
std::size_t table_offset(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g) {
  return (band_floats(sh, p, g) + 3) / 4 * 4;
}
std::size_t quarter_rows_offset(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g, int way) {
  return table_offset(sh, p, g) + (ssd::pipe_pre(way) >= 1 ? ssd::pipe_table_floats(sh, p) : 0);
}
}  // namespace

SsdPrefill ssd_pipe_auto() { return static_cast<SsdPrefill>(pipe_auto_way.load()); }
void set_ssd_pipe_auto(SsdPrefill way) {
  if (way != SsdPrefill::pipe64r && way != SsdPrefill::pipe64t && way != SsdPrefill::pipe64q)
    throw Error("set_ssd_pipe_auto: " + std::to_string(static_cast<int>(way)) + " is not 664, 674 or 684");
  pipe_auto_way.store(static_cast<int>(way));
}

std::size_t ssd_scratch_floats(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g, SsdPrefill which) {
  if (which == SsdPrefill::automatic && ssd_tc_takes(sh, g, p)) return ssd_tc_scratch_floats(sh, p, g);
  which = resolved(g, which);
  if (which == SsdPrefill::three_phase) return chain_floats(sh, p);
  if (which == SsdPrefill::chunked) return chunk_cb_span(sh, p, g) + chain_floats(sh, p);
  const int pway = pipe_way_of(sh, g, which);
  const int pre = ssd::pipe_pre(pway);
  if (p.num_cell_tasks > 0 && pre >= 1)
    return quarter_rows_offset(sh, p, g, pway) + (pre == 2 ? ssd::pipe_quarter_rows_floats(sh, p) : 0);
  return band_floats(sh, p, g);
}

std::size_t ssd_scratch_floats(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g) {
  return ssd_scratch_floats(sh, p, g, SsdPrefill::automatic);
}

std::size_t ssd_scratch_floats(const SsdShape& sh, const PassSeqs& p) {
  ScanGrid any;
  any.cell = kMaxCell;
  ScanGrid exact16;  // the grid that may take the pipelined walk's table and quarter rows
  exact16.exact = true;
  exact16.cell = 16;
  return std::max(ssd_scratch_floats(sh, p, any), ssd_scratch_floats(sh, p, exact16));
}

void ssd_scan(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld_xbc, const float* dt,
              const float* A, const float* D, SsdState st, float* scratch, std::size_t scratch_floats, float* y,
              cudaStream_t s) {
  ssd_scan(sh, g, p, xbc, ld_xbc, dt, A, D, st, scratch, scratch_floats, y, s, SsdPrefill::automatic);
}

void ssd_scan(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld_xbc, const float* dt,
              const float* A, const float* D, SsdState st, float* scratch, std::size_t scratch_floats, float* y,
              cudaStream_t s, SsdPrefill which) {
  if (p.num_rows <= 0) return;
  if (g.cell < 1 || g.cell > kMaxCell)
    throw Error("CUDA SSD: the cell must be 1.." + std::to_string(kMaxCell) + " rows, got " + std::to_string(g.cell));
  if (sh.H % sh.groups != 0) throw Error("CUDA SSD: heads must divide into groups");
  if (scratch_floats < ssd_scratch_floats(sh, p, g, which))
    throw Error("CUDA SSD: scratch smaller than ssd_scratch_floats()");
  if (which == SsdPrefill::automatic && ssd_tc_takes(sh, g, p)) {  // the grid's products are bf16 or split
    ssd_tc_scan(sh, g, p, xbc, ld_xbc, dt, A, D, st, scratch, scratch_floats, y, s);
    return;
  }
  if (g.exact && g.products != kernels::ScanProducts::float32)
    throw Error("CUDA SSD: " + (which == SsdPrefill::automatic ? ssd_tc_refusal(sh, g)
                                                                : std::string("a named way forms fp32 products")) +
                " (the grid asks for the tensor-core walk's)");
  which = resolved(g, which);
  if (which == SsdPrefill::three_phase || which == SsdPrefill::chunked) {
    if (which == SsdPrefill::chunked && g.exact)
      throw Error("CUDA SSD: the chunk scan is plain mode's (its sums are not the exact grid's one fold routine)");
    float* states = which == SsdPrefill::chunked ? scratch + chunk_cb_span(sh, p, g) : scratch;
    const ssd::Scratch sc{states, states + static_cast<std::size_t>(p.num_cell_tasks) * sh.H * sh.P * sh.N};
    if (which == SsdPrefill::chunked) {
      ssd::launch_chunk_scan(sh, g, p, xbc, ld_xbc, dt, A, D, st, sc, scratch, y, s);
    } else {
      ssd::launch_deltas(sh, g, p, xbc, ld_xbc, dt, A, st, sc, s);
      ssd::launch_chain(sh, g, p, st, sc, s);
      ssd::launch_outputs(sh, g, p, xbc, ld_xbc, dt, A, D, st, sc, y, s);
    }
  } else {
    const int active = p.num_seqs - p.num_ssu_seqs - p.num_decode_seqs;
    const bool automatic = which == SsdPrefill::automatic;
    // Automatic takes the pipelined lane walk at two blocks an SM (664; since session 41 684, its coefficients and
    // C and B prepared by passes before it: ssd_pipe_auto) where the lane walk is preferred (G = 16,
    // N = 128, P % 64 == 0) from two sequences on, the span walk below: measured on an H200 at 32 heads × 64,
    // device µs, 664 against the span walk 838 / 457, 866 / 900, 870 / 1,332 at 1 / 2 / 3 sequences and
    // against the lane walk's 264 1,073 / 1,344, 2,106 / 3,232, 4,128 / 4,855 at 8 / 16 / 32 (session 11).
    // One sequence whose span walk would take more than one wave of blocks (mamba2-2.7b's 80 heads: three) takes
    // the pipelined walk too, whose 64-column blocks then still fit one wave (BM_CudaSsdPrefillHeads;
    // docs/performance.md, session 41).
    const bool pipe_auto =
        automatic && ssd::lanes_preferred(sh, g) && (active >= 2 || ssd::span_waves(sh, active) > 1);
    const bool span = which == SsdPrefill::span16 || (automatic && !pipe_auto && ssd::span_preferred(sh, g, active));
    const int way = static_cast<int>(which);
    const bool lanes = way >= static_cast<int>(SsdPrefill::lanes);  // a lane walk named (the pipelined ones below)
    const bool pipe = ssd::pipe_way(way) || (automatic && !span && ssd::lanes_preferred(sh, g));
    const int tile = automatic || which == SsdPrefill::walk || which == SsdPrefill::lanes ? 0 : way;
    ssd::launch_band(sh, g, p, xbc, ld_xbc, st, scratch, s);
    if (span) {
      ssd::launch_span(sh, g, p, xbc, ld_xbc, dt, A, D, st, scratch, y, s);
    } else if (pipe) {
      const int pway = automatic ? pipe_auto_way.load() : way;
      const int pre = ssd::pipe_pre(pway);
      float* table = pre >= 1 ? scratch + table_offset(sh, p, g) : nullptr;
      float* qrows = pre == 2 ? scratch + quarter_rows_offset(sh, p, g, pway) : nullptr;
      ssd::launch_pipe(pway, sh, g, p, xbc, ld_xbc, dt, A, D, st, scratch, table, qrows, y, s);
    }
    else if (lanes) ssd::launch_lanes(tile, active, sh, g, p, xbc, ld_xbc, dt, A, D, st, scratch, y, s);
    else ssd::launch_walk(tile, active, sh, g, p, xbc, ld_xbc, dt, A, D, st, scratch, y, s);
  }
  if (p.num_ssu_seqs > 0 || p.num_decode_seqs > 0) {
    if (sh.N % 4 != 0 || sh.N > ssd::kMaxTileFloats)
      throw Error("CUDA SSD: one-row decode needs a state size that is a multiple of 4, at most " +
                  std::to_string(ssd::kMaxTileFloats) + "; got " + std::to_string(sh.N));
    const int tp = ssd_step_tile(sh, p.num_seqs, g.exact, st.state_f32 == nullptr);
    if (p.num_ssu_seqs > 0) ssd::launch_ssu(sh, g, p, xbc, ld_xbc, dt, A, D, st, tp, y, s);
    if (p.num_decode_seqs > 0) ssd::launch_decode(sh, g, p, xbc, ld_xbc, dt, A, D, st, tp, y, s);
  }
  if (g.exact && p.num_cell_tasks > 0) {  // multi-row exact calls (every one has cell tasks)
    ssd::launch_ring(sh, g, p, xbc, ld_xbc, dt, st, s);
  }
}

}  // namespace parity::cuda
