#pragma once
// The causal conv and dt of a decode pass done by in_proj's own blocks (issue 11: one launch fewer on
// a batch-1 step's critical path). In a pass where every sequence has one row, a conv channel's output
// needs only the slot's carried K-1 inputs, the channel's K weights and bias, and the row's in_proj
// value of that channel, which the GEMM block writing that column holds in a register: so the block
// that computes column col0 + c of in_proj also computes channel c's conv (+ SiLU) and advances its
// state, and the block of column dt_col0 + h computes head h's dt. Each channel and head has one
// owner, which reads its state before the GEMM's chain and writes it after: no other block touches it.
//
// Bits: the value the conv reads is the fp32 value the GEMM stores (the same register), and the
// per-channel arithmetic is conv1d's (conv_row.cuh's conv_held_sum: bias, then fmaf over the taps
// ascending; kernels::silu_f), dt is dt_value: the outputs, the new state and dt have the bits of
// in_proj, then conv1d with its DtJob (CudaConvEpilogue tests, CudaFusedModel end to end).
#include <cstdint>
#include <functional>

#include "kernels_cuda/ops.h"

namespace parity::cuda {

inline constexpr int kConvEpilogueTaps = 4;  // mamba2's d_conv; longer kernels take conv1d

struct ConvEpilogue {
  int col0 = 0;  // in_proj's column of conv channel 0 (xBC's first)
  int ch = 0;    // conv channels
  int K = 0;     // taps, 2..kConvEpilogueTaps
  const float* w = nullptr;     // [ch][K]
  const float* bias = nullptr;  // [ch], or null
  float* state = nullptr;       // [slots][K-1][ch], advanced by one row
  const int32_t* slot = nullptr;     // PassSeqs::slot
  const int32_t* row_seq = nullptr;  // PassSeqs::row_seq
  bool silu = true;
  float* out = nullptr;  // [rows][ch]
  int dt_col0 = 0;       // in_proj's column of head 0's raw dt
  DtJob dt;              // dt.H, dt.bias, dt.lo, dt.hi, dt.dt ([rows][H]); raw and ld unused
  // The gated norm's factors silu(z) of in_proj's columns [0, gate_width) (z), as conv1d's GateJob
  // evaluates them in the conv's launch: [rows][gate_width], or null (the norm evaluates them).
  float* gate = nullptr;
  int gate_width = 0;
};

// While `enqueue` runs on this thread, a gemm() that takes the swap-AB mma.sync kernel for up to 8 rows
// (gemm_swap_ab.cu) does `job` in its epilogue. Returns whether one did: when false the caller runs
// conv1d as before. Only for passes of one row per sequence, rows = the pass's rows. conv_epilogue()
// off: never taken.
bool with_conv_epilogue(const ConvEpilogue& job, const std::function<void()>& enqueue);
// Off by default: on the H200 (session 12, BM_CudaDecodeParts gemmfuse 0 against 1, same call) it made a
// batch-1 plain step slower (2.79 -> 2.87 ms) and an exact one faster (3.26 -> 3.17). Tests and benchmarks
// switch it on to compare (a model's graphs record it).
inline constexpr bool kConvEpilogueDefault = false;
bool conv_epilogue();
void set_conv_epilogue(bool on);
// Whether that epilogue also evaluates the gated norm's factors (ConvEpilogue::gate, where gate_in_conv()
// is on). Off: with the grouped consumer below, 0.8 % faster in exact mode and 8 % slower in plain mode at
// batch 1 on the H100 (session 34, BM_CudaDecodeParts gemmfuse 29 against 4). Graphs record it.
inline constexpr bool kGateInEpilogueDefault = false;
bool gate_in_epilogue();
void set_gate_in_epilogue(bool on);
// Whether the conv epilogue's GEMM runs the grouped consumer (gemm_swap_ab_group.cuh) the decode GEMMs
// take without it, instead of the box-by-box one it was written with. Off (session 34: see above).
// Graphs record it.
bool conv_epilogue_grouped();
void set_conv_epilogue_grouped(bool on);

}  // namespace parity::cuda
