// NemotronHForCausalLM (NVIDIA Nemotron-H, Nemotron 3) as a hybrid layer list. Every layer is one block behind
// one RMSNorm (model.layers.N.norm → model.layers.N.mixer, plain residual): the pattern's characters pick it —
// M Mamba2, * attention (no position embedding, scale 1/sqrt(head_dim)), - MLP (up_proj → relu² → down_proj),
// E MoE (DeepSeek-V3's sigmoid router with e_score_correction_bias, ReLU² experts, one shared expert). The
// layers come from `hybrid_override_pattern` (a string) or `layers_block_type` (transformers 5's list:
// mamba / linear_attention, attention / full_attention, mlp, moe). Keys follow HF's NemotronHConfig: the
// attribute names save_pretrained writes (n_groups, conv_kernel, chunk_size, ...) and the constructor's
// (mamba_n_groups, mamba_d_conv, mamba_chunk_size, ...) are both read; absent keys take its defaults.
#include <algorithm>
#include <cmath>
#include <limits>

#include "io/config_fields.h"
#include "io/hybrid_spec.h"

namespace parity::io {
namespace {

using namespace cfg;

std::vector<char> nemotron_pattern(const nlohmann::json& json) {
  std::vector<char> from_pattern, from_list;
  bool has_pattern = false, has_list = false;
  if (auto s = opt_string(json, "hybrid_override_pattern")) {
    has_pattern = true;
    for (std::size_t i = 0; i < s->size(); ++i) {
      const char ch = (*s)[i];
      if (ch != 'M' && ch != '*' && ch != '-' && ch != 'E')
        refuse("hybrid_override_pattern = '" + *s + "': character '" + std::string(1, ch) + "' at " +
               std::to_string(i) + " is not a known block (known: M mamba, * attention, - mlp, E moe)");
      from_pattern.push_back(ch);
    }
  }
  if (const nlohmann::json* l = lookup(json, "layers_block_type")) {
    has_list = true;
    if (!l->is_array()) refuse("layers_block_type must be a list of strings, got " + l->dump());
    for (std::size_t i = 0; i < l->size(); ++i) {
      const std::string where = "layers_block_type[" + std::to_string(i) + "]";
      if (!(*l)[i].is_string()) refuse(where + " must be a string, got " + (*l)[i].dump());
      const std::string t = (*l)[i].get<std::string>();
      if (t == "mamba" || t == "linear_attention") from_list.push_back('M');
      else if (t == "attention" || t == "full_attention") from_list.push_back('*');
      else if (t == "mlp") from_list.push_back('-');
      else if (t == "moe") from_list.push_back('E');
      else
        refuse(where + " = '" + t +
               "' is not a known block (known: mamba, linear_attention, attention, full_attention, mlp, moe)");
    }
  }
  if (has_pattern && has_list && from_pattern != from_list)
    refuse("hybrid_override_pattern and layers_block_type " + lookup(json, "layers_block_type")->dump() +
           " describe different layers");
  std::vector<char> p = has_list ? from_list : from_pattern;
  if (!has_pattern && !has_list) refuse("neither hybrid_override_pattern nor layers_block_type is given");
  if (p.empty()) refuse("the layer pattern is empty");
  if (auto n = opt_int(json, "num_hidden_layers"); n && *n != static_cast<int>(p.size()))
    refuse("num_hidden_layers = " + std::to_string(*n) + " but the layer pattern has " + std::to_string(p.size()) +
           " layers");
  return p;
}

}  // namespace

HybridSpec nemotron_h_spec(const nlohmann::json& json, const HasTensor& has_tensor) {
  if (!json.is_object()) refuse("not a JSON object");
  HybridSpec s;
  s.architecture = "NemotronHForCausalLM";
  s.vocab_size = positive("vocab_size", req_int(json, "vocab_size"));
  const int H = s.hidden_size = positive("hidden_size", req_int(json, "hidden_size"));
  s.rms_norm_eps = finite_or(json, "layer_norm_epsilon", 1e-5);
  if (!(s.rms_norm_eps > 0.0)) refuse("layer_norm_epsilon must be positive");
  const std::vector<char> pattern = nemotron_pattern(json);
  auto has = [&](char ch) { return std::find(pattern.begin(), pattern.end(), ch) != pattern.end(); };

  // Checkpoints name the base model `backbone.` (NVIDIA's releases) or `model.` (transformers' module names);
  // the probe points always use transformers' module names.
  const std::string w = has_tensor && has_tensor("backbone.embeddings.weight") ? "backbone." : "model.";
  s.embed = w + "embeddings.weight";
  s.embed_probe = "model.embeddings";
  s.final_norm = w + "norm_f.weight";
  s.final_norm_probe = "model.norm_f";
  s.lm_head = bool_or(json, "tie_word_embeddings", false) ? "" : "lm_head.weight";

  if (bool_or(json, "use_bias", false) != bool_or(json, "mamba_proj_bias", false) &&
      bool_or(json, "mamba_proj_bias", false))
    refuse("mamba_proj_bias = true is not what NemotronH's mixer reads (it takes use_bias)");
  if (has('M')) {
    require_string(json, "mamba_hidden_act", {"silu", "swish"}, "silu");
    io::Mamba2Config& m = s.mamba;
    m.vocab_size = s.vocab_size;
    m.hidden_size = H;
    m.num_heads = positive("mamba_num_heads", int_or(json, "mamba_num_heads", 128));
    m.head_dim = positive("mamba_head_dim", int_or(json, "mamba_head_dim", 64));
    m.state_size = positive("ssm_state_size", int_or(json, "ssm_state_size", 128));
    m.n_groups = positive("n_groups", int_of_any(json, {"n_groups", "mamba_n_groups"}, 8));
    const long long inner = static_cast<long long>(m.num_heads) * m.head_dim;
    if (inner > std::numeric_limits<int>::max() / 4)
      refuse("mamba_num_heads * mamba_head_dim = " + std::to_string(inner) + " is too large");
    m.intermediate_size = static_cast<int>(inner);  // NemotronH: heads · head_dim, not expand · hidden
    m.expand = 0;
    m.conv_kernel = int_of_any(json, {"conv_kernel", "mamba_d_conv"}, 4);
    if (m.conv_kernel < 1 || m.conv_kernel > 8)
      refuse("conv_kernel = " + std::to_string(m.conv_kernel) + " is outside the supported range 1..8");
    m.chunk_size = positive("chunk_size", int_of_any(json, {"chunk_size", "mamba_chunk_size"}, 128));
    if ((m.chunk_size & (m.chunk_size - 1)) != 0)
      refuse("chunk_size = " + std::to_string(m.chunk_size) + " is not a power of two");
    m.use_bias = bool_or(json, "use_bias", false);
    m.use_conv_bias = bool_of_any(json, {"use_conv_bias", "mamba_conv_bias"}, true);
    m.layer_norm_epsilon = s.rms_norm_eps;
    m.rms_norm = true;
    m.norm_before_gate = false;
    m.tie_word_embeddings = s.lm_head.empty();
    time_step_limit(json, {"time_step_limit", "mamba_dt_limit"}, &m.time_step_min_limit, &m.time_step_max_limit);
    if (m.num_heads % m.n_groups != 0)
      refuse("mamba_num_heads = " + std::to_string(m.num_heads) + " is not a multiple of n_groups = " +
             std::to_string(m.n_groups));
    require_mamba2_widths_fit(m, {"n_groups", "ssm_state_size", "mamba_num_heads"});
  }
  AttentionSpec att;
  if (has('*')) {
    att.heads = positive("num_attention_heads", int_or(json, "num_attention_heads", 32));
    att.kv_heads = positive("num_key_value_heads", int_or(json, "num_key_value_heads", att.heads));
    if (att.heads % att.kv_heads != 0)
      refuse("num_attention_heads = " + std::to_string(att.heads) + " is not a multiple of num_key_value_heads = " +
             std::to_string(att.kv_heads));
    // NVIDIA's own configs (Nemotron-H-8B) spell it attention_head_dim; transformers' default is 128.
    att.head_dim = positive("head_dim", int_of_any(json, {"head_dim", "attention_head_dim"}, 128));
    att.bias = bool_or(json, "attention_bias", false);
    att.scale = 1.0 / std::sqrt(static_cast<double>(att.head_dim));
    if (const nlohmann::json* sw = lookup(json, "sliding_window"))
      refuse("sliding_window = " + sw->dump() + " is not supported");
  }
  if (has('-') || has('E')) {
    require_string(json, "mlp_hidden_act", {"relu2"}, "relu2");
    if (bool_or(json, "mlp_bias", false)) refuse("mlp_bias = true is not supported");
  }
  MoeSpec moe;
  if (has('E')) {
    moe.router = RouterKind::SigmoidTopK;
    moe.act = Activation::ReLU2;
    moe.experts = positive("n_routed_experts", int_or(json, "n_routed_experts", 8));
    moe.top_k = positive("num_experts_per_tok", int_or(json, "num_experts_per_tok", 2));
    if (moe.top_k > moe.experts)
      refuse("num_experts_per_tok = " + std::to_string(moe.top_k) + " exceeds n_routed_experts = " +
             std::to_string(moe.experts));
    moe.width = positive("moe_intermediate_size", int_or(json, "moe_intermediate_size", 7688));
    moe.norm_topk_prob = bool_or(json, "norm_topk_prob", true);
    moe.routed_scaling_factor = finite_or(json, "routed_scaling_factor", 1.0);
    const int n_group = int_or(json, "n_group", 1), topk_group = int_or(json, "topk_group", 1);
    if (n_group != 1)
      refuse("n_group = " + std::to_string(n_group) + " (grouped top-k routing) is not supported (supported: 1)");
    if (topk_group != 1) refuse("topk_group = " + std::to_string(topk_group) + " is not supported with n_group 1");
    if (const nlohmann::json* lat = lookup(json, "moe_latent_size"))
      refuse("moe_latent_size = " + lat->dump() + " (latent expert projections) is not supported");
    if (int_or(json, "n_shared_experts", 1) < 1)
      refuse("n_shared_experts = " + std::to_string(int_or(json, "n_shared_experts", 1)) +
             " is not supported (NemotronH always has its shared expert)");
    moe.has_shared = true;
    moe.shared.act = Activation::ReLU2;
    moe.shared.width =
        positive("moe_shared_expert_intermediate_size", int_or(json, "moe_shared_expert_intermediate_size", 7688));
  }
  const int mlp_width = has('-') ? positive("intermediate_size", int_or(json, "intermediate_size", 21504)) : 0;

  for (std::size_t l = 0; l < pattern.size(); ++l) {
    const std::string p = "model.layers." + std::to_string(l), wp = w + "layers." + std::to_string(l);
    const std::string mx = p + ".mixer", wmx = wp + ".mixer";
    HybridLayer L;
    L.probe = p;
    SubLayer sub;
    sub.norm = wp + ".norm.weight";
    Block b;
    b.probe = mx;
    switch (pattern[l]) {
      case 'M':
        b.kind = BlockKind::Mamba;
        b.mamba.prefix = wmx + ".";
        b.mamba.in_proj_probe = mx + ".in_proj";
        b.mamba.conv1d_probe = mx + ".conv1d";
        b.mamba.dt_probe = mx + ".dt";
        b.mamba.norm_probe = mx + ".norm";
        break;
      case '*':
        b.kind = BlockKind::Attention;
        b.attn = att;
        b.attn.q = wmx + ".q_proj", b.attn.k = wmx + ".k_proj", b.attn.v = wmx + ".v_proj", b.attn.o = wmx + ".o_proj";
        b.attn.q_probe = mx + ".q_proj", b.attn.k_probe = mx + ".k_proj", b.attn.v_probe = mx + ".v_proj";
        break;
      case '-':
        b.kind = BlockKind::Mlp;
        b.mlp.act = Activation::ReLU2;
        b.mlp.width = mlp_width;
        b.mlp.up = wmx + ".up_proj.weight";
        b.mlp.down = wmx + ".down_proj.weight";
        break;
      default:  // 'E'
        b.kind = BlockKind::Moe;
        b.moe = moe;
        b.moe.router_weight = wmx + ".gate.weight";
        b.moe.correction_bias = wmx + ".gate.e_score_correction_bias";
        // transformers 5 stacks the experts in its modules; checkpoints hold one tensor per expert.
        if (has_tensor && has_tensor(wmx + ".experts.up_proj")) {
          b.moe.experts_in = wmx + ".experts.up_proj";
          b.moe.experts_out = wmx + ".experts.down_proj";
        } else {
          b.moe.experts_in = wmx + ".experts.{e}.up_proj.weight";
          b.moe.experts_out = wmx + ".experts.{e}.down_proj.weight";
        }
        b.moe.router_probe = mx + ".gate";
        b.moe.shared.up = wmx + ".shared_experts.up_proj.weight";
        b.moe.shared.down = wmx + ".shared_experts.down_proj.weight";
        b.moe.shared_probe = mx + ".shared_experts";
        break;
    }
    sub.blocks.push_back(b);
    L.subs.push_back(sub);
    s.layers.push_back(L);
  }
  finish_hybrid_spec(s);
  return s;
}

}  // namespace parity::io
