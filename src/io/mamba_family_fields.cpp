#include "io/mamba_family_fields.h"

#include <limits>

#include "io/config_fields.h"

namespace parity::io {

using namespace cfg;

HybridSpec mamba_family_base(const nlohmann::json& json, const char* architecture, int& num_layers) {
  if (!json.is_object()) refuse("not a JSON object");
  HybridSpec s;
  s.architecture = architecture;
  s.vocab_size = positive("vocab_size", req_int(json, "vocab_size"));
  s.hidden_size = positive("hidden_size", req_int(json, "hidden_size"));
  num_layers = positive("num_hidden_layers", req_int(json, "num_hidden_layers"));
  s.rms_norm_eps = finite_or(json, "rms_norm_eps", 1e-5);
  if (!(s.rms_norm_eps > 0.0)) refuse("rms_norm_eps must be positive");
  s.embed = "model.embed_tokens.weight";
  s.embed_probe = "model.embed_tokens";
  s.final_norm = "model.final_layernorm.weight";
  s.final_norm_probe = "model.final_layernorm";
  s.lm_head = bool_or(json, "tie_word_embeddings", false) ? "" : "lm_head.weight";
  return s;
}

SubLayer swiglu_feed_forward(const std::string& layer, int width) {
  SubLayer ffn;
  ffn.norm = layer + ".pre_ff_layernorm.weight";
  Block f;
  f.kind = BlockKind::Mlp;
  f.probe = layer + ".feed_forward";
  f.mlp.act = Activation::SwiGLU;
  f.mlp.width = width;
  f.mlp.gate = f.probe + ".gate_proj.weight";
  f.mlp.up = f.probe + ".up_proj.weight";
  f.mlp.down = f.probe + ".down_proj.weight";
  ffn.blocks.push_back(f);
  return ffn;
}

Mamba2Config mamba_family_mixer(const nlohmann::json& json, int hidden, int vocab, int inner, const char* width_key,
                                double eps) {
  Mamba2Config m;
  m.vocab_size = vocab;
  m.hidden_size = hidden;
  m.intermediate_size = positive(width_key, inner);
  if (inner > std::numeric_limits<int>::max() / 4) refuse(std::string(width_key) + " is too large");
  m.num_heads = positive("mamba_n_heads", int_or(json, "mamba_n_heads", 128));
  if (inner % m.num_heads != 0)
    refuse("mamba_n_heads = " + std::to_string(m.num_heads) + " does not divide " + width_key + " = " +
           std::to_string(inner));
  const nlohmann::json* dh = lookup(json, "mamba_d_head");
  if (!dh || (dh->is_string() && dh->get<std::string>() == "auto")) {
    m.head_dim = inner / m.num_heads;
  } else {
    m.head_dim = positive("mamba_d_head", req_int(json, "mamba_d_head"));
    if (m.head_dim * static_cast<long long>(m.num_heads) != inner)
      refuse("mamba_d_head * mamba_n_heads = " + std::to_string(m.head_dim) + " * " + std::to_string(m.num_heads) +
             " must equal " + width_key + " = " + std::to_string(inner));
  }
  m.n_groups = positive("mamba_n_groups", int_or(json, "mamba_n_groups", 1));
  if (m.num_heads % m.n_groups != 0)
    refuse("mamba_n_heads = " + std::to_string(m.num_heads) + " is not a multiple of mamba_n_groups = " +
           std::to_string(m.n_groups));
  m.state_size = positive("mamba_d_state", int_or(json, "mamba_d_state", 256));
  m.conv_kernel = int_or(json, "mamba_d_conv", 4);
  if (m.conv_kernel < 1 || m.conv_kernel > 8)
    refuse("mamba_d_conv = " + std::to_string(m.conv_kernel) + " is outside the supported range 1..8");
  m.chunk_size = positive("mamba_chunk_size", int_or(json, "mamba_chunk_size", 256));
  if ((m.chunk_size & (m.chunk_size - 1)) != 0)
    refuse("mamba_chunk_size = " + std::to_string(m.chunk_size) + " is not a power of two");
  m.use_conv_bias = bool_or(json, "mamba_conv_bias", true);
  m.use_bias = bool_or(json, "mamba_proj_bias", false);
  m.layer_norm_epsilon = eps;
  m.rms_norm = true;
  m.norm_before_gate = false;
  m.time_step_min_limit = 0.0;
  m.time_step_max_limit = std::numeric_limits<double>::infinity();
  require_mamba2_widths_fit(m, {"mamba_n_groups", "mamba_d_state", "mamba_n_heads"});
  return m;
}

}  // namespace parity::io
