#pragma once
// Mamba2ForCausalLM weights, named and shaped as Hugging Face stores them, checked against the
// config at load. GEMM weights are packed once; small vectors are widened to fp32.
#include <string>
#include <vector>

#include "io/hf_config.h"
#include "kernels/gemm.h"
#include "model/checkpoint.h"

namespace parity::model {

// One Mamba2 mixer (backbone.layers.N.mixer.* in Mamba2ForCausalLM, model.layers.N.mamba.* in
// GraniteMoeHybrid).
struct Mamba2LayerWeights {
  kernels::PackedWeight in_proj;    // [in_proj_dim, D]
  std::vector<float> in_proj_bias;  // empty unless use_bias
  std::vector<float> conv_taps;     // [k, conv_dim]: conv1d.weight [conv_dim, 1, k] tap-major (conv1d_taps)
  std::vector<float> conv_b;        // empty unless use_conv_bias
  std::vector<float> dt_bias;       // [H]
  std::vector<float> A;             // [H]  = -exp(A_log)
  std::vector<float> D;             // [H]
  std::vector<float> gate_norm;     // [I]  mixer.norm
  kernels::PackedWeight out_proj;   // [D, I]
  std::vector<float> out_proj_bias;
};

struct Mamba2Weights {
  const io::TensorView* embeddings = nullptr;  // [V, D], read in place (mmapped)
  std::vector<std::vector<float>> norms;  // [D] per layer: backbone.layers.N.norm
  std::vector<Mamba2LayerWeights> layers;
  std::vector<float> norm_f;
  kernels::PackedWeight lm_head;  // tied: packed from the embeddings
};

// Throws parity::Error naming the tensor on a missing tensor, a wrong shape or a non-float dtype.
Mamba2Weights load_mamba2_weights(const io::Mamba2Config& cfg, const Checkpoint& ck);

// The mixer tensors under `prefix` (e.g. "model.layers.3.mamba."), shaped by cfg.
Mamba2LayerWeights load_mamba2_mixer_weights(const io::Mamba2Config& cfg, const Checkpoint& ck,
                                             const std::string& prefix);

}  // namespace parity::model
