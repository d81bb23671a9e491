#include "model/tp_plan.h"

#include "cache/rank_shape.h"
#include "common/error.h"

namespace parity::model {
namespace {

using Segments = std::vector<int64_t>;

TensorSplit rows(Segments s) { return {0, {std::move(s)}, false}; }
TensorSplit cols(int dim, int64_t width) { return {dim, {{width}}, false}; }
TensorSplit rank_zero() { return {0, {}, true}; }

void require_divides(int64_t n, int tp, const std::string& what) {
  if (n % tp != 0)
    throw Error("tensor parallel size " + std::to_string(tp) + " does not divide " + what + " (" +
                std::to_string(n) + ")");
}

// One Mamba2 mixer whose tensors are named prefix + "in_proj.weight" etc.
void add_mixer(TpPlan& p, const io::Mamba2Config& c, const std::string& prefix, const std::string& in_proj_probe,
               const std::string& conv1d_probe, const std::string& dt_probe, const std::string& norm_probe) {
  const int64_t I = c.intermediate_size, GN = int64_t(c.n_groups) * c.state_size, H = c.num_heads;
  const Segments in_proj{I, I, GN, GN, H}, conv{I, GN, GN};
  p.tensors[prefix + "in_proj.weight"] = rows(in_proj);
  p.tensors[prefix + "in_proj.bias"] = rows(in_proj);
  p.tensors[prefix + "conv1d.weight"] = rows(conv);
  p.tensors[prefix + "conv1d.bias"] = rows(conv);
  for (const char* t : {"dt_bias", "A_log", "D"}) p.tensors[prefix + t] = rows({H});
  p.tensors[prefix + "norm.weight"] = rows({I});
  p.tensors[prefix + "out_proj.weight"] = cols(1, I);
  p.tensors[prefix + "out_proj.bias"] = rank_zero();
  p.probes[in_proj_probe] = {in_proj};
  p.probes[conv1d_probe] = {conv};
  p.probes[dt_probe] = {{H}};
  if (!norm_probe.empty()) p.probes[norm_probe] = {{I}};
}

void add_mlp(TpPlan& p, const io::MlpSpec& m, int tp, const std::string& what) {
  require_divides(m.width, tp, what);
  const int64_t F = m.width;
  if (!m.gate_up.empty()) p.tensors[m.gate_up] = rows({F, F});  // gate rows, then up rows: each split
  for (const std::string* t : {&m.gate, &m.up})
    if (!t->empty()) p.tensors[*t] = rows({F});
  p.tensors[m.down] = cols(1, F);
}

void add_moe(TpPlan& p, const io::MoeSpec& m, int tp) {
  require_divides(m.width, tp, "the experts' width (moe intermediate size)");
  const int64_t F = m.width;
  const Segments in = m.act == io::Activation::SwiGLU ? Segments{F, F} : Segments{F};
  // Stacked [E, rows, cols] or one [rows, cols] tensor per expert.
  if (m.experts_in.find("{e}") != std::string::npos) {
    for (int e = 0; e < m.experts; ++e) {
      p.tensors[io::expert_tensor(m.experts_in, e)] = rows(in);
      p.tensors[io::expert_tensor(m.experts_out, e)] = cols(1, F);
    }
  } else {
    p.tensors[m.experts_in] = {1, {in}, false};
    p.tensors[m.experts_out] = cols(2, F);
  }
  if (m.has_shared) add_mlp(p, m.shared, tp, "the shared expert's width");
}

void add_attention(TpPlan& p, const io::AttentionSpec& a, int tp) {
  // A rank's query heads are the groups of its KV heads.
  require_divides(a.kv_heads, tp, "the attention's KV heads (num_key_value_heads)");
  const int64_t q = int64_t(a.heads) * a.head_dim, kv = int64_t(a.kv_heads) * a.head_dim;
  p.tensors[a.q + ".weight"] = rows({q});
  p.tensors[a.q + ".bias"] = rows({q});
  for (const std::string* t : {&a.k, &a.v}) {
    p.tensors[*t + ".weight"] = rows({kv});
    p.tensors[*t + ".bias"] = rows({kv});
  }
  p.tensors[a.o + ".weight"] = cols(1, q);
  p.tensors[a.o + ".bias"] = rank_zero();
  p.probes[a.q_probe] = {{q}};
  p.probes[a.k_probe] = {{kv}};
  p.probes[a.v_probe] = {{kv}};
}

}  // namespace

TpPlan mamba2_tp_plan(const io::Mamba2Config& whole, int tp) {
  cache::rank_mamba_config(whole, tp);  // refuses a split that cuts a group
  TpPlan p;
  for (int l = 0; l < whole.num_hidden_layers; ++l) {
    const std::string b = "backbone.layers." + std::to_string(l) + ".mixer";
    add_mixer(p, whole, b + ".", b + ".in_proj", b + ".conv1d", b + ".dt", whole.rms_norm ? b + ".norm" : "");
  }
  return p;
}

TpPlan hybrid_tp_plan(const io::HybridSpec& whole, int tp) {
  TpPlan p;
  if (whole.num_mamba > 0) cache::rank_mamba_config(whole.mamba, tp);
  for (const io::HybridLayer& L : whole.layers)
    for (const io::SubLayer& sub : L.subs)
      for (const io::Block& b : sub.blocks) switch (b.kind) {
          case io::BlockKind::Mamba:
            add_mixer(p, whole.mamba, b.mamba.prefix, b.mamba.in_proj_probe, b.mamba.conv1d_probe, b.mamba.dt_probe,
                      whole.mamba.rms_norm ? b.mamba.norm_probe : "");
            break;
          case io::BlockKind::Attention:
            add_attention(p, b.attn, tp);
            break;
          case io::BlockKind::Mlp:
            add_mlp(p, b.mlp, tp, "the MLP's width (intermediate size)");
            break;
          case io::BlockKind::Moe:
            add_moe(p, b.moe, tp);
            break;
        }
  return p;
}

io::HybridSpec rank_hybrid_spec(const io::HybridSpec& whole, int tp) {
  hybrid_tp_plan(whole, tp);  // the same refusals, before any shape is divided
  io::HybridSpec s = whole;
  if (s.num_mamba > 0) s.mamba = cache::rank_mamba_config(whole.mamba, tp);
  s.kv_heads /= tp;
  for (io::HybridLayer& L : s.layers)
    for (io::SubLayer& sub : L.subs)
      for (io::Block& b : sub.blocks) {
        b.attn.heads /= tp;
        b.attn.kv_heads /= tp;
        b.mlp.width /= tp;
        b.moe.width /= tp;
        b.moe.shared.width /= tp;
      }
  return s;
}

}  // namespace parity::model
