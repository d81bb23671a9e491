#pragma once
// GraniteMoeHybridForCausalLM (Granite 4.0 "H"): Mamba2 and attention layers, each followed by a
// shared SwiGLU MLP plus an optional top-k MoE, with µP multipliers. The forward is
// docs/granite-hybrid.md, equation for equation. Exact mode concerns the Mamba layers only:
// attention (fixed key-block order, kernels/attention.h) and the MoE (per-token routing,
// M-invariant GEMMs, kernels/moe.h) give a row the same bits under any schedule by construction.
#include <memory>
#include <string>
#include <vector>

#include "io/granite_config.h"
#include "model/granite_hybrid_weights.h"
#include "model/model.h"

namespace parity::model {

class GraniteHybridModel : public Model {
 public:
  static std::unique_ptr<GraniteHybridModel> load(const Checkpoint& ck, const ModelOptions& opts = {});

  const io::GraniteHybridConfig& config() const { return cfg_; }
  MoeRoutingPattern moe_routing() const { return opts_.moe_routing; }

  const std::string& architecture() const override { return arch_; }
  const std::string& origin() const override { return origin_; }
  int vocab_size() const override { return cfg_.vocab_size; }
  const cache::ModelCacheSpec& cache_spec() const override { return spec_; }
  std::vector<ProbePoint> probe_points() const override;
  void forward(const ForwardBatch& batch, cache::ModelCache& cache, ScanMode mode, float* logits,
               ProbeHooks* hooks = nullptr) const override;

 private:
  struct LayerNames {
    std::string layer, mixer, in_proj, conv1d, dt, norm, q, k, v, router, moe, shared;
  };
  void attention(const GraniteLayerWeights& L, const LayerNames& N, const ForwardBatch& b, const float* x,
                 float* out, cache::KvCache& kv, const std::vector<int64_t>& positions, ProbeHooks* hooks,
                 const ProbeRows& meta) const;
  void feed_forward(const GraniteLayerWeights& L, const LayerNames& N, int T, const float* x, float* out,
                    ProbeHooks* hooks, const ProbeRows& meta) const;

  io::GraniteHybridConfig cfg_;
  ModelOptions opts_;
  io::Mamba2Config mamba_cfg_;  // the Mamba mixer shape (unused without Mamba layers)
  std::string arch_ = "GraniteMoeHybridForCausalLM";
  std::string origin_;
  cache::ModelCacheSpec spec_;
  std::shared_ptr<void> keepalive_;
  GraniteHybridWeights w_;
  std::vector<float> inv_freq_;  // RoPE, when use_rope
  std::vector<LayerNames> names_;
};

}  // namespace parity::model
