#pragma once
// GraniteMoeHybridForCausalLM (IBM Granite 4.0 "H" models) config.json, parsed explicitly: every field that
// changes the computation is read, anything parity cannot run is refused with an error naming the field.
// The forward equations are in docs/granite-hybrid.md.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/hf_config.h"

namespace parity::io {

enum class GraniteLayerType { Mamba, Attention };

const char* to_string(GraniteLayerType t);  // "mamba" / "attention"

struct GraniteHybridConfig {
  int vocab_size = 0;
  int hidden_size = 0;
  int num_hidden_layers = 0;
  // One entry per layer. config.json spells them "mamba"/"attention" or "linear_attention"/"full_attention",
  // under `layer_types` (or the older `layers_block_type`); absent means every layer is Mamba, as in HF.
  std::vector<GraniteLayerType> layer_types;

  // Attention layers (fields are 0 when the model has none and config.json does not give them).
  int num_attention_heads = 0;
  int num_key_value_heads = 0;  // GQA: query head h reads key/value head h / (heads / kv_heads)
  int head_dim = 0;             // `head_dim`, else hidden_size / num_attention_heads (integer division, as HF)
  bool attention_bias = false;  // biases on q/k/v/o_proj
  bool use_rope = false;        // position_embedding_type "rope"; null or "nope": no position embedding
  double rope_theta = 10000.0;  // `rope_theta` or `rope_parameters.rope_theta`; default RoPE only

  // µP multipliers
  double embedding_multiplier = 1.0;  // embeddings are multiplied by it
  double attention_multiplier = 1.0;  // the attention score scale, in place of 1/sqrt(head_dim)
  double residual_multiplier = 1.0;   // each sub-layer's output is multiplied by it before the residual add
  double logits_scaling = 1.0;        // the logits are DIVIDED by it

  double rms_norm_eps = 1e-6;  // every RMSNorm, the Mamba gated norm included
  std::string hidden_act = "silu";
  bool tie_word_embeddings = false;

  // Feed-forward after every layer: shared SwiGLU MLP, plus a top-k MoE of SwiGLU experts when
  // num_local_experts > 0 (0: the shared MLP alone, a dense model).
  int num_local_experts = 0;
  int num_experts_per_tok = 0;  // 0 when there are no experts
  int intermediate_size = 0;    // expert FFN width (0 when there are no experts)
  int shared_intermediate_size = 0;

  // Mamba2 layers (fields are 0 when the model has none).
  int mamba_n_heads = 0;
  int mamba_n_groups = 1;
  int mamba_d_state = 0;
  int mamba_d_head = 0;  // "auto": mamba_expand * hidden_size / mamba_n_heads
  int mamba_d_conv = 4;
  int mamba_expand = 2;
  int mamba_chunk_size = 256;
  bool mamba_conv_bias = true;
  bool mamba_proj_bias = false;  // biases on in_proj / out_proj
  double time_step_min_limit = 0.0;    // `time_step_limit` when given (Granite configs carry none)
  double time_step_max_limit = 1e300;  // +inf unless given

  bool has_experts() const { return num_local_experts > 0; }
  int num_layers_of(GraniteLayerType t) const;
  int mamba_intermediate_size() const { return mamba_expand * hidden_size; }
  int q_dim() const { return num_attention_heads * head_dim; }
  int kv_dim() const { return num_key_value_heads * head_dim; }
};

GraniteHybridConfig parse_granite_hybrid_config(const nlohmann::json& cfg);

// The Mamba2 mixer shape of the model's Mamba layers, so that the Mamba2 mixer code can be reused:
// num_hidden_layers is the number of Mamba layers, layer_norm_epsilon is rms_norm_eps (the gated norm's
// epsilon), use_bias is mamba_proj_bias, the gated norm gates before normalising (norm_before_gate false).
// Throws when the model has no Mamba layer.
Mamba2Config to_mamba2_config(const GraniteHybridConfig& c);

}  // namespace parity::io
