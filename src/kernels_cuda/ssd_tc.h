#pragma once
// The exact grid's SSD with the cell walk's products on tensor cores: what ssd_scan runs for exact passes whose
// grid asks for bf16 or split products (ScanGrid::products, from --scan-products; docs/cuda.md, "A tensor-core
// cell walk"). Tests and benchmarks also call it by name.
//
// It computes ssd_scan's function (the same cells, stagger, dt, D skip, fold and state dtype, the
// same fp32 band, cum, coefficients and decay bits) but forms the three products of a 16-row cell with
// mma.sync m16n8k16 (fp32 accumulation) instead of fp32 FMA chains:
//   Y_inter = C · S_startᵀ,  Y_intra = (coef) · X,  delta = (w∘X)ᵀ · B,
// with the operands rounded to bf16 (vLLM's chunk scan does the same) or split into two bf16 parts
// each (hi + lo; three products: hi·hi + lo·hi + hi·lo, about 16 significant bits a factor). The
// state stays fp32 in registers; the fold is fold_element(decay, S, delta) as in every other path.
// Its bits differ from ssd_scan's (the products' rounding and accumulation order), so exact mode's
// promise holds only where every path takes these same steps: one-row calls take the decode on them
// (ssd_tc_decode.cu).
#include <cstddef>
#include <string>

#include "kernels_cuda/ops.h"

namespace parity::cuda {

// The products come from the grid (g.products): bfloat16, each factor rounded to bf16, one mma a product; split,
// each factor as bf16 hi + bf16 lo, three mma a product (lo·lo dropped). float32 is not this walk's: it throws.
using kernels::ScanProducts;

// A block's shape: warps_p × warps_n warps for 16·warps_p columns of p of one head (P a multiple of
// 16·warps_p, else ssd_tc_scan throws); warps_n splits the
// state's n (and C·Sᵀ's four quarters of n) over 1, 2 or 4 warps. 0: the default way's. cell_warps > 0
// takes the relay instead (ssd_tc_relay.cu: cell_warps cells a round formed in parallel, chain_warps warps
// chaining the fold over n; 16 columns of p a block, warps_p and warps_n unused); a way that names warps_p takes
// the walk. A schedule choice only: every way gives the same bits.
// programmatic: 1 the table pass and the relay launch programmatically (programmatic_launch.cuh) after the launch
// before them, the band letting the table pass be scheduled at its start; 2 the band too, after the kernel before
// the pass (it waits at its start, then lets the table pass be scheduled). Each waits on the device before it reads
// what the one before it writes. Only the gaps between the launches change, never a value (session 53: written and
// run on an H100: level 2 70.8 µs against 73.8 at 1 × 2048, even at 8 × 2048; the walk's launches, and with
// tables = 1 the one launch before the relay, stay ordinary). kSsdTcProcessLevel (the default) takes the process's
// level (set_ssd_tc_programmatic below: 2 unless set). Other values throw.
constexpr int kSsdTcProcessLevel = -1;
struct SsdTcWay {
  int warps_p = 0, warps_n = 0, cell_warps = 0, chain_warps = 0;
  int programmatic = kSsdTcProcessLevel;
  // How the band's dots and the tables are formed before the walk or the relay (the same bits either way): 0 two
  // launches, the band then the table pass (the default, what has run on GPUs); 1 one launch, a block a (cell
  // task, group) holding its dots in shared memory (ssd_tc_cell_band.cu; session 53, H100: 72.4-73.0 µs against
  // 73.6-74.4 at 1 × 2048, 258 against 248 at 8 × 2048). Other values throw.
  int tables = 0;
  // The relay's instructions a round (ssd_tc_relay.cu's kLean; the same bits): 0 as run since session 51 (the
  // default); 1 whole cells' tile copies at a constant step, each warp's buffers from its round and slot, the chain's
  // deltas read without a select (session 54, H100: 9 % fewer instructions in the relay, the same time, 71.6-71.9
  // against 71.1-71.3 µs at 1 × 2048; the relay waits, it does not issue). Only for one group at the relay's
  // default shapes (2 or 3 cell warps, 2 chain warps); elsewhere it throws. Other values throw.
  int lean = 0;
};

// G = 16, N = 128, P a multiple of 16, H a multiple of groups (the walk's only shape family).
bool ssd_tc_supported(const SsdShape& sh, const ScanGrid& g);
// Why a model of this shape cannot scan with these products on this grid; empty when it can. The model checks
// it before its first pass, so exact mode refuses an unsupported choice at start-up (DESIGN.md rule 7).
std::string ssd_tc_refusal(const SsdShape& sh, const ScanGrid& g);
// The way ssd_tc_scan takes by default for this many multi-row sequences and these products.
SsdTcWay ssd_tc_default_way(const SsdShape& sh, int seqs, ScanProducts products);

// The scratch ssd_tc_scan needs, whatever its way: the band (ssd_scratch_floats), the walk's coefficient tables and
// the bf16 rows of C and B (ssd_tc_kernels.h).
std::size_t ssd_tc_scratch_floats(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g);

// ssd_scan for exact passes (plain mode's SSU sequences throw), with ssd_tc_scratch_floats(sh, p, g) of scratch.
// Multi-row calls take four launches (band, tables, the tensor-core walk or the relay, ring; way.tables 1 forms the
// band and the tables in one); one-row calls one more, the decode on the walk's steps (ssd_tc_decode.cu), so a
// decoded row has the bits a prefill gives it.
void ssd_tc_scan(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld_xbc, const float* dt,
                 const float* A, const float* D, SsdState st, float* scratch, std::size_t scratch_floats, float* y,
                 cudaStream_t s, SsdTcWay way = {});

// The programmatic level (SsdTcWay::programmatic's 0-2) of every pass whose way does not name one: how the model's
// passes, which take the default way through ssd_scan, get theirs. kSsdTcProgrammaticDefault unless set, and taken
// only while programmatic_launch() (ops.h) is on, else 0, so the switch that turns the small kernels' programmatic
// launches off turns these off too. PARITY_CUDA_TC_LAUNCH=ordinary|programmatic|programmatic-band (0, 1, 2; read
// when a CUDA model loads, backend.cpp) sets it for the process. 2 since session 54 (H100, on the legacy stream the
// tests and benches launch on: 71.2-71.5 µs at 1 × 2048 against ordinary launches' 73.4-73.9, 8 × 2048 even; every
// GPU test and verify passed).
constexpr int kSsdTcProgrammaticDefault = 2;
void set_ssd_tc_programmatic(int level);
int ssd_tc_programmatic();

// Whether ssd_scan's automatic choice takes ssd_tc_scan for this pass: an exact grid with bf16 or split products.
bool ssd_tc_takes(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p);

}  // namespace parity::cuda
