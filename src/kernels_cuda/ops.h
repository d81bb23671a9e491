#pragma once
// The CUDA twins of src/kernels: the same jobs on device pointers, launched on a stream.
// Every kernel parallelises over independent outputs and gives each output one fixed sequence of
// fp32 operations (DESIGN.md rules 1–4): an output's bits never depend on how many rows the pass
// holds, where the row sits in it, or the launch shape. Transcendentals are kernels/math.h's.
#include <cstddef>
#include <cstdint>
#include <functional>

#include <cuda_runtime_api.h>

#include "kernels/exact_grid.h"
#include "kernels/math.h"  // PARITY_HD

namespace parity::cuda {

// ---- rows: embedding, norms, residual ------------------------------------------------------
// out[t] = table[tokens[t]] widened from bf16 (table [V][D]).
void embed_bf16(const uint16_t* table, const int32_t* tokens, int T, int D, float* out, cudaStream_t s);
// out = (x · rsqrt(mean(x²) + eps)) · w per row; out may alias x.
void rmsnorm(const float* x, int rows, int dim, const float* w, float eps, float* out, cudaStream_t s);
// A residual branch y [rows][dim] for add_rmsnorm: x + y (add_inplace), or x + y · m when scaled
// (add_scaled_inplace). y null: no add. y2 (not null): the branch is y + y2, rounded, then as above
// (add_inplace(y, y2) first: a hybrid layer's MoE and shared MLP outputs).
struct ResidualAdd {
  const float* y = nullptr;
  float mult = 1.0f;
  bool scaled = false;
  const float* y2 = nullptr;
};
// One launch for add_inplace/add_scaled_inplace(x, add.y) (when add.y is set), then rmsnorm(x) into
// out, and (out16 not null) out's bf16 copy [rows][dim], rounded to nearest even as the GEMM's
// pre-pass rounds it (gemm_rounded takes it): x, out and out16 get the bits of the unfused launches.
// out must not alias x or add.y; it may be null when out16 is not (the copy alone).
void add_rmsnorm(float* x, const ResidualAdd& add, int rows, int dim, const float* w, float eps, float* out,
                 uint16_t* out16, cudaStream_t s);
// Mamba2's gated RMSNorm per group (kernels/norm.h semantics); z has row stride ldz. out16 (not
// null): out's bf16 copy as well, as add_rmsnorm writes it (out may then be null: the copy alone).
// z_activated: z holds silu(z) already (conv1d's GateJob), so the norm's one block a row multiplies by
// it instead of evaluating the exps.
void gated_rmsnorm(const float* y, const float* z, int ldz, int rows, int dim, int group, const float* w, float eps,
                   bool norm_before_gate, float* out, cudaStream_t s, uint16_t* out16 = nullptr,
                   bool z_activated = false);
// The norms keep a thread's elements in registers for rows up to 6144 wide and loop over memory for
// wider ones (the same operations in the same order). Tests force the loop form for every width
// (true) to compare the two; false restores the default.
void norms_force_loop_form(bool loop);
void add_inplace(float* x, const float* y, std::size_t n, cudaStream_t s);
// x = x + y · m (the product rounded, then the add: a residual branch scaled by µP's multiplier).
void add_scaled_inplace(float* x, const float* y, float m, std::size_t n, cudaStream_t s);
// x = x · m and x = x / d, elementwise (embedding multiplier; logits_scaling is a divisor).
void scale_inplace(float* x, float m, std::size_t n, cudaStream_t s);
void divide_inplace(float* x, float d, std::size_t n, cudaStream_t s);
void silu_inplace(float* x, std::size_t n, cudaStream_t s);
// Zeroes, for every layer l < layers and every listed slot, the slice_bytes at
// base + l·layer_bytes + slot·slice_bytes (a new sequence's state).
void zero_slot_slices(void* base, std::size_t slice_bytes, std::size_t layer_bytes, int layers, const int32_t* slots,
                      int n, cudaStream_t s);
// out[i] = x[rows[i]] (cols floats each, row stride ld).
void gather_rows(const float* x, int ld, const int32_t* rows, int R, int cols, float* out, cudaStream_t s);

// ---- GEMM ------------------------------------------------------------------------------------
// C[M][N] = A[M][K] · W[N][K]ᵀ (+ bias), fp32 accumulation. With bf16 weights A is rounded to
// bf16 on load and the products run on tensor cores (DESIGN.md rule 5); with fp32 weights it is an
// fp32 FMA chain. Fixed 64×64 tiles, K in one ascending order, no split-K: batch invariant.
enum class WeightType { BF16, F32 };
// w_rows: rows of W that may be read (>= N; the many-rows tiles read whole tiles of them). M <= 16
// takes the few-rows kernel (gemm_skinny.cu), which streams the weights at HBM rate and gives the
// same bits.
void gemm(const float* A, int M, int K, int lda, const void* W, WeightType wt, int N, const float* bias, float* C,
          int ldc, cudaStream_t s, int w_rows = 0);
// gemm() for a caller that holds A's bf16 copy as well: a16 [M][K] (row stride K, 16-byte aligned),
// each element A's value rounded to nearest even, as a fused norm writes it beside A (add_rmsnorm,
// gated_rmsnorm). The kernels that would round A into a scratch copy first (the pre-pass launch)
// read a16 instead; the others read A, which must hold the values a16 was rounded from. The same
// bits as gemm(A, ...).
void gemm_rounded(const float* A, const uint16_t* a16, int M, int K, int lda, const void* W, WeightType wt, int N,
                  const float* bias, float* C, int ldc, cudaStream_t s, int w_rows = 0);
// Whether gemm_rounded with these arguments reads only a16, never A's fp32 values (the many-rows tiles:
// a prefill pass). The norm before it may then leave its fp32 output unwritten (add_rmsnorm's and
// gated_rmsnorm's out null), a third of the norm's bytes.
bool gemm_rounded_reads_copy_only(const float* A, const uint16_t* a16, int M, int K, int lda, const void* W,
                                  WeightType wt, int N);
// Off: gemm_rounded_reads_copy_only answers false, so the norms write their fp32 output too (benchmarks).
bool copy_only_norms();
void set_copy_only_norms(bool on);
inline int padded_rows(int n) { return (n + 15) / 16 * 16; }
// Several GEMMs in one launch (the MoE's experts): group g multiplies rows [offsets[g],
// offsets[g+1]) of A (device offsets, groups + 1 of them) by the weight at W + g·w_stride elements
// ([N][K] each) into the same rows of C, no bias. Every row gets the bits gemm() gives it (the
// same tiles; gemm's kernels agree among themselves). max_rows bounds the largest group; total_rows
// (offsets[groups], when the host knows it) lets large groups take the pipelined mma tiles.
void gemm_grouped(const float* A, int lda, const int32_t* offsets, int groups, int max_rows, int K, const void* W,
                  WeightType wt, int64_t w_stride, int N, float* C, int ldc, cudaStream_t s, int total_rows = 0);

// ---- a pass's sequences, as the kernels see them --------------------------------------------
struct PassSeqs {
  int num_seqs = 0, num_rows = 0;
  const int32_t* slot = nullptr;      // [S]
  const int64_t* start = nullptr;     // [S] absolute position of the sequence's first row in the pass
  const int32_t* n = nullptr;         // [S]
  const int32_t* row0 = nullptr;      // [S] first packed row
  const int32_t* row_seq = nullptr;   // [T]
  const int32_t* cell_task = nullptr; // [tasks][2] (seq, k-th cell of the call), built by the host
  const int32_t* task0 = nullptr;     // [S+1] the sequence's first task; its tasks are k = 0, 1, ... in order
  int num_cell_tasks = 0;
  int num_ssu_seqs = 0;               // sequences the pass updates by SSU (plain one-token decode)
  int num_decode_seqs = 0;            // one-row exact calls: the exact decode kernel, no cell tasks
  bool one_row_each = false;          // every sequence has exactly one row (a decode pass)
};

// ssd_dt's job (below), for conv1d to do in its own launch: dt [T][H] from dt_raw (row stride ld).
struct DtJob {
  const float* raw = nullptr;
  int ld = 0, H = 0;
  const float* bias = nullptr;
  float lo = 0.0f, hi = 0.0f;
  float* dt = nullptr;
};

// The gated norm's gate factors silu(z) [T][width] from z (row stride ld), for conv1d to evaluate in
// its own launch: a decode pass's gated norm runs one block a row, and its exps were most of its time
// on a step's critical path (docs/cuda.md, "A decode step's launches").
struct GateJob {
  const float* z = nullptr;
  int ld = 0, width = 0;
  float* out = nullptr;
};

// Causal depthwise conv1d over each sequence's rows, continuing from the slot's conv state
// [slots][K-1][ch] (the last K-1 inputs), which is then advanced. w [ch][K]; silu fused if asked.
// dt (not null): ssd_dt's dt for the pass's rows as well, in the same launch; gate (not null): its
// silu(z) too. A pass of one-row sequences (p.one_row_each: decode) advances the state in the same
// launch too; others take a second one. Every output has the bits of the separate launches (the same
// per-element code).
void conv1d(const float* in, int ld_in, int ch, const float* w, const float* bias, int K, float* conv_state,
            const PassSeqs& p, bool silu, float* out, cudaStream_t s, const DtJob* dt = nullptr,
            const GateJob* gate = nullptr);
// Whether a decode pass's conv launch evaluates the gated norm's silu(z) (GateJob); graphs record it.
bool gate_in_conv();
void set_gate_in_conv(bool on);
// Whether a pass of more rows than sequences runs conv1d in row tiles (a thread a channel over 16 rows;
// K = 4 only) rather than a thread a row and channel: the same bits; off for benchmarks to compare.
bool conv_row_tiles();
void set_conv_row_tiles(bool on);

// ---- SSD / SSU -------------------------------------------------------------------------------
struct SsdShape {
  int H = 0, P = 0, N = 0, groups = 1;
  PARITY_HD int heads_per_group() const { return H / groups; }
};

// The grid a pass scans on. Exact: cells of `cell` rows anchored at position 0 (per-head stagger
// as kernels/exact_grid.h). Plain: cells of `cell` rows restarting at each call's first row, every
// cell folded (the state after the call's last row), one-token decode by SSU.
struct ScanGrid {
  bool exact = false;
  int cell = 64;
  bool stagger = true;
  // Exact passes other than float32 take the tensor-core walk (ssd_tc.h), which needs its shape family.
  kernels::ScanProducts products = kernels::ScanProducts::float32;
  // A tensor-parallel rank holds heads [first_head, first_head + H) of a mixer of model_heads heads
  // (0: the whole mixer). Its heads keep the stagger offsets they have in the whole model
  // (kernels/exact_grid.h), so every TP degree scans on the same grid.
  int first_head = 0;
  int model_heads = 0;
};
inline constexpr int kMaxCell = 256;  // the SSD kernels stage a cell's dt and cumulative sums on chip

// Per-slot recurrent memory on the device.
struct SsdState {
  float* state_f32 = nullptr;      // [slots][H][P][N] (one of the two)
  uint16_t* state_bf16 = nullptr;  // bf16, rounded at every boundary
  float* ring_x = nullptr;         // exact: [slots][H][cell][P]
  float* ring_dt = nullptr;        // exact: [slots][H][cell]
  float* ring_B = nullptr;         // exact: [slots][groups][cell][N], slot = pos mod cell
};

// One dt: clamp(softplus(raw + bias), lo, hi). ssd_dt and conv1d's DtJob both compute it here.
PARITY_HD inline float dt_value(float raw, float bias, float lo, float hi) {
  const float v = kernels::softplus_f(raw + bias);
  return fminf(fmaxf(v, lo), hi);
}
// dt = dt_value(dt_raw + bias) for T rows (dt_raw row stride ld).
void ssd_dt(const float* dt_raw, int ld, int T, int H, const float* dt_bias, float lo, float hi, float* dt,
            cudaStream_t s);

// The whole recurrent core of one layer: y [T][H·P] from xbc [T][ld_xbc] (x | B | C), dt [T][H],
// A, D [H], the slots' state and (exact) replay ring. Cell tasks in p (seq, k) cover every cell of
// every multi-row sequence (host: PassPlan); one-row calls take the decode kernels (SSU in plain
// mode, the exact one-row decode in exact mode), which need N % 4 == 0. scratch holds the C·B band
// of the multi-row calls, `cell` floats per row and group, and in plain mode (the chunk scan) every
// chunk's start state, P·N + 1 floats per cell task and head, as vLLM's chunk states: at least
// ssd_scratch_floats(sh, p, g) floats (without the grid: enough for any cell), reused across layers
// and passes.
std::size_t ssd_scratch_floats(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g);
std::size_t ssd_scratch_floats(const SsdShape& sh, const PassSeqs& p);
void ssd_scan(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld_xbc,
              const float* dt, const float* A, const float* D, SsdState st, float* scratch, std::size_t scratch_floats,
              float* y, cudaStream_t s);

// Whether the pass handles sequence (start, n) by the one-token SSU update (plain mode's decode).
PARITY_HD inline bool uses_ssu(const ScanGrid& g, int64_t start, int n) { return !g.exact && n == 1 && start > 0; }
// Whether it handles it by the exact one-row decode (ssd_decode.cu): one launch for every such
// sequence of the pass, the row's output from the cell's start state and replayed rows, the fold
// when the row completes a head's cell. The three SSD phases get no cell task for it.
PARITY_HD inline bool uses_decode_row(const ScanGrid& g, int n) { return g.exact && n == 1; }

// The decode kernels (SSU, exact one-row) cover a head in tiles of rows of p; by default the tile
// is chosen from the batch size, the mode and the state dtype (launch shape only: the bits do not
// depend on it). A benchmark may force one (0 = the default); tests check that every tile gives the
// same bits.
void ssd_force_step_tile(int rows_of_p);
int ssd_step_tile(const SsdShape& sh, int seqs, bool exact, bool bf16);

// ---- tensor parallelism ----------------------------------------------------------------------
// out[i] = ((g[0][i] + g[1][i]) + g[2][i]) + … over gathered [ranks][n] (every rank's partial sum of a
// row-split projection, in rank order): model::Collective::sum_partials's rule, the same bits as the
// CPU ranks' sum. out may be any of the rows of gathered or apart from it.
void sum_rank_partials(const float* gathered, int ranks, std::size_t n, float* out, cudaStream_t s);

// ---- device ----------------------------------------------------------------------------------
int device_count();  // 0 when there is no usable device (or no driver)
// Whether the small kernels of a step (norms, conv, plain mode's SSU) launch programmatically
// after the kernel before them (programmatic_launch.cuh: their launch overlaps its tail; the same
// bits). On by default; benchmarks switch it off to compare. A model's CUDA graphs record the
// setting they were captured with.
bool programmatic_launch();
void set_programmatic_launch(bool on);
// How the decode-sized GEMMs (gemm()'s swap-AB kernels up to kSwapAbMaxRows rows, its 8-column
// decode kernel) start, as flags (issue 11). Any flag set and programmatic_launch() on: the GEMM is
// launched programmatically after the kernel before it. Their weights are no output of any kernel
// of a pass, so each block may request its own weight boxes before griddepcontrol.wait:
//   kGemmEarlyWeights: the ring's first stages' weight boxes into shared memory (A's boxes after the wait);
//   kGemmEarlyL2: the next ring's worth of the block's weight boxes into L2 (the wgmma swap-AB kernel,
//     above 16 rows);
//   kGemmEarlyRelease: once its wait has returned, the GEMM lets the next kernel be scheduled (its
//     set-up and its own early reads overlap the GEMM);
//   kGemmEarlyNorms: the norms (rmsnorm, add_rmsnorm, gated_rmsnorm) of more than 16 rows let the next
//     kernel (a GEMM) be scheduled before their own wait, so its weights may start while the kernel before
//     the norm runs;
//   kGemmEarlyNextL2: inside with_l2_prefetch, the swap-AB GEMM's blocks, once their own last boxes are
//     requested, ask L2 for their share of the weights the pass multiplies next;
//   kGemmEarlyConvState: the conv (launched after in_proj) reads the pass's metadata and its carried
//     state before its wait, so after it only in_proj's output is a round trip away;
//   kGemmMmaLag: up to 16 rows, gemm() takes the swap-AB mma.sync kernel with the decode kernel's
//     consumer schedule (mma-c32-4blk-lag: no barrier arrival or blocking wait between dependent steps).
// Every kernel still waits for the one before it before it reads what that one wrote: the same steps
// in the same order, the same bits (CudaGemmEarly tests). 0 launches them as before. A model's CUDA
// graphs record the flags they were captured with.
enum GemmEarly : unsigned {
  kGemmEarlyWeights = 1u,
  kGemmEarlyRelease = 2u,
  kGemmEarlyL2 = 4u,
  kGemmEarlyNorms = 8u,
  kGemmEarlyNextL2 = 16u,
  kGemmEarlyConvState = 32u,
  kGemmMmaLag = 64u,
};
// While `enqueue` runs on this thread, a decode-sized gemm() (the swap-AB kernels) with kGemmEarlyNextL2
// set also asks L2 for next[0, bytes) from its tail: the weights the pass multiplies next (the mixer's
// out_proj, wrapped around in_proj), so that they arrive while the small kernels between the two GEMMs
// run and the next GEMM reads them from L2. A hint: nothing is written, no bit changes. next 16-byte aligned.
void with_l2_prefetch(const void* next, std::size_t bytes, const std::function<void()>& enqueue);
// The flags set at start-up.
constexpr unsigned kGemmEarlyDefault = kGemmEarlyWeights | kGemmEarlyRelease | kGemmEarlyConvState;
unsigned gemm_early();
void set_gemm_early(unsigned flags);
// Whether exact mode's one-row decode (ssd_decode.cu) is one of them. Needs programmatic_launch();
// graphs record the mode. By mode:
//   0: an ordinary launch;
//   1: programmatic; before its wait for the conv it reads the pass's metadata and asks L2 for its
//      state tile and its head's replay rings;
//   2: programmatic, the metadata only;
//   3 (the default): 1 for passes of up to 16 sequences, 0 above (measured: a batch-1 step 3 % faster,
//      batch 64 and 256 even or slower; docs/performance.md, session 23).
inline constexpr int kProgrammaticDecodeAuto = 3;
bool programmatic_exact_decode();
void set_programmatic_exact_decode(bool on, bool l2_requests = true);  // modes 0, 1, 2
void set_programmatic_exact_decode_mode(int mode);
int programmatic_exact_decode_mode();
// The mode a one-row decode launch of `num_seqs` sequences takes now (0, 1 or 2): the auto mode resolved, 0
// while programmatic_launch() is off. ssd_decode.cu's and ssd_tc_decode.cu's launches both ask it.
int exact_decode_launch_mode(int num_seqs);
// Keeps stream s busy for about `microseconds` (benchmarks: the timed launches queue behind it).
void busy_wait(double microseconds, cudaStream_t s);

}  // namespace parity::cuda
