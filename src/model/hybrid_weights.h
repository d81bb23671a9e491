#pragma once
// The weights of a hybrid model (io/hybrid_spec.h), fetched under the names the family's adapter gives and
// checked against the spec at load: present, shaped as the spec implies, a float dtype. GEMM weights are packed
// once (each expert on its own; a split gate/up pair as one [2F, H] weight, gate rows first); small vectors are
// widened to fp32.
#include <string>
#include <vector>

#include "io/hybrid_spec.h"
#include "kernels/gemm.h"
#include "model/checkpoint.h"
#include "model/hybrid_moe.h"
#include "model/mamba2_weights.h"

namespace parity::model {

struct AttentionWeights {
  kernels::PackedWeight q, k, v, o;
  std::vector<float> q_bias, k_bias, v_bias, o_bias;  // empty unless the spec has biases
  std::vector<float> inv_freq;                        // RoPE, [rotary_dim / 2]
};

struct MlpWeights {
  kernels::PackedWeight in;   // SwiGLU: [2F, H] gate rows first; ReLU²: up [F, H]
  kernels::PackedWeight out;  // [H, F]
};

struct BlockWeights {
  int ordinal = 0;                      // Mamba / attention blocks: the place in the Mamba state / KV cache
  Mamba2LayerWeights mamba;
  std::vector<float> in_proj_scale;     // FalconH1: per in_proj column multiplier; empty elsewhere
  AttentionWeights attn;
  MlpWeights mlp;                       // MLP blocks; MoE blocks: the shared expert when the spec has one
  MoeWeights moe;
};

struct SubLayerWeights {
  std::vector<float> norm;
  std::vector<BlockWeights> blocks;
};

struct HybridWeights {
  const io::TensorView* embeddings = nullptr;  // [V, H], read in place
  std::vector<std::vector<SubLayerWeights>> layers;
  std::vector<float> final_norm;
  kernels::PackedWeight lm_head;
};

// Throws parity::Error naming the tensor on a missing tensor, a wrong shape or a non-float dtype.
HybridWeights load_hybrid_weights(const io::HybridSpec& s, const Checkpoint& ck);

// Every tensor name the spec implies (per-expert names expanded), optional biases included.
std::vector<std::string> hybrid_tensor_names(const io::HybridSpec& s);

}  // namespace parity::model
