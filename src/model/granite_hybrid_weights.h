#pragma once
// GraniteMoeHybridForCausalLM weights under the names real checkpoints store (docs/granite-hybrid.md,
// "Names"), checked against the config at load: present, shaped as the config implies, a float
// dtype. GEMM weights are packed once (each expert's slice of input_linear / output_linear on
// its own); small vectors are widened to fp32.
#include <vector>

#include "io/granite_config.h"
#include "kernels/gemm.h"
#include "model/checkpoint.h"
#include "model/mamba2_weights.h"

namespace parity::model {

struct GraniteAttentionWeights {  // model.layers.N.self_attn.*
  kernels::PackedWeight q, k, v, o;
  std::vector<float> q_bias, k_bias, v_bias, o_bias;  // empty unless attention_bias
};

struct GraniteMoeWeights {  // model.layers.N.block_sparse_moe.*
  kernels::PackedWeight router;              // router.layer.weight [E, H]
  std::vector<kernels::PackedWeight> w_in;   // input_linear.weight[e]  [2F, H] (gate rows first)
  std::vector<kernels::PackedWeight> w_out;  // output_linear.weight[e] [H, F]
};

struct GraniteMlpWeights {  // model.layers.N.shared_mlp.*
  kernels::PackedWeight in;   // input_linear.weight [2S, H] (gate rows first)
  kernels::PackedWeight out;  // output_linear.weight [H, S]
};

struct GraniteLayerWeights {
  io::GraniteLayerType kind = io::GraniteLayerType::Mamba;
  int ordinal = 0;  // index among the layers of its kind: its place in the Mamba or KV cache
  std::vector<float> input_norm, post_norm;
  Mamba2LayerWeights mamba;       // Mamba layers
  GraniteAttentionWeights attn;   // attention layers
  GraniteMoeWeights moe;          // when num_local_experts > 0
  GraniteMlpWeights shared;
};

struct GraniteHybridWeights {
  const io::TensorView* embeddings = nullptr;  // [V, H], read in place
  std::vector<GraniteLayerWeights> layers;
  std::vector<float> norm;  // model.norm
  kernels::PackedWeight lm_head;
};

// Throws parity::Error naming the tensor on a missing tensor, a wrong shape or a non-float dtype.
GraniteHybridWeights load_granite_hybrid_weights(const io::GraniteHybridConfig& cfg, const Checkpoint& ck);

// Every tensor name the config implies, in checkpoint order (export, tests).
std::vector<std::string> granite_hybrid_tensor_names(const io::GraniteHybridConfig& cfg);

}  // namespace parity::model
