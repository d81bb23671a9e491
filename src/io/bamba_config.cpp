// BambaForCausalLM (IBM Bamba) as a hybrid layer list: per layer, input_layernorm → Mamba2 (model.layers.N.mamba)
// or attention (self_attn: GQA, RoPE on the first partial_rotary_factor · head_dim elements, scale
// 1/sqrt(head_dim)) for the layers in attn_layer_indices; then pre_ff_layernorm → SwiGLU feed_forward
// (gate_proj, up_proj, down_proj). Plain residuals, no multipliers. HF's gated norm (BambaRMSNormGated)
// normalises the whole width; parity normalises per group (docs/hf-deviations.md), the same for n_groups 1.
#include <cmath>
#include <limits>
#include <set>

#include "io/config_fields.h"
#include "io/hybrid_spec.h"
#include "io/mamba_family_fields.h"

namespace parity::io {

using namespace cfg;

HybridSpec bamba_spec(const nlohmann::json& json) {
  int L = 0;
  HybridSpec s = mamba_family_base(json, "BambaForCausalLM", L);
  const int H = s.hidden_size;
  require_string(json, "hidden_act", {"silu", "swish"}, "silu");
  if (bool_or(json, "mlp_bias", false)) refuse("mlp_bias = true is not supported");

  std::set<int> attn;
  if (const nlohmann::json* a = lookup(json, "attn_layer_indices")) {
    if (!a->is_array()) refuse("attn_layer_indices must be a list of layer indices, got " + a->dump());
    for (std::size_t i = 0; i < a->size(); ++i) {
      const nlohmann::json& v = (*a)[i];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= L)
        refuse("attn_layer_indices[" + std::to_string(i) + "] = " + v.dump() + " is not a layer index below " +
               "num_hidden_layers = " + std::to_string(L));
      attn.insert(static_cast<int>(v.get<int64_t>()));
    }
  }
  const bool has_mamba = static_cast<int>(attn.size()) < L;
  const int expand = positive("mamba_expand", int_or(json, "mamba_expand", 2));
  if (static_cast<long long>(expand) * H > std::numeric_limits<int>::max() / 4)
    refuse("mamba_expand * hidden_size is too large");
  if (has_mamba) s.mamba = mamba_family_mixer(json, H, s.vocab_size, expand * H, "mamba_expand * hidden_size",
                                              s.rms_norm_eps);
  AttentionSpec att;
  if (!attn.empty()) {
    att.heads = positive("num_attention_heads", int_or(json, "num_attention_heads", 32));
    att.kv_heads = positive("num_key_value_heads", int_or(json, "num_key_value_heads", 8));
    if (att.heads % att.kv_heads != 0)
      refuse("num_attention_heads = " + std::to_string(att.heads) + " is not a multiple of num_key_value_heads = " +
             std::to_string(att.kv_heads));
    att.head_dim = positive("head_dim", int_or(json, "head_dim", H / att.heads));
    att.bias = bool_or(json, "attention_bias", false);
    att.scale = 1.0 / std::sqrt(static_cast<double>(att.head_dim));
    att.rope = true;
    att.rope_theta = rope_theta(json, 10000.0);
    double partial = finite_or(json, "partial_rotary_factor", 0.5);
    if (const nlohmann::json* rp = lookup(json, "rope_parameters"); rp && rp->is_object())
      partial = finite_or(*rp, "partial_rotary_factor", partial);
    if (!(partial > 0.0 && partial <= 1.0)) refuse("partial_rotary_factor must be in (0, 1]");
    att.rotary_dim = static_cast<int>(att.head_dim * partial);
    if (att.rotary_dim < 2 || att.rotary_dim % 2 != 0)
      refuse("partial_rotary_factor · head_dim = " + std::to_string(att.rotary_dim) + " must be even and >= 2");
  }
  const int F = positive("intermediate_size", int_or(json, "intermediate_size", 14336));
  for (int l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    HybridLayer layer;
    layer.probe = p;
    SubLayer mix;
    mix.norm = p + ".input_layernorm.weight";
    Block b;
    if (attn.count(l)) {
      const std::string a = p + ".self_attn";
      b.kind = BlockKind::Attention;
      b.probe = a;
      b.attn = att;
      b.attn.q = a + ".q_proj", b.attn.k = a + ".k_proj", b.attn.v = a + ".v_proj", b.attn.o = a + ".o_proj";
      b.attn.q_probe = b.attn.q, b.attn.k_probe = b.attn.k, b.attn.v_probe = b.attn.v;
    } else {
      const std::string m = p + ".mamba";
      b.kind = BlockKind::Mamba;
      b.probe = m;
      b.mamba.prefix = m + ".";
      b.mamba.in_proj_probe = m + ".in_proj";
      b.mamba.conv1d_probe = m + ".conv1d";
      b.mamba.dt_probe = m + ".dt";
      b.mamba.norm_probe = m + ".norm";
    }
    mix.blocks.push_back(b);
    layer.subs.push_back(mix);
    SubLayer ffn = swiglu_feed_forward(p, F);
    layer.subs.push_back(ffn);
    s.layers.push_back(layer);
  }
  finish_hybrid_spec(s);
  return s;
}

}  // namespace parity::io
