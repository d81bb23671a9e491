#pragma once
// Decode steps replayed as CUDA graphs, captured per batch-size bucket (issue 11; vLLM's CUDA
// graphs). A pure decode pass of B sequences is padded to the smallest bucket >= B (1, 2, 4, ...,
// kMaxGraphBatch: powers of two, so at most 9 graphs per numerics and padding is at most B − 1
// rows of cheap work: the padding rows all read one scratch slot). The first pass of a bucket
// records the whole forward (embedding to logits) into a graph; later passes copy their inputs into
// the same device buffers and replay it with one launch.
//
// Why the bits do not change: every kernel gives a row a function of its own row, its own
// sequence's state and the weights (DESIGN.md rules 1–3: batch-invariant GEMM, row-wise norms,
// per-sequence conv and scan, per-row attention, per-token MoE), so adding padding rows changes
// no real row; the padding rows read and write only the scratch slot and scratch KV block
// (device_state.h), which no sequence uses, and their logits are never copied out.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "kernels_cuda/conv_epilogue.h"
#include "kernels_cuda/graph.h"
#include "kernels_cuda/pass_plan.h"
#include "model/forward_batch.h"
#include "model/model.h"
#include "model/probe.h"

namespace parity::backend_cuda {

inline constexpr int kMaxGraphBatch = 256;

// The smallest bucket holding `batch` sequences (1, 2, 4, ..., 256); 0 when batch is 0 or above
// kMaxGraphBatch (the pass runs eagerly).
int graph_bucket(int batch);

// Every sequence has one row at a position > 0: plain mode runs SSU for all of them, exact mode
// the one-row decode kernel (whichever heads fold, the launch is the same), and no slot starts from
// zero, so the pass's launch shapes are a function of its batch size alone. (A first token at position 0 is a one-token prefill: eager.)
bool is_pure_decode(const model::ForwardBatch& b);

// Whether hooks want any of the points: a probe copies to the host mid-pass, which a graph cannot.
bool any_probe_wanted(const model::ProbeHooks* hooks, const std::vector<std::string>& points);

// The pass padded to `bucket` sequences: the real ones first (packed row i is sequence i, so
// logit rows keep their meaning), then padding sequences of one row, token 0, at position 1 in
// the scratch slot.
struct PaddedDecode {
  std::vector<cuda::SeqSpan> spans;
  std::vector<int32_t> tokens;
};
PaddedDecode pad_decode(const model::ForwardBatch& b, int bucket, int scratch_slot);

// What a graph's launch shapes depend on besides the buffers' addresses.
struct GraphKey {
  int bucket = 0;
  bool exact = false;
  int cell = 0;
  bool stagger = false;
  int cell_tasks = 0;  // the SSD phases' grid (none in a pure decode pass: one-row calls take the decode kernels)
  int kv_stride = 0;   // hybrids: the block tables' row length
  bool fuse = true;    // the model's fused launches (set_fuse_kernels) or the unfused ones
  bool programmatic = true;  // cuda::programmatic_launch() when captured
  unsigned gemm_early = 0;   // cuda::gemm_early() when captured (the decode GEMMs' early start)
  int programmatic_decode = 0;  // cuda::programmatic_exact_decode_mode() when captured
  bool conv_epilogue = false;   // cuda::conv_epilogue() when captured (in_proj doing a decode pass's conv)
  bool gated_out = false;       // cuda::gated_out_proj() when captured (out_proj doing a row's gated norm)
  bool gate_in_conv = true;     // cuda::gate_in_conv() when captured (the conv evaluating the gate's silu)
  unsigned skip = 0;            // the launches left out (set_decode_skip: benchmarks only)
  int persistent = 0;  // the layers as one persistent kernel (cuda::persistent_decode()'s mode; batch 1)
  // conv_epilogue.h's switches when captured: its gate factors, its grouped consumer
  bool gate_in_epilogue = cuda::gate_in_epilogue();
  bool conv_grouped = cuda::conv_epilogue_grouped();
  bool operator<(const GraphKey& o) const {
    return std::tie(bucket, exact, cell, stagger, cell_tasks, kv_stride, fuse, programmatic, gemm_early,
                    programmatic_decode, conv_epilogue, gated_out, gate_in_conv, skip, persistent, gate_in_epilogue,
                    conv_grouped) <
           std::tie(o.bucket, o.exact, o.cell, o.stagger, o.cell_tasks, o.kv_stride, o.fuse, o.programmatic,
                    o.gemm_early, o.programmatic_decode, o.conv_epilogue, o.gated_out, o.gate_in_conv, o.skip,
                    o.persistent, o.gate_in_epilogue, o.conv_grouped);
  }
};

// What every graph of a model froze besides its weights: the cache's device state, the size of
// the graph buffers, and the addresses of those that can move (inputs, SSD scratch, block tables).
// When any changes, every graph is dropped and recaptured.
struct GraphEpoch {
  uint64_t state_id = 0;
  int rows = 0;
  std::array<const void*, 4> buffers{};
  bool operator==(const GraphEpoch&) const = default;
};

struct CudaGraphStats {
  int64_t captures = 0;      // graphs recorded and instantiated
  int64_t replays = 0;       // passes run by a graph launch
  int64_t eager_passes = 0;  // passes launched kernel by kernel
  int64_t persistent_replays = 0;  // replays of a graph whose layers are the persistent decode step
};

class DecodeGraphs {
 public:
  // The graph for (epoch, key), recorded from what `enqueue` queues on s the first time (nothing
  // runs while recording; the caller launches the graph).
  const cuda::GraphExec& get(const GraphEpoch& epoch, const GraphKey& key, cudaStream_t s,
                             const std::function<void()>& enqueue);
  void note_eager() { ++stats_.eager_passes; }
  void note_replay() { ++stats_.replays; }
  void note_persistent() { ++stats_.persistent_replays; }
  const CudaGraphStats& stats() const { return stats_; }

