#pragma once
// GraniteMoeHybridForCausalLM on the GPU: the network of model/hybrid_model.cpp for Granite (Mamba2
// and attention layers, each followed by the shared SwiGLU MLP plus the top-k MoE, µP
// multipliers), weights uploaded once, every step run by src/kernels_cuda. The Mamba layers are
// CudaMambaMixer (cuda_mamba_mixer.h, as CudaMamba2Model's), the final norm and lm_head CudaLmHead
// (cuda_lm_head.h), attention is kernels_cuda/attention.h over
// the device KV blocks of DeviceState, the MoE is kernels_cuda/moe.h in the Direct router-override
// pattern or kernels_cuda/moe_dense.h in the Fused one (CudaModelOptions::moe_routing; the same
// bits). Probe points copy to and from the host only when a hook asks; the router point asks for
// a replacement first, as on the CPU, and a replacement goes through the pattern's own routing.
// Everything runs on the model's own stream; pure decode passes replay CUDA graphs
// (decode_graphs.h) unless enforce_eager or a step profile is attached (step_profile.h).
#include <memory>
#include <string>
#include <vector>

#include "backend_cuda/backend.h"
#include "backend_cuda/cuda_lm_head.h"
#include "backend_cuda/cuda_mamba_mixer.h"
#include "backend_cuda/decode_graphs.h"
#include "backend_cuda/device_collective.h"
#include "backend_cuda/device_probe.h"
#include "backend_cuda/device_state.h"
#include "backend_cuda/device_weight.h"
#include "backend_cuda/host_logits.h"
#include "backend_cuda/pass_inputs.h"
#include "backend_cuda/step_profile.h"
#include "io/granite_config.h"
#include "io/hf_config.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/moe.h"
#include "kernels_cuda/attention.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/pinned_buffer.h"
#include "kernels_cuda/stream.h"
#include "model/model.h"

namespace parity::backend_cuda {

class CudaHybridModel : public model::Model {
 public:
  static std::unique_ptr<CudaHybridModel> load(const model::Checkpoint& ck, const CudaModelOptions& opt);
  // One tensor-parallel rank (cuda_tensor_parallel.h), as HybridModel::load_rank on the CPU: ck is the
  // rank's checkpoint, rank_cfg the config with the rank's widths (rank_granite_config), rank_mamba its
  // mixer shape, cache the whole model's cache spec; the weights go to rank.device, and the row-split
  // projections' partial sums (Mamba out_proj, o_proj, the experts' and the shared MLP's down
  // projections) through rank.collective (kept alive by `collective`). Its forward leaves the slots'
  // positions to the caller, which advances them once every rank is done.
  static std::unique_ptr<CudaHybridModel> load_rank(const model::Checkpoint& ck, const io::GraniteHybridConfig& rank_cfg,
                                                    const io::Mamba2Config& rank_mamba,
                                                    const cache::ModelCacheSpec& cache, DeviceRank rank,
                                                    std::shared_ptr<DeviceCollective> collective,
                                                    const CudaModelOptions& opt);
  ~CudaHybridModel() override;

  const std::string& architecture() const override { return arch_; }
  const std::string& origin() const override { return origin_; }
  int vocab_size() const override { return cfg_.vocab_size; }
  const cache::ModelCacheSpec& cache_spec() const override { return spec_; }
  std::vector<model::ProbePoint> probe_points() const override;
  void forward(const model::ForwardBatch& batch, cache::ModelCache& cache, model::ScanMode mode, float* logits,
               model::ProbeHooks* hooks = nullptr) const override;
  int default_exact_cell() const override;
  std::string exact_refusal(const kernels::ExactGrid& grid) const override { return mixer_.exact_refusal(grid); }
  const char* device() const override { return "cuda"; }
  std::optional<model::DeviceMemory> device_memory() const override { return query_device_memory(rank_.device); }
  model::HostFloats host_floats(std::size_t n) const override { return pinned_host_floats(n); }

  const CudaGraphStats& graph_stats() const { return run_->graphs.stats(); }
  void set_enforce_eager(bool eager) { enforce_eager_ = eager; }
  void set_step_profile(StepProfile* p) { profile_ = p; }
  // false: every step of a layer in its own launch, as before the fused kernels (issue 11); the same bits.
  void set_fuse_kernels(bool fuse) { fuse_ = fuse; }
  model::MoeRoutingPattern moe_routing() const { return moe_routing_; }

