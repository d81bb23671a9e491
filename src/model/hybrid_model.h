#pragma once
// Every hybrid family parity runs — GraniteMoeHybridForCausalLM, NemotronHForCausalLM, BambaForCausalLM,
// FalconH1ForCausalLM — as one model over a per-layer list of blocks (io/hybrid_spec.h; each family's
// config adapter builds the list and names tensors and probe points as Hugging Face does). Equations:
// docs/hybrids.md. Exact mode concerns the Mamba blocks only: attention (fixed key-block order,
// kernels/attention.h), MLPs and MoE (per-token routing, M-invariant GEMMs, kernels/moe.h) give a row the same
// bits under any schedule by construction.
#include <memory>
#include <string>
#include <vector>

#include "io/hybrid_spec.h"
#include "model/collective.h"
#include "model/hybrid_weights.h"
#include "model/model.h"

namespace parity::model {

// The probe points of a hybrid of this spec, in forward order, with the family's Hugging Face names.
std::vector<ProbePoint> hybrid_probe_points(const io::HybridSpec& s);

class HybridModel : public Model {
 public:
  static std::unique_ptr<HybridModel> load(const Checkpoint& ck, const ModelOptions& opts = {});
  // One tensor-parallel rank (model/tensor_parallel_model.h): ck is the rank's checkpoint
  // (model/rank_checkpoint.h), rank_spec the spec with the rank's widths (model/tp_plan.h), cache the
  // whole model's cache spec (the one cache the ranks share; this rank uses its part). Its forward
  // leaves the slots' positions to the caller, which advances them once every rank is done.
  static std::unique_ptr<HybridModel> load_rank(const Checkpoint& ck, const io::HybridSpec& rank_spec,
                                                const ModelOptions& opts, const cache::ModelCacheSpec& cache,
                                                TensorParallelRank tp);

  const io::HybridSpec& spec() const { return spec_; }
  MoeRoutingPattern moe_routing() const { return opts_.moe_routing; }

  const std::string& architecture() const override { return spec_.architecture; }
  const std::string& origin() const override { return origin_; }
  int vocab_size() const override { return spec_.vocab_size; }
  const cache::ModelCacheSpec& cache_spec() const override { return cache_spec_; }
  std::vector<ProbePoint> probe_points() const override;
  void forward(const ForwardBatch& batch, cache::ModelCache& cache, ScanMode mode, float* logits,
               ProbeHooks* hooks = nullptr) const override;

 private:
  struct Pass;  // one forward's batch, cache, hooks and buffers
  void run_block(const io::Block& b, const BlockWeights& w, Pass& p, const float* x, float* out) const;
  void attention(const io::AttentionSpec& a, const AttentionWeights& w, int ordinal, Pass& p, const float* x,
                 float* out) const;
  void mlp(const io::MlpSpec& m, const MlpWeights& w, int T, const float* x, float* out) const;

  io::HybridSpec spec_;
  ModelOptions opts_;
  std::string origin_;
  cache::ModelCacheSpec cache_spec_;
  TensorParallelRank tp_;
  std::shared_ptr<void> keepalive_;
  HybridWeights w_;

  static std::unique_ptr<HybridModel> build(const Checkpoint& ck, io::HybridSpec spec, const ModelOptions& opts);
};

}  // namespace parity::model
