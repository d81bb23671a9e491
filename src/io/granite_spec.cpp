// GraniteMoeHybridForCausalLM as a hybrid layer list (docs/granite-hybrid.md): per layer, input_layernorm →
// Mamba2 (model.layers.N.mamba) or attention (self_attn, score scale attention_multiplier, RoPE when
// position_embedding_type is "rope"), then post_attention_layernorm → MoE (block_sparse_moe, top-k then
// softmax, SwiGLU experts) + shared SwiGLU MLP (shared_mlp); both sub-layers scaled by residual_multiplier.
// The config itself is parsed by granite_config.cpp.
#include "io/granite_config.h"
#include "io/hybrid_spec.h"

namespace parity::io {

HybridSpec granite_hybrid_spec(const nlohmann::json& json) {
  const GraniteHybridConfig c = parse_granite_hybrid_config(json);
  HybridSpec s;
  s.architecture = "GraniteMoeHybridForCausalLM";
  s.vocab_size = c.vocab_size;
  s.hidden_size = c.hidden_size;
  s.rms_norm_eps = c.rms_norm_eps;
  s.embed = "model.embed_tokens.weight";
  s.embed_probe = "model.embed_tokens";
  s.final_norm = "model.norm.weight";
  s.final_norm_probe = "model.norm";
  s.lm_head = c.tie_word_embeddings ? "" : "lm_head.weight";
  s.embedding_multiplier = c.embedding_multiplier;
  s.logits_divisor = c.logits_scaling;
  if (c.num_layers_of(GraniteLayerType::Mamba) > 0) s.mamba = to_mamba2_config(c);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    HybridLayer L;
    L.probe = p;
    SubLayer mix;
    mix.norm = p + ".input_layernorm.weight";
    mix.residual_multiplier = c.residual_multiplier;
    Block b;
    if (c.layer_types[static_cast<std::size_t>(l)] == GraniteLayerType::Mamba) {
      const std::string m = p + ".mamba";
      b.kind = BlockKind::Mamba;
      b.probe = m;
      b.mamba.prefix = m + ".";
      b.mamba.in_proj_probe = m + ".in_proj";
      b.mamba.conv1d_probe = m + ".conv1d";
      b.mamba.dt_probe = m + ".dt";
      b.mamba.norm_probe = m + ".norm";
    } else {
      const std::string a = p + ".self_attn";
      b.kind = BlockKind::Attention;
      b.probe = a;
      AttentionSpec& at = b.attn;
      at.heads = c.num_attention_heads;
      at.kv_heads = c.num_key_value_heads;
      at.head_dim = c.head_dim;
      at.bias = c.attention_bias;
      at.q = a + ".q_proj", at.k = a + ".k_proj", at.v = a + ".v_proj", at.o = a + ".o_proj";
      at.q_probe = at.q, at.k_probe = at.k, at.v_probe = at.v;
      at.scale = c.attention_multiplier;
      at.rope = c.use_rope;
      at.rotary_dim = c.head_dim;
      at.rope_theta = c.rope_theta;
    }
    mix.blocks.push_back(b);
    L.subs.push_back(mix);

    // The MoE first, then the shared MLP: the order Granite's forward probes and sums them in.
    SubLayer ffn;
    ffn.norm = p + ".post_attention_layernorm.weight";
    ffn.residual_multiplier = c.residual_multiplier;
    if (c.has_experts()) {
      const std::string m = p + ".block_sparse_moe";
      Block e;
      e.kind = BlockKind::Moe;
      e.probe = m;
      MoeSpec& moe = e.moe;
      moe.router = RouterKind::SoftmaxTopK;
      moe.act = Activation::SwiGLU;
      moe.experts = c.num_local_experts;
      moe.top_k = c.num_experts_per_tok;
      moe.width = c.intermediate_size;
      moe.router_weight = m + ".router.layer.weight";
      moe.experts_in = m + ".input_linear.weight";
      moe.experts_out = m + ".output_linear.weight";
      moe.router_probe = m + ".router";
      ffn.blocks.push_back(e);
    }
    Block sh;
    sh.kind = BlockKind::Mlp;
    sh.probe = p + ".shared_mlp";
    sh.mlp.act = Activation::SwiGLU;
    sh.mlp.width = c.shared_intermediate_size;
    sh.mlp.gate_up = p + ".shared_mlp.input_linear.weight";
    sh.mlp.down = p + ".shared_mlp.output_linear.weight";
    ffn.blocks.push_back(sh);
    L.subs.push_back(ffn);
    s.layers.push_back(L);
  }
  finish_hybrid_spec(s);
  return s;
}

}  // namespace parity::io