 private:
  struct Layer {
    bool mamba = true;
    int ordinal = 0;  // among the layers of its kind: the mixer's (and DeviceState's) Mamba layer, or KV layer
    cuda::DeviceBuffer<float> input_norm, post_norm;
    // attention (a Mamba layer's weights are mixer_'s)
    DeviceWeight q, k, v, o;
    cuda::DeviceBuffer<float> q_bias, k_bias, v_bias, o_bias;
    // feed-forward
    DeviceWeight router, shared_in, shared_out;
    cuda::DeviceBuffer<uint16_t> experts_in_bf16, experts_out_bf16;  // [E][2F][H], [E][H][F]
    cuda::DeviceBuffer<float> experts_in_f32, experts_out_f32;
  };
  struct Names {
    std::string layer, mixer, q, k, v, router, moe, shared;
  };
  // Activations and the pass's metadata (device buffers and their pinned staging), reused across
  // passes. The eager set grows to the largest pass; the graph set grows only to a larger bucket or
  // longer block tables, and then every graph is dropped (they froze its addresses).
  struct Scratch {
    cuda::DeviceBuffer<float> resid, normed, out, ffn, q, k, v, attn, logits_r, gates, gu, act, attn_scratch;
    cuda::DeviceBuffer<uint16_t> normed16, act16;  // normed's and act's bf16 copies, GEMM inputs (fused passes)
    cuda::DeviceBuffer<float> dense;  // the Fused pattern's affinities [T][E]
    cuda::DeviceBuffer<int32_t> tables, work, idx;
    cuda::PinnedBuffer<int32_t> h_tables, h_work;
    cuda::MoeWorkspace moe;
    MambaScratch mamba;
    LmHeadScratch head;
    PassInputs in;
  };
  // What forward mutates (forward is const: the engine runs one pass at a time).
  struct Run {
    cuda::Stream stream;
    Scratch eager, graph;
    int graph_rows = 0;  // the bucket the graph set is sized for
    DecodeGraphs graphs;
  };
  // Attention's view of a pass, shared by every attention layer.
  struct AttnPass {
    kernels::KvLayout layout;
    cuda::KvTables tables;
    cuda::AttnWork work;  // empty: every row by the row kernel
  };

  // Every activation of a T-row pass with R logit rows (the SSD scratch depends on the pass's cell
  // tasks: sized apart).
  void reserve(Scratch& sc, int T, int R, bool probe_head) const;
  // Embedding and every layer over the pass's T rows, into sc.resid.
  void enqueue_layers(Scratch& sc, const cuda::PassSeqs& ps, const int32_t* tokens, int T, DeviceState& ds,
                      const cuda::ScanGrid& grid, const AttnPass& ap, const DeviceProbe& probe, cudaStream_t st) const;
  void forward_eager(const model::ForwardBatch& b, cache::ModelCache& mc, DeviceState& ds, const cuda::ScanGrid& grid,
                     float* logits, model::ProbeHooks* hooks) const;
  void forward_graph(const model::ForwardBatch& b, cache::ModelCache& mc, DeviceState& ds, const cuda::ScanGrid& grid,
                     int bucket, float* logits) const;
  static std::unique_ptr<CudaHybridModel> build(const model::Checkpoint& ck, const io::GraniteHybridConfig& c,
                                                const io::Mamba2Config& mamba, const CudaModelOptions& opt);

  io::GraniteHybridConfig cfg_;
  std::string arch_ = "GraniteMoeHybridForCausalLM";
  std::string origin_;
  cache::ModelCacheSpec spec_;
  bool fp32_ = false;
  DeviceWeight embed_;  // also the tied lm_head
  CudaLmHead head_;     // model.norm, lm_head, logits_scaling
  cuda::DeviceBuffer<float> inv_freq_;
  CudaMambaMixer mixer_;  // every Mamba layer's mixer; its config is the mixer shape (empty without Mamba layers)
  std::vector<Layer> layers_;
  std::vector<Names> names_;
  std::vector<std::string> probe_names_;  // every probe point: a pass wanting any runs eagerly
  bool enforce_eager_ = false;
  bool fuse_ = true;
  model::MoeRoutingPattern moe_routing_ = model::MoeRoutingPattern::Direct;
  StepProfile* profile_ = nullptr;  // not owned; null: no timing
  DeviceRank rank_;  // size 1: the whole model on GPU 0
  std::shared_ptr<DeviceCollective> collective_;
  std::unique_ptr<Run> run_;
};

// The config of one of tp ranks: attention heads and KV heads, the experts' and the shared MLP's widths
// divided by tp (head_dim kept); the Mamba fields are left whole (the rank's mixer shape is
// cache::rank_mamba_config's). Assumes model::hybrid_tp_plan accepted the split.
io::GraniteHybridConfig rank_granite_config(const io::GraniteHybridConfig& whole, int tp);

}  // namespace parity::backend_cuda
