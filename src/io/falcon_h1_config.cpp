// FalconH1ForCausalLM (TII Falcon-H1) as a hybrid layer list: in every layer, input_layernorm feeds attention and
// the Mamba2 mixer side by side, their outputs summed into one residual add; then pre_ff_layernorm → SwiGLU
// feed_forward. The µP multipliers sit where HF's FalconH1 applies them:
//   mamba:     in_proj(x · ssm_in_multiplier) ⊙ [z|x|B|C|dt]·ssm_multipliers → mixer → · ssm_out_multiplier
//   attention: q, k, v from x · attention_in_multiplier, k · key_multiplier, RoPE → · attention_out_multiplier
//   MLP:       down(up(x) ⊙ silu(gate(x) · mlp_multipliers[0])) · mlp_multipliers[1]
//   embeddings · embedding_multiplier; logits · lm_head_multiplier.
// The mixer's inner width is mamba_d_ssm (else mamba_expand · hidden_size); its gated RMSNorm is optional
// (mamba_rms_norm false: y ⊙ silu(z)), per group, before or after the gate (mamba_norm_before_gate).
#include <cmath>
#include <limits>

#include "io/config_fields.h"
#include "io/hybrid_spec.h"
#include "io/mamba_family_fields.h"

namespace parity::io {

using namespace cfg;

HybridSpec falcon_h1_spec(const nlohmann::json& json) {
  int L = 0;
  HybridSpec s = mamba_family_base(json, "FalconH1ForCausalLM", L);
  const int H = s.hidden_size;
  s.embedding_multiplier = finite_or(json, "embedding_multiplier", 1.0);
  s.logits_multiplier = finite_or(json, "lm_head_multiplier", 1.0);
  require_string(json, "hidden_act", {"silu", "swish"}, "silu");
  if (bool_or(json, "mlp_bias", false)) refuse("mlp_bias = true is not supported");
  if (bool_or(json, "attention_bias", false)) refuse("attention_bias = true is not supported");

  const int expand = positive("mamba_expand", int_or(json, "mamba_expand", 2));
  if (static_cast<long long>(expand) * H > std::numeric_limits<int>::max() / 4)
    refuse("mamba_expand * hidden_size is too large");
  const auto d_ssm = opt_int(json, "mamba_d_ssm");
  s.mamba = mamba_family_mixer(json, H, s.vocab_size, d_ssm ? *d_ssm : expand * H,
                               d_ssm ? "mamba_d_ssm" : "mamba_expand * hidden_size", s.rms_norm_eps);
  s.mamba.rms_norm = bool_or(json, "mamba_rms_norm", false);
  s.mamba.norm_before_gate = bool_or(json, "mamba_norm_before_gate", true);
  // HF's FalconH1 mixer takes the in_proj bias from mamba_proj_bias and the out_proj bias from projectors_bias.
  if (bool_or(json, "projectors_bias", false) != s.mamba.use_bias)
    refuse("projectors_bias = " + std::string(bool_or(json, "projectors_bias", false) ? "true" : "false") +
           " differs from mamba_proj_bias: in_proj and out_proj biases that differ are not supported");
  const std::vector<double> ssm_mult =
      number_list_or(json, "ssm_multipliers", 5, {1.0, 1.0, 1.0, 1.0, 1.0});
  const std::vector<double> mlp_mult = number_list_or(json, "mlp_multipliers", 2, {1.0, 1.0});

  AttentionSpec att;
  att.heads = positive("num_attention_heads", int_or(json, "num_attention_heads", 32));
  att.kv_heads = positive("num_key_value_heads", int_or(json, "num_key_value_heads", 8));
  if (att.heads % att.kv_heads != 0)
    refuse("num_attention_heads = " + std::to_string(att.heads) + " is not a multiple of num_key_value_heads = " +
           std::to_string(att.kv_heads));
  att.head_dim = positive("head_dim", int_or(json, "head_dim", H / att.heads));
  att.scale = 1.0 / std::sqrt(static_cast<double>(att.head_dim));
  att.key_multiplier = finite_or(json, "key_multiplier", 1.0);
  att.rope = true;
  att.rope_theta = rope_theta(json, 100000.0);
  att.rotary_dim = att.head_dim;
  if (att.head_dim % 2 != 0) refuse("head_dim = " + std::to_string(att.head_dim) + " must be even for RoPE");
  const int F = positive("intermediate_size", int_or(json, "intermediate_size", 14336));

  for (int l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    HybridLayer layer;
    layer.probe = p;
    SubLayer mix;
    mix.norm = p + ".input_layernorm.weight";
    Block m;  // HF runs the mixer first, then attention; the two outputs are summed
    m.kind = BlockKind::Mamba;
    m.probe = p + ".mamba";
    m.in_multiplier = finite_or(json, "ssm_in_multiplier", 1.0);
    m.out_multiplier = finite_or(json, "ssm_out_multiplier", 1.0);
    m.mamba.prefix = m.probe + ".";
    m.mamba.in_proj_probe = m.probe + ".in_proj";
    m.mamba.conv1d_probe = m.probe + ".conv1d";
    m.mamba.dt_probe = m.probe + ".dt";
    if (s.mamba.rms_norm) m.mamba.norm_probe = m.probe + ".norm";
    m.mamba.has_segment_multipliers = true;
    for (int i = 0; i < 5; ++i) m.mamba.segment_multipliers[static_cast<std::size_t>(i)] = ssm_mult[i];
    mix.blocks.push_back(m);
    Block a;
    const std::string ap = p + ".self_attn";
    a.kind = BlockKind::Attention;
    a.probe = ap;
    a.in_multiplier = finite_or(json, "attention_in_multiplier", 1.0);
    a.out_multiplier = finite_or(json, "attention_out_multiplier", 1.0);
    a.attn = att;
    a.attn.q = ap + ".q_proj", a.attn.k = ap + ".k_proj", a.attn.v = ap + ".v_proj", a.attn.o = ap + ".o_proj";
    a.attn.q_probe = a.attn.q, a.attn.k_probe = a.attn.k, a.attn.v_probe = a.attn.v;
    mix.blocks.push_back(a);
    layer.subs.push_back(mix);
    SubLayer ffn = swiglu_feed_forward(p, F);
    ffn.blocks[0].mlp.gate_multiplier = mlp_mult[0];
    ffn.blocks[0].mlp.down_multiplier = mlp_mult[1];
    layer.subs.push_back(ffn);
    s.layers.push_back(layer);
  }
  finish_hybrid_spec(s);
  return s;
}

}  // namespace parity::io
