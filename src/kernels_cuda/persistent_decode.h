#pragma once
// A batch-1 decode step of a Mamba2 model as one persistent kernel (issue 11's decode target:
// within 1.3x of the weights' read time; the chain of launches costs 1.21x with nothing computed,
// docs/performance.md "Session 24"). One cooperative launch, one block an SM, walks the layers:
//   1. every block adds the residual and normalises the whole row itself (the same per-element code
//      and block_sum tree as add_rmsnorm), into its own bf16 copy of in_proj's input;
//   2. in_proj: each block owns a run of 16-column tasks, its weights streamed through a ring of bulk
//      copies, k16 tensor-core steps ascending into one accumulator (the GEMM's bits), the owner of a
//      conv channel or a head's dt column doing the conv and dt in its epilogue (conv_row.cuh);
//      grid barrier;
//   3. the SSM step: a head per block, plain mode's SSU (ssu_tile.cuh) or exact mode's one-row decode
//      with its replay rows and fold (ssd_decode_tile.cuh), the launches' code; grid barrier;
//   4. every block runs the gated norm of the whole row (norm_row.cuh) into out_proj's bf16 input,
//      then its out_proj tasks; grid barrier.
// The producer warp asks for the next GEMM's first ring of weights as soon as the ring is free, so
// the weights stream while the norms and the SSM step run. After the last layer, block 0 writes the
// residual row; the final norm and lm_head stay launches of their own.
// Bits: each value is computed by the code the launches run, in the same order: a batch-1 decode
// through this step gives the logits of the chain of launches bit for bit (CudaPersistentDecode
// tests). One sequence, bf16 weights, one rank, plain or exact mode; anything else takes the launches.
#include <cstdint>
#include <string>

#include <cuda.h>  // CUtensorMap
#include <cuda_runtime_api.h>

#include "kernels_cuda/ops.h"

