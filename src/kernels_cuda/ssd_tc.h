#pragma once
// PROTOTYPE (issue 11): the exact grid's SSD prefill with the cell walk's products on tensor cores.
// Not in the automatic choice, so the engine never takes it; tests and benchmarks call it by name, or through
// ssd_scan with the measurement switch below, to measure what tensor cores would buy on the exact grid and
// what they cost in accuracy (docs/cuda.md, "A tensor-core cell walk (prototype)").
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
#include <optional>

#include "kernels_cuda/ops.h"

namespace parity::cuda {

enum class SsdTcProducts {
  bf16 = 0,   // each factor rounded to bf16, one mma a product
  split = 1,  // each factor as bf16 hi + bf16 lo, three mma a product (lo·lo dropped)
};

// A block's shape: warps_p × warps_n warps for 16·warps_p columns of p of one head (P a multiple of
// 16·warps_p, else ssd_tc_scan throws); warps_n splits the
// state's n (and C·Sᵀ's four quarters of n) over 1, 2 or 4 warps. 0: the default way's. A schedule
// choice only: every way gives the same bits.
struct SsdTcWay {
  int warps_p = 0, warps_n = 0;
  SsdTcProducts products = SsdTcProducts::bf16;
};

// G = 16, N = 128, P a multiple of 16, H a multiple of groups (the prototype's only shape family).
bool ssd_tc_supported(const SsdShape& sh, const ScanGrid& g);
// The way ssd_tc_scan takes by default for this many multi-row sequences and these products.
SsdTcWay ssd_tc_default_way(const SsdShape& sh, int seqs, SsdTcProducts products);

// The scratch ssd_tc_scan needs: the band (ssd_scratch_floats) and the walk's coefficient tables.
std::size_t ssd_tc_scratch_floats(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g);

// ssd_scan for exact passes (plain mode's SSU sequences throw), with ssd_tc_scratch_floats(sh, p, g) of scratch.
// Multi-row calls take four launches (band, tables, the tensor-core walk, ring); one-row calls one more, the
// decode on the walk's steps (ssd_tc_decode.cu), so a decoded row has the bits a prefill gives it.
void ssd_tc_scan(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld_xbc, const float* dt,
                 const float* A, const float* D, SsdState st, float* scratch, std::size_t scratch_floats, float* y,
                 cudaStream_t s, SsdTcWay way = {});

// A switch for tests and benchmarks, off by default and never set by the engine. While it holds products,
// ssd_scan's automatic choice sends exact passes through ssd_tc_scan (where ssd_tc_supported), prefill and decode
// alike, and ssd_scratch_floats sizes for it. It exists to measure a whole model's logits, prefill time and
// schedule invariance with the products on tensor cores (docs/cuda.md, "A tensor-core cell walk (prototype)");
// set it before a model captures its decode graphs (they keep the kernels they captured).
void set_ssd_tc_in_scan(std::optional<SsdTcProducts> products);
std::optional<SsdTcProducts> ssd_tc_in_scan();
// Whether ssd_scan's automatic choice takes ssd_tc_scan for this pass (the switch above, and the pass fits).
bool ssd_tc_takes(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p);

}  // namespace parity::cuda
