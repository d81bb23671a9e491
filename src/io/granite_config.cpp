#include "io/granite_config.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "common/error.h"
#include "io/config_fields.h"
#include "io/json_file.h"

namespace parity::io {

using namespace cfg;

namespace {

// Keys absent from config.json take the defaults of transformers' GraniteMoeHybridConfig, since those are
// what Hugging Face runs for the same file. The sizes that define the model are required.

std::vector<GraniteLayerType> parse_layer_types(const nlohmann::json& cfg, int num_layers) {
  const nlohmann::json* lt = lookup(cfg, "layer_types");
  const nlohmann::json* lbt = lookup(cfg, "layers_block_type");  // older key; HF maps it to layer_types
  if (lt && lbt && *lt != *lbt)
    refuse("layer_types " + lt->dump() + " and layers_block_type " + lbt->dump() + " disagree");
  const char* key = lt ? "layer_types" : "layers_block_type";
  if (!lt) lt = lbt;
  // HF's layers_block_type: `layer_types if layer_types else ["mamba"] * num_hidden_layers`.
  if (!lt || (lt->is_array() && lt->empty()))
    return std::vector<GraniteLayerType>(static_cast<std::size_t>(num_layers), GraniteLayerType::Mamba);
  if (!lt->is_array()) refuse(std::string(key) + " must be a list of strings, got " + lt->dump());
  if (lt->size() != static_cast<std::size_t>(num_layers))
    refuse(std::string(key) + " has " + std::to_string(lt->size()) + " entries but num_hidden_layers is " +
           std::to_string(num_layers));
  std::vector<GraniteLayerType> out;
  for (std::size_t i = 0; i < lt->size(); ++i) {
    const std::string where = std::string(key) + "[" + std::to_string(i) + "]";
    const std::string s = string_of((*lt)[i], where);
    if (s == "mamba" || s == "linear_attention")
      out.push_back(GraniteLayerType::Mamba);
    else if (s == "attention" || s == "full_attention")
      out.push_back(GraniteLayerType::Attention);
    else
      refuse(where + " = '" + s +
             "' is not a known layer type (known: mamba, attention, linear_attention, full_attention)");
  }
  return out;
}

// rope_theta for the default RoPE; refuses any scaled variant.
double parse_rope_theta(const nlohmann::json& cfg) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const nlohmann::json* rs = lookup(cfg, key);
    if (!rs) continue;
    if (!rs->is_object()) refuse(std::string(key) + " must be an object, got " + rs->dump());
    for (const char* tkey : {"rope_type", "type"}) {
      const nlohmann::json* t = lookup(*rs, tkey);
      if (!t) continue;
      const std::string type = string_of(*t, std::string(key) + "." + tkey);
      if (type != "default")
        refuse(std::string(key) + "." + tkey + " = '" + type + "' is not supported (supported: default)");
    }
  }
  std::optional<double> theta;
  if (const nlohmann::json* v = lookup(cfg, "rope_theta")) theta = as_float(*v, "config.json: rope_theta");
  if (const nlohmann::json* rp = lookup(cfg, "rope_parameters")) {
    if (const nlohmann::json* v = lookup(*rp, "rope_theta")) {
      double t = as_float(*v, "config.json: rope_parameters.rope_theta");
      if (theta && *theta != t)
        refuse("rope_theta = " + std::to_string(*theta) + " and rope_parameters.rope_theta = " + std::to_string(t) +
               " disagree");
      theta = t;
    }
  }
  const double t = theta.value_or(10000.0);
  if (!(t > 0.0) || !std::isfinite(t)) refuse("rope_theta must be a positive finite number");
  return t;
}

