#pragma once
// Mamba2ForCausalLM on the GPU: the network of model/mamba2_model.cpp, with weights uploaded once
// and every step run by src/kernels_cuda on the model's own stream. Same Model interface, so the
// engine, the exactness gate and the accuracy tools run it unchanged; probe points copy to and from
// the host only when a hook asks for them. Pure decode passes replay CUDA graphs (decode_graphs.h)
// unless CudaModelOptions::enforce_eager or a step profile is attached (step_profile.h).
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
#include "io/hf_config.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/pinned_buffer.h"
#include "kernels_cuda/stream.h"
#include "model/model.h"

namespace parity::backend_cuda {

class CudaMamba2Model : public model::Model {
 public:
  static std::unique_ptr<CudaMamba2Model> load(const model::Checkpoint& ck, const CudaModelOptions& opt);
  // One tensor-parallel rank (cuda_tensor_parallel.h), as Mamba2Model::load_rank on the CPU: ck is the
  // rank's checkpoint, rank_cfg its mixer shape, cache the whole model's cache spec; the weights go to
  // rank.device, out_proj's partial sums through rank.collective (kept alive by `collective`). Its
  // forward leaves the slots' positions to the caller, which advances them once every rank is done.
  static std::unique_ptr<CudaMamba2Model> load_rank(const model::Checkpoint& ck, const io::Mamba2Config& rank_cfg,
                                                    const cache::ModelCacheSpec& cache, DeviceRank rank,
                                                    std::shared_ptr<DeviceCollective> collective,
                                                    const CudaModelOptions& opt);
  ~CudaMamba2Model() override;

  const std::string& architecture() const override { return arch_; }
  const std::string& origin() const override { return origin_; }
  int vocab_size() const override { return cfg_.vocab_size; }
  const cache::ModelCacheSpec& cache_spec() const override { return spec_; }
  std::vector<model::ProbePoint> probe_points() const override;
  void forward(const model::ForwardBatch& batch, cache::ModelCache& cache, model::ScanMode mode, float* logits,
               model::ProbeHooks* hooks = nullptr) const override;
  int default_exact_cell() const override { return kCudaDefaultExactCell; }
  std::string exact_refusal(const kernels::ExactGrid& grid) const override { return mixer_.exact_refusal(grid); }
  const char* device() const override { return "cuda"; }
  std::optional<model::DeviceMemory> device_memory() const override { return query_device_memory(rank_.device); }
  model::HostFloats host_floats(std::size_t n) const override { return pinned_host_floats(n); }

  const CudaGraphStats& graph_stats() const { return run_->graphs.stats(); }
  void set_enforce_eager(bool eager) { enforce_eager_ = eager; }
  void set_step_profile(StepProfile* p) { profile_ = p; }
  // false: every step of a layer in its own launch, as before the fused kernels (issue 11); the same bits.
  void set_fuse_kernels(bool fuse) { fuse_ = fuse; }
  // decode_graphs.h's DecodeSkip bits (benchmarks only: the logits are garbage with any set).
  void set_decode_skip(unsigned skip) { skip_ = skip; }

 private:
  // Activations and the pass's metadata (device buffers and their pinned staging), reused across
  // passes. The eager set grows to the largest pass; the graph set grows only to a larger bucket,
  // and then every graph is dropped (they froze its addresses).
  struct Scratch {
    cuda::DeviceBuffer<float> resid, normed, out;
    cuda::DeviceBuffer<uint16_t> normed16;  // normed's bf16 copy, in_proj's input (fused passes)
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
    // The persistent decode step (kernels_cuda/persistent_decode.h): its layer table for the cache
    // state it was made for, or why that state's shape cannot take it, and its grid barrier's counter.
    cuda::DeviceBuffer<cuda::PersistentMambaLayer> persistent_table;
    bool persistent_made = false;
    uint64_t persistent_state = 0;  // DeviceState::id of the table
    std::string persistent_unfit;   // empty: the step runs that shape
    cuda::DeviceBuffer<unsigned> persistent_barrier;
  };

  // Every activation of a T-row pass with R logit rows (the SSD scratch depends on the pass's cell
  // tasks: sized apart).
  void reserve(Scratch& sc, int T, int R, bool probe_head) const;
  // Embedding and every layer over the pass's T rows, into sc.resid.
  void enqueue_layers(Scratch& sc, const cuda::PassSeqs& ps, const int32_t* tokens, int T, DeviceState& ds,
                      const cuda::ScanGrid& grid, const DeviceProbe& probe, cudaStream_t st) const;
  void forward_eager(const model::ForwardBatch& b, DeviceState& ds, const cuda::ScanGrid& grid, float* logits,
                     model::ProbeHooks* hooks) const;
  void forward_graph(const model::ForwardBatch& b, DeviceState& ds, const cuda::ScanGrid& grid, int bucket,
                     float* logits) const;
  // Whether a batch-1 decode pass on ds in this grid takes the persistent step: switched on
  // (cuda::set_persistent_decode), one rank, bf16 weights, the fused launches, nothing skipped, a shape
  // it runs (plain or exact). Makes the step's layer table for ds on first use.
  bool takes_persistent(DeviceState& ds, const cuda::ScanGrid& grid) const;
  // The embedding of the pass's one token and every layer as one persistent kernel, into sc.resid.
  void enqueue_persistent(Scratch& sc, const cuda::PassSeqs& ps, const cuda::ScanGrid& grid, const int32_t* tokens,
                          const DeviceState& ds, cudaStream_t st) const;
  cuda::PersistentDecodeShape persistent_shape(const DeviceState& ds) const;
  static std::unique_ptr<CudaMamba2Model> build(const model::Checkpoint& ck, const io::Mamba2Config& c,
                                                const CudaModelOptions& opt);

  io::Mamba2Config cfg_;
  std::string arch_ = "Mamba2ForCausalLM";
  std::string origin_;
  cache::ModelCacheSpec spec_;
  DeviceWeight embed_;  // [V][D], also the tied lm_head
  CudaLmHead head_;    // norm_f, lm_head
  std::vector<cuda::DeviceBuffer<float>> norms_;  // each layer's pre-norm [D]
  CudaMambaMixer mixer_;
  struct Names {
    std::string mixer, block;
  };
  std::vector<Names> names_;
  std::vector<std::string> probe_names_;  // every probe point: a pass wanting any runs eagerly
  bool enforce_eager_ = false;
  bool fuse_ = true;
  unsigned skip_ = 0;
  StepProfile* profile_ = nullptr;  // not owned; null: no timing
  DeviceRank rank_;  // size 1: the whole model on GPU 0
  std::shared_ptr<DeviceCollective> collective_;
  std::unique_ptr<Run> run_;
};

}  // namespace parity::backend_cuda