namespace parity::cuda {

// One Mamba2 block as the step reads it (device pointers), with the tensor maps its blocks stream the two
// GEMMs' weights through: [0] for a block of the fewer tasks, [1] the more (persistent_layer_maps).
struct PersistentMambaLayer {
  CUtensorMap in_maps[2], out_maps[2];
  const float* norm_w = nullptr;    // the block's RMSNorm before the mixer [hidden]
  const uint16_t* in_w = nullptr;   // in_proj [proj][hidden], bf16
  const float* in_b = nullptr;      // [proj] or null
  const float* conv_w = nullptr;    // [conv][K]
  const float* conv_b = nullptr;    // [conv] or null
  float* conv_state = nullptr;      // [slots][K-1][conv]
  const float* dt_bias = nullptr;   // [H]
  const float* A = nullptr;         // -exp(A_log) [H]
  const float* D = nullptr;         // [H]
  SsdState ssd;                     // the layer's state, fp32 or bf16
  const float* gate_w = nullptr;    // the gated norm's weight [I]
  const uint16_t* out_w = nullptr;  // out_proj [hidden][I], bf16
  const float* out_b = nullptr;     // [hidden] or null
};

struct PersistentDecodeShape {
  int layers = 0, hidden = 0, heads = 0, head_dim = 0, state = 0, groups = 1, conv_kernel = 0;
  float eps = 0.0f, dt_lo = 0.0f, dt_hi = 0.0f;  // layer_norm_epsilon, the time-step limits
  bool norm_before_gate = false;
  bool bf16_state = false;
  bool exact = false;  // exact mode's one-row decode (its cell of `cell` rows) instead of plain's SSU
  int cell = 0;
  PARITY_HD int inner() const { return heads * head_dim; }
  PARITY_HD int conv() const { return inner() + 2 * groups * state; }
  PARITY_HD int proj() const { return inner() + conv() + heads; }
};

struct PersistentDecode {
  PersistentDecodeShape shape;
  const PersistentMambaLayer* layers = nullptr;  // device, [layers]
  PassSeqs ps;     // one sequence of one row: its slot and position, and row_seq for the conv's state
  ScanGrid grid;   // the pass's grid (exact: the cell and the heads' stagger)
  float* resid = nullptr;  // [hidden]: the embedded row in, the residual stream after the last layer out
  float *zx = nullptr, *xbc = nullptr, *dt = nullptr, *y = nullptr, *out = nullptr;  // [proj] [conv] [H] [I] [hidden]
  unsigned* barrier = nullptr;  // one device unsigned, zeroed by the launcher
  bool next_l2 = false;         // kPersistentNextL2's L2 requests
  bool small_l2 = false;        // kPersistentSmallL2
  bool weights_evict_first = false;  // kPersistentEvictFirst
  // kPersistentTrace: each block's thread 0 writes the clock at the step's kTracePoints points a layer,
  // [layer][point][block] (ns); null otherwise.
  unsigned long long* trace = nullptr;
};

// Encodes l's tensor maps from l.in_w and l.out_w for this shape on the current device: boxes of 64
// values of K by the 16-column tasks a block owns (the blocks split a GEMM's tasks in contiguous runs of
// two lengths).
void persistent_layer_maps(PersistentMambaLayer& l, const PersistentDecodeShape& s);
// Empty when the step can run this shape on the current device; otherwise why not (the caller then
// takes the launches).
std::string persistent_decode_unfit(const PersistentDecodeShape& s);
// Queues the step on s (a memset of the barrier and one cooperative launch; capturable into a graph).
void persistent_decode_step(const PersistentDecode& job, cudaStream_t s);

// Whether batch-1 decode passes take the step: kPersistentOff (the launches), kPersistentRing,
// kPersistentNextL2 (also asks L2 for the rest of out_proj's weights during the SSM step, and for the
// next layer's first ring of in_proj weights once out_proj's are all requested: DRAM stays busy while
// out_proj's chain runs and across the layer boundary). Off by default until measured
// on the H200 (written in a session without a device: docs/cuda.md, "A persistent decode step"); tests
// and benchmarks switch it on (a model's graphs record the mode).
enum PersistentMode : int { kPersistentOff = 0, kPersistentRing = 1, kPersistentNextL2 = 2 };
inline constexpr int kPersistentDecodeDefault = kPersistentOff;
// Or'd into a mode (benchmarks only): the step also records where its time goes (PersistentTrace);
// kPersistentSmallL2: each block asks L2 (to keep) for its share of the layer's SSM state and small
// parameters before the weights' copies queue ahead of them, and for the next layer's norm weights
// during out_proj; kPersistentEvictFirst: the weights' copies ask L2 to evict them first.
inline constexpr int kPersistentTrace = 8;
inline constexpr int kPersistentSmallL2 = 16;
inline constexpr int kPersistentEvictFirst = 32;
inline constexpr int kPersistentFlags = kPersistentTrace | kPersistentSmallL2 | kPersistentEvictFirst;
// The mode without its flags.
inline int persistent_mode_of(int mode) { return mode & ~kPersistentFlags; }
int persistent_decode();
void set_persistent_decode(int mode);

// The traced steps' phases, in µs a layer: the mean over layers and blocks of each phase's length, and
// the mean over layers of its span (the first block in to the last block out). Phases: the residual add and norm,
// in_proj, the first barrier, the SSM step, the second barrier, the gated norm, out_proj, the third
// barrier. persistent_trace_buffer() is the device buffer a traced step writes (grown when a pass first
// takes a traced step, outside its capture); persistent_trace_read() reads the last step's.
inline constexpr int kTracePoints = 9;
unsigned long long* persistent_trace_buffer(int layers);
struct PersistentTrace {
  double mean_us[kTracePoints - 1] = {}, slowest_us[kTracePoints - 1] = {};
};
PersistentTrace persistent_trace_read(int layers);

}  // namespace parity::cuda