void parse_attention(const nlohmann::json& cfg, GraniteHybridConfig& c, bool needed) {
  const char* why = "the model has attention layers";
  auto heads = needed ? std::optional<int>(req_int(cfg, "num_attention_heads", why))
                      : opt_int(cfg, "num_attention_heads");
  if (!heads) return;
  c.num_attention_heads = positive("num_attention_heads", *heads);
  c.num_key_value_heads = positive("num_key_value_heads", opt_int(cfg, "num_key_value_heads").value_or(*heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    refuse("num_attention_heads = " + std::to_string(c.num_attention_heads) +
           " is not a multiple of num_key_value_heads = " + std::to_string(c.num_key_value_heads));
  if (auto hd = opt_int(cfg, "head_dim")) {
    c.head_dim = positive("head_dim", *hd);
  } else {
    c.head_dim = c.hidden_size / c.num_attention_heads;
    if (c.head_dim == 0)
      refuse("hidden_size / num_attention_heads = " + std::to_string(c.hidden_size) + " / " +
             std::to_string(c.num_attention_heads) + " gives head_dim 0 (and no head_dim is given)");
  }
  if (static_cast<long long>(c.num_attention_heads) * c.head_dim > std::numeric_limits<int>::max())
    refuse("num_attention_heads * head_dim = " + std::to_string(c.num_attention_heads) + " * " +
           std::to_string(c.head_dim) + " does not fit in 32 bits");
  c.attention_bias = bool_or(cfg, "attention_bias", false);
  std::string pet = "none";
  if (const nlohmann::json* v = lookup(cfg, "position_embedding_type")) pet = string_of(*v, "position_embedding_type");
  if (pet == "rope") {
    c.use_rope = true;
    c.rope_theta = parse_rope_theta(cfg);
    if (c.head_dim % 2 != 0) refuse("head_dim = " + std::to_string(c.head_dim) + " must be even for RoPE");
  } else if (pet != "none" && pet != "nope") {
    refuse("position_embedding_type = '" + pet + "' is not supported (supported: null, \"nope\", \"rope\")");
  }
}

void parse_mamba(const nlohmann::json& cfg, GraniteHybridConfig& c) {
  const char* why = "the model has mamba layers";
  c.mamba_n_heads = positive("mamba_n_heads", req_int(cfg, "mamba_n_heads", why));
  c.mamba_d_state = positive("mamba_d_state", req_int(cfg, "mamba_d_state", why));
  c.mamba_n_groups = positive("mamba_n_groups", opt_int(cfg, "mamba_n_groups").value_or(1));
  if (const nlohmann::json* v = lookup(cfg, "mamba_expand"); v && !v->is_number_integer())
    refuse("mamba_expand must be an integer, got " + v->dump());
  c.mamba_expand = positive("mamba_expand", opt_int(cfg, "mamba_expand").value_or(2));
  const long long inter = static_cast<long long>(c.mamba_expand) * c.hidden_size;
  if (inter > std::numeric_limits<int>::max() / 4) refuse("mamba_expand * hidden_size is too large");
  if (inter % c.mamba_n_heads != 0)
    refuse("mamba_n_heads = " + std::to_string(c.mamba_n_heads) + " does not divide mamba_expand * hidden_size = " +
           std::to_string(inter));
  const nlohmann::json* dh = lookup(cfg, "mamba_d_head");
  if (!dh || (dh->is_string() && dh->get<std::string>() == "auto")) {
    c.mamba_d_head = static_cast<int>(inter / c.mamba_n_heads);
  } else {
    if (dh->is_string()) refuse("mamba_d_head must be an integer or \"auto\", got " + dh->dump());
    c.mamba_d_head = positive("mamba_d_head", int_of(*dh, "mamba_d_head"));
    if (static_cast<long long>(c.mamba_d_head) * c.mamba_n_heads != inter)
      refuse("mamba_d_head * mamba_n_heads = " + std::to_string(c.mamba_d_head) + " * " +
             std::to_string(c.mamba_n_heads) + " must equal mamba_expand * hidden_size = " + std::to_string(inter));
  }
  if (c.mamba_n_heads % c.mamba_n_groups != 0)
    refuse("mamba_n_heads = " + std::to_string(c.mamba_n_heads) + " is not a multiple of mamba_n_groups = " +
           std::to_string(c.mamba_n_groups));
  c.mamba_d_conv = opt_int(cfg, "mamba_d_conv").value_or(4);
  if (c.mamba_d_conv < 1 || c.mamba_d_conv > 8)
    refuse("mamba_d_conv = " + std::to_string(c.mamba_d_conv) + " is outside the supported range 1..8");
  c.mamba_chunk_size = positive("mamba_chunk_size", opt_int(cfg, "mamba_chunk_size").value_or(256));
  if ((c.mamba_chunk_size & (c.mamba_chunk_size - 1)) != 0)
    refuse("mamba_chunk_size = " + std::to_string(c.mamba_chunk_size) + " is not a power of two");
  c.mamba_conv_bias = bool_or(cfg, "mamba_conv_bias", true);
  c.mamba_proj_bias = bool_or(cfg, "mamba_proj_bias", false);

  c.time_step_min_limit = 0.0;
  c.time_step_max_limit = std::numeric_limits<double>::infinity();
  if (const nlohmann::json* v = lookup(cfg, "time_step_limit")) {
    if (!v->is_array() || v->size() != 2) refuse("time_step_limit must be a list [min, max], got " + v->dump());
    c.time_step_min_limit = as_float((*v)[0], "config.json: time_step_limit[0]");
    c.time_step_max_limit = as_float((*v)[1], "config.json: time_step_limit[1]");
    if (std::isnan(c.time_step_min_limit) || std::isnan(c.time_step_max_limit))
      refuse("time_step_limit must not contain NaN");
    if (c.time_step_min_limit > c.time_step_max_limit)
      refuse("time_step_limit min " + std::to_string(c.time_step_min_limit) + " is greater than max " +
             std::to_string(c.time_step_max_limit));
  }
}

}  // namespace

const char* to_string(GraniteLayerType t) { return t == GraniteLayerType::Mamba ? "mamba" : "attention"; }

int GraniteHybridConfig::num_layers_of(GraniteLayerType t) const {
  int n = 0;
  for (GraniteLayerType x : layer_types) n += x == t;
  return n;
}

GraniteHybridConfig parse_granite_hybrid_config(const nlohmann::json& cfg) {
  if (!cfg.is_object()) refuse("not a JSON object");
  GraniteHybridConfig c;
  c.vocab_size = positive("vocab_size", req_int(cfg, "vocab_size"));
  c.hidden_size = positive("hidden_size", req_int(cfg, "hidden_size"));
  c.num_hidden_layers = positive("num_hidden_layers", req_int(cfg, "num_hidden_layers"));
  c.layer_types = parse_layer_types(cfg, c.num_hidden_layers);

  parse_attention(cfg, c, c.num_layers_of(GraniteLayerType::Attention) > 0);
  if (c.num_layers_of(GraniteLayerType::Mamba) > 0) parse_mamba(cfg, c);

  c.embedding_multiplier = finite_or(cfg, "embedding_multiplier", 1.0);
  c.attention_multiplier = finite_or(cfg, "attention_multiplier", 1.0);
  c.residual_multiplier = finite_or(cfg, "residual_multiplier", 1.0);
  c.logits_scaling = finite_or(cfg, "logits_scaling", 1.0);
  if (c.logits_scaling == 0.0) refuse("logits_scaling must not be 0 (the logits are divided by it)");
  c.rms_norm_eps = finite_or(cfg, "rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0.0)) refuse("rms_norm_eps must be a positive finite number");
  if (const nlohmann::json* v = lookup(cfg, "hidden_act")) c.hidden_act = string_of(*v, "hidden_act");
  if (c.hidden_act != "silu" && c.hidden_act != "swish")
    refuse("hidden_act = '" + c.hidden_act + "' is not supported (supported: silu, swish)");
  c.tie_word_embeddings = bool_or(cfg, "tie_word_embeddings", false);

  const int experts = opt_int(cfg, "num_local_experts").value_or(8);
  if (experts < 0) refuse("num_local_experts must be 0 (dense) or positive, got " + std::to_string(experts));
  c.num_local_experts = experts;
  if (experts > 0) {
    c.num_experts_per_tok = positive("num_experts_per_tok", opt_int(cfg, "num_experts_per_tok").value_or(2));
    if (c.num_experts_per_tok > experts)
      refuse("num_experts_per_tok = " + std::to_string(c.num_experts_per_tok) + " exceeds num_local_experts = " +
             std::to_string(experts));
    c.intermediate_size =
        positive("intermediate_size", req_int(cfg, "intermediate_size", "the expert FFN width; num_local_experts > 0"));
  }
  c.shared_intermediate_size = positive("shared_intermediate_size", req_int(cfg, "shared_intermediate_size"));
  if (c.num_layers_of(GraniteLayerType::Mamba) > 0)
    require_mamba2_widths_fit(to_mamba2_config(c), {"mamba_n_groups", "mamba_d_state", "mamba_n_heads"});
  return c;
}

Mamba2Config to_mamba2_config(const GraniteHybridConfig& c) {
  const int n = c.num_layers_of(GraniteLayerType::Mamba);
  if (n == 0) throw Error("config.json: layer_types holds no mamba layer, so there is no Mamba2 mixer shape");
  Mamba2Config m;
  m.vocab_size = c.vocab_size;
  m.hidden_size = c.hidden_size;
  m.num_hidden_layers = n;
  m.num_heads = c.mamba_n_heads;
  m.head_dim = c.mamba_d_head;
  m.state_size = c.mamba_d_state;
  m.n_groups = c.mamba_n_groups;
  m.expand = c.mamba_expand;
  m.intermediate_size = c.mamba_intermediate_size();
  m.conv_kernel = c.mamba_d_conv;
  m.chunk_size = c.mamba_chunk_size;
  m.use_bias = c.mamba_proj_bias;
  m.use_conv_bias = c.mamba_conv_bias;
  m.layer_norm_epsilon = c.rms_norm_eps;
  m.rms_norm = true;
  m.norm_before_gate = false;
  m.residual_in_fp32 = true;
  m.tie_word_embeddings = c.tie_word_embeddings;
  m.time_step_min_limit = c.time_step_min_limit;
  m.time_step_max_limit = c.time_step_max_limit;
  m.hidden_act = c.hidden_act;
  return m;
}

}  // namespace parity::io
