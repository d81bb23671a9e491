#pragma once
// Mamba2ForCausalLM: the network only. Kernels do the arithmetic, the state cache holds the
// per-sequence memory, the engine decides what goes into a pass.
#include <memory>
#include <vector>

#include "cache/mamba_state_cache.h"
#include "io/hf_config.h"
#include "model/checkpoint.h"
#include "model/forward_batch.h"
#include "model/mamba2_weights.h"
#include "model/probe.h"

namespace parity::model {

class Mamba2Model {
 public:
  static std::unique_ptr<Mamba2Model> load(const Checkpoint& ck);

  const io::Mamba2Config& config() const { return cfg_; }
  int vocab_size() const { return cfg_.vocab_size; }
  int num_layers() const { return cfg_.num_hidden_layers; }
  const std::string& origin() const { return origin_; }

  // One pass over a packed batch. For every sequence, `start` must equal the slot's position
  // (the cache tracks it); afterwards the slot is at start + n. logits receives
  // logit_rows.size() × vocab floats. Throws parity::Error on an invalid batch (token out of
  // range, bad slot, position mismatch) before touching any state.
  // `hooks` (optional) sees every probe point; see probe_points().
  void forward(const ForwardBatch& batch, cache::MambaStateCache& cache, ScanMode mode, float* logits,
               ProbeHooks* hooks = nullptr) const;

  // Every probe point of this model, in forward order.
  std::vector<ProbePoint> probe_points() const;

 private:
  void validate(const ForwardBatch& b, const cache::MambaStateCache& cache) const;
  io::Mamba2Config cfg_;
  std::string origin_;
  std::shared_ptr<void> keepalive_;
  Mamba2Weights w_;
  struct LayerNames {
    std::string in_proj, conv1d, dt, norm, mixer, block;
  };
  std::vector<LayerNames> names_;
};

}  // namespace parity::model
