#pragma once
// The Mamba2 mixer of one layer over a packed batch, shared by every model that has Mamba2 layers
// (Mamba2ForCausalLM's backbone.layers.N.mixer, GraniteMoeHybrid's model.layers.N.mamba):
//   in_proj → [z | xBC | dt] → causal conv1d + SiLU over xBC → SSD/SSU scan with the slot's
//   recurrent state → gated RMSNorm(y, z) per group → out_proj.
// The block around it (pre-norm, residual, multipliers) belongs to the model.
#include <string>
#include <vector>

#include "cache/mamba_state_cache.h"
#include "io/hf_config.h"
#include "model/forward_batch.h"
#include "model/mamba2_weights.h"
#include "model/probe.h"

namespace parity::model {

// Probe names of the mixer's inner tensors (HF module names).
struct MixerProbeNames {
  std::string in_proj, conv1d, dt, norm;
};

// x: [T][hidden] normed input rows of batch b; out: [T][hidden]. cache_layer is this mixer's
// layer index in the MambaStateCache (the count of Mamba layers before it). Does not advance the
// slots' positions: the model does that once, after its last layer.
// in_proj_scale (FalconH1's µP ssm_multipliers, [in_proj_dim] or nullptr) multiplies in_proj's output columns
// after the in_proj probe. cfg.rms_norm false (FalconH1's mamba_rms_norm) replaces the gated norm by y ⊙ silu(z);
// names.norm is then unused.
void mamba2_mixer_forward(const io::Mamba2Config& cfg, const Mamba2LayerWeights& w, int cache_layer,
                          const ForwardBatch& b, const float* x, float* out, cache::MambaStateCache& cache,
                          ScanMode mode, const MixerProbeNames& names, ProbeHooks* hooks, const ProbeRows& meta,
                          const float* in_proj_scale = nullptr);

// The recurrent core for every sequence of the pass (mamba2_scan.cpp): y = SSD/SSU(x, dt, B, C)
// with the state kept in the cache. xbc [T][conv_dim] after SiLU, dt_raw [T][heads], y [T][I].
void mamba2_scan(const io::Mamba2Config& cfg, const Mamba2LayerWeights& w, int cache_layer,
                 const std::vector<SeqChunk>& seqs, const float* xbc, const float* dt_raw, float* y,
                 cache::MambaStateCache& cache, ScanMode mode);

}  // namespace parity::model
