#pragma once
// The Mamba2 mixer on the GPU, as every CUDA model runs it (CudaMamba2Model's layers, CudaHybridModel's
// Mamba layers; the GPU twin of model/mamba2_mixer.h):
//   in_proj → [z | xBC | dt] → causal conv1d + SiLU over xBC → dt (bias, softplus, clamp) → the SSD scan
//   with the slot's state (exact mode's grid or plain chunks; one-row calls by the decode kernels) →
//   gated RMSNorm(y, z) per group → out_proj (a tensor-parallel rank's partial, then the ranks' sum).
// with the CPU mixer's probe points in_proj, conv1d, dt and norm. The block around it (pre-norm, the
// mixer-output probe, residual, multipliers) belongs to the model. One copy, so that a fix to the
// mixer lands in both models.
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend_cuda/device_collective.h"
#include "backend_cuda/device_probe.h"
#include "backend_cuda/device_state.h"
#include "backend_cuda/device_weight.h"
#include "backend_cuda/step_profile.h"
#include "io/hf_config.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/persistent_decode.h"
#include "model/checkpoint.h"
#include "model/mamba2_mixer.h"
#include "model/probe.h"

namespace parity::backend_cuda {

// Scan cell of the GPU: exact mode's default (chosen by measurement, docs/performance.md "CUDA")
// and plain mode's chunk, which restarts at each call like vLLM's chunk_size grid.
inline constexpr int kCudaDefaultExactCell = 16;
inline constexpr int kCudaPlainCell = cuda::kMaxCell;

// The mixer's activations for a pass, reused by every mixer layer and every pass (they only grow).
struct MambaScratch {
  cuda::DeviceBuffer<float> zx, xbc, dt, y, g;
  cuda::DeviceBuffer<float> gate;  // silu(z) from the conv's launch (decode passes: cuda::gate_in_conv)
  cuda::DeviceBuffer<uint16_t> g16;  // g's bf16 copy for out_proj (fused passes)
  cuda::DeviceBuffer<float> scan;  // the SSD's scratch, sized per pass from its cell tasks
};

// What a mixer layer needs of the pass it runs in (the same for every layer of the pass).
struct MambaPass {
  DeviceState& ds;
  const cuda::PassSeqs& ps;
  const cuda::ScanGrid& grid;
  const DeviceRank& rank;  // size 1: out_proj is whole, nothing to sum
  const DeviceProbe& probe;
  StepProfile* profile;  // null: no timing
  MambaScratch& sc;
  cudaStream_t st;
  // Fused launches (issue 11): dt in the conv's launch, out_proj's bf16 input written by the gated
  // norm. false: every step in its own launch (the reference the fused path is tested against).
  bool fuse = true;
  unsigned skip = 0;  // decode_graphs.h's DecodeSkip bits: launches left out (benchmarks only)
};

// A model's Mamba2 mixer layers: one shape (a tensor-parallel rank's: its heads and groups), weights
// per layer. Layer i is also DeviceState's Mamba layer i.
class CudaMambaMixer {
 public:
  CudaMambaMixer() = default;  // a model without Mamba layers
  CudaMambaMixer(const io::Mamba2Config& cfg, bool fp32) : cfg_(cfg), fp32_(fp32) {}

  // Uploads the next layer from ck: prefix names its tensors and probe points ("backbone.layers.3.mixer.",
  // "model.layers.3.mamba."). Throws parity::Error naming a missing or misshapen tensor.
  void add_layer(const model::Checkpoint& ck, const std::string& prefix);

  const io::Mamba2Config& config() const { return cfg_; }
  // Layer `layer`'s inner probe points (in_proj, conv1d, dt, norm), in the order enqueue visits them.
  std::vector<model::ProbePoint> probe_points(int layer) const;
  cuda::SsdShape shape() const { return {cfg_.num_heads, cfg_.head_dim, cfg_.state_size, cfg_.n_groups}; }
  // Model::exact_refusal for the mixer's scan: products other than fp32 take the tensor-core walk (its shape
  // family only) and go with bf16 GEMM inputs (--dtype float32 is the accuracy path: fp32 products).
  std::string exact_refusal(const kernels::ExactGrid& grid) const;
  // The activations of a T-row pass; the scan's scratch for the pass's cell tasks (sized apart: it
  // depends on the pass's plan, not only on T).
  void reserve(MambaScratch& sc, int T) const;
  void reserve_scan(MambaScratch& sc, const cuda::PassSeqs& ps, const cuda::ScanGrid& grid) const;

  // Layer `layer` over the pass's T rows: x [T][hidden] (the block's normed input) → out [T][hidden],
  // the mixer's output before the residual, summed over the tensor-parallel ranks. x16: x's bf16 copy
  // (add_rmsnorm's out16) for in_proj to read, or null. Leaves the profile in StepPart::MambaGemm: the
  // caller marks what comes next.
  void enqueue(int layer, const float* x, const uint16_t* x16, int T, float* out, const MambaPass& p) const;
  // Whether enqueue's in_proj reads only x16 for a pass of T rows (gemm_reads_copy_only), so the norm
  // before it may leave x unwritten.
  bool in_proj_reads_copy_only(int layer, const float* x, const uint16_t* x16, int T) const;

  // Layer `layer` as the persistent decode step reads it (its weights and ds's state of the layer; the
  // block's norm weight is the model's). Only for bf16 weights (bf16_weights()).
  cuda::PersistentMambaLayer persistent_layer(int layer, DeviceState& ds) const;
  bool bf16_weights() const { return !fp32_; }

 private:
  struct Layer {
    DeviceWeight in_proj, out_proj;
    cuda::DeviceBuffer<float> in_proj_bias, out_proj_bias, conv_w, conv_b, dt_bias, A, D, gate_norm;
    model::MixerProbeNames names;
  };
  io::Mamba2Config cfg_;
  bool fp32_ = false;
  std::vector<Layer> layers_;
};

}  // namespace parity::backend_cuda
