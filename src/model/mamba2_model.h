#pragma once
// Mamba2ForCausalLM: the network only. Kernels do the arithmetic, the state cache holds the
// per-sequence memory, the engine decides what goes into a pass.
#include <memory>
#include <vector>

#include "cache/model_cache.h"
#include "io/hf_config.h"
#include "model/checkpoint.h"
#include "model/collective.h"
#include "model/forward_batch.h"
#include "model/mamba2_weights.h"
#include "model/model.h"
#include "model/probe.h"

namespace parity::model {

// Mamba2ForCausalLM's probe points, in forward order, with Hugging Face module names (shared by
// every backend that runs the architecture).
std::vector<ProbePoint> mamba2_probe_points(const io::Mamba2Config& cfg);

class Mamba2Model : public Model {
 public:
  static std::unique_ptr<Mamba2Model> load(const Checkpoint& ck);
  // One tensor-parallel rank (model/tensor_parallel_model.h): ck is the rank's checkpoint
  // (model/rank_checkpoint.h), rank_cfg its mixer shape, cache the whole model's cache spec (the one
  // cache the ranks share; this rank uses its part). Its forward leaves the slots' positions to the
  // caller, which advances them once every rank is done.
  static std::unique_ptr<Mamba2Model> load_rank(const Checkpoint& ck, const io::Mamba2Config& rank_cfg,
                                                const cache::ModelCacheSpec& cache, TensorParallelRank tp);

  const io::Mamba2Config& config() const { return cfg_; }
  int num_layers() const { return cfg_.num_hidden_layers; }

  const std::string& architecture() const override { return arch_; }
  const std::string& origin() const override { return origin_; }
  int vocab_size() const override { return cfg_.vocab_size; }
  const cache::ModelCacheSpec& cache_spec() const override { return spec_; }
  std::vector<ProbePoint> probe_points() const override;
  void forward(const ForwardBatch& batch, cache::ModelCache& cache, ScanMode mode, float* logits,
               ProbeHooks* hooks = nullptr) const override;

 private:
  io::Mamba2Config cfg_;
  std::string arch_ = "Mamba2ForCausalLM";
  std::string origin_;
  cache::ModelCacheSpec spec_;
  TensorParallelRank tp_;
  std::shared_ptr<void> keepalive_;
  Mamba2Weights w_;
  struct LayerNames {
    std::string in_proj, conv1d, dt, norm, mixer, block;
  };
  std::vector<LayerNames> names_;

  static std::unique_ptr<Mamba2Model> build(const Checkpoint& ck, const io::Mamba2Config& cfg);
};

}  // namespace parity::model