 private:
  GraphEpoch epoch_;
  std::map<GraphKey, cuda::GraphExec> graphs_;
  CudaGraphStats stats_;
};

// logits (host, output order) ← rows of dev [rows][V], one async copy per run of consecutive rows.
void copy_logit_rows(const float* dev, int V, const std::vector<int>& rows, float* host, cudaStream_t s);

// For tests and benchmarks (defined in backend.cpp; m must be a CUDA model): the graph counters,
// and graphs switched off (true, as --enforce-eager) or back on at run time.
CudaGraphStats cuda_graph_stats(const model::Model& m);
void set_enforce_eager(model::Model& m, bool eager);
// Fused launches (issue 11: the residual add in the next norm, the GEMMs' bf16 inputs written by the
// norms, dt in the conv's launch) on (true, the default) or off: the same bits either way.
void set_fuse_kernels(model::Model& m, bool fuse);

// Benchmarks only (BM_CudaDecodeParts): a Mamba2 model's passes leave these launches out (bits of
// DecodeSkip), so that a step's time with and without each kernel gives what that kernel adds to the
// step's critical path once the rest overlaps it. Any bit set makes the logits garbage. 0: every launch.
enum DecodeSkip : unsigned {
  kSkipNorm = 1u,        // the layer's add_rmsnorm
  kSkipInProj = 2u,      // in_proj
  kSkipConv = 4u,        // the conv (with dt and the conv state's advance)
  kSkipSsm = 8u,         // the SSM step (plain mode's SSU, exact mode's decode kernel)
  kSkipGatedNorm = 16u,  // the gated RMSNorm
  kSkipOutProj = 32u,    // out_proj
  kSkipHead = 64u,       // the final norm and lm_head
};
void set_decode_skip(model::Model& m, unsigned skip);

}  // namespace parity::backend_cuda
