#include "model/granite_hybrid_model.h"

#include <cstring>

#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/moe.h"
#include "kernels/norm.h"
#include "model/granite_moe.h"
#include "model/mamba2_mixer.h"

namespace parity::model {

using io::GraniteLayerType;

std::unique_ptr<GraniteHybridModel> GraniteHybridModel::load(const Checkpoint& ck, const ModelOptions& opts) {
  auto m = std::unique_ptr<GraniteHybridModel>(new GraniteHybridModel());
  m->cfg_ = io::parse_granite_hybrid_config(ck.config);
  m->opts_ = opts;
  const io::GraniteHybridConfig& c = m->cfg_;
  m->origin_ = ck.origin;
  m->keepalive_ = ck.keepalive;
  const int n_mamba = c.num_layers_of(GraniteLayerType::Mamba);
  const int n_attn = c.num_layers_of(GraniteLayerType::Attention);
  if (n_mamba > 0) m->mamba_cfg_ = io::to_mamba2_config(c);
  m->w_ = load_granite_hybrid_weights(c, ck);
  m->spec_.num_mamba_layers = n_mamba;
  m->spec_.mamba = m->mamba_cfg_;
  m->spec_.num_attention_layers = n_attn;
  m->spec_.num_kv_heads = c.num_key_value_heads;
  m->spec_.head_dim = c.head_dim;
  m->spec_.chunk_size = c.mamba_chunk_size;
  if (c.use_rope) {
    m->inv_freq_.resize(static_cast<std::size_t>(c.head_dim / 2));
    kernels::rope_inv_freq(c.head_dim, static_cast<float>(c.rope_theta), m->inv_freq_.data());
  }
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    const std::string mx = p + ".mamba", a = p + ".self_attn", moe = p + ".block_sparse_moe";
    m->names_.push_back({p, c.layer_types[static_cast<std::size_t>(l)] == GraniteLayerType::Mamba ? mx : a,
                         mx + ".in_proj", mx + ".conv1d", mx + ".dt", mx + ".norm", a + ".q_proj", a + ".k_proj",
                         a + ".v_proj", moe + ".router", moe, p + ".shared_mlp"});
  }
  return m;
}

std::vector<ProbePoint> GraniteHybridModel::probe_points() const {
  const io::GraniteHybridConfig& c = cfg_;
  const int H = c.hidden_size;
  std::vector<ProbePoint> p;
  p.push_back({"model.embed_tokens", H, "token embeddings (before embedding_multiplier)"});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerNames& n = names_[static_cast<std::size_t>(l)];
    if (w_.layers[static_cast<std::size_t>(l)].kind == GraniteLayerType::Mamba) {
      p.push_back({n.in_proj, mamba_cfg_.in_proj_dim(), "in_proj output [z | xBC | dt]"});
      p.push_back({n.conv1d, mamba_cfg_.conv_dim(), "causal conv1d output over xBC, before SiLU"});
      p.push_back({n.dt, mamba_cfg_.num_heads, "raw dt (before dt_bias, softplus and clamp)"});
      p.push_back({n.norm, mamba_cfg_.intermediate_size, "gated RMSNorm output"});
      p.push_back({n.mixer, H, "mamba mixer output (out_proj), before residual_multiplier"});
    } else {
      p.push_back({n.q, c.q_dim(), "q_proj output (before RoPE)"});
      p.push_back({n.k, c.kv_dim(), "k_proj output (before RoPE)"});
      p.push_back({n.v, c.kv_dim(), "v_proj output"});
      p.push_back({n.mixer, H, "attention output (o_proj), before residual_multiplier"});
    }
    if (c.has_experts()) {
      p.push_back({n.router, c.num_local_experts, "router logits, pre-top-k (replacing them changes the routing)"});
      p.push_back({n.moe, H, "MoE output (top-k experts combined)"});
    }
    p.push_back({n.shared, H, "shared MLP output"});
    p.push_back({n.layer, H, "layer output (residual stream)"});
  }
  p.push_back({"model.norm", H, "final RMSNorm output"});
  // As for every model here, "lm_head" is the logits: HF's lm_head module output divided by
  // logits_scaling, what GraniteMoeHybridForCausalLM returns and what validate compares.
  p.push_back({"lm_head", c.vocab_size, "logits (lm_head output / logits_scaling)"});
  return p;
}

void GraniteHybridModel::attention(const GraniteLayerWeights& L, const LayerNames& N, const ForwardBatch& b,
                                   const float* x, float* out, cache::KvCache& kv,
                                   const std::vector<int64_t>& positions, ProbeHooks* hooks,
                                   const ProbeRows& meta) const {
  const io::GraniteHybridConfig& c = cfg_;
  const int T = static_cast<int>(b.tokens.size()), H = c.hidden_size;
  const int nq = c.num_attention_heads, nkv = c.num_key_value_heads, d = c.head_dim;
  const int qd = c.q_dim(), kvd = c.kv_dim();
  auto bias = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  auto probe = [&](const std::string& name, float* data, int cols) {
    if (hooks && hooks->wants(name)) hooks->visit(name, data, T, cols, meta);
  };
  std::vector<float> q(std::size_t(T) * qd), k(std::size_t(T) * kvd), v(std::size_t(T) * kvd), o(std::size_t(T) * qd);
  kernels::gemm(x, T, H, L.attn.q, bias(L.attn.q_bias), q.data(), qd);
  kernels::gemm(x, T, H, L.attn.k, bias(L.attn.k_bias), k.data(), kvd);
  kernels::gemm(x, T, H, L.attn.v, bias(L.attn.v_bias), v.data(), kvd);
  probe(N.q, q.data(), qd);
  probe(N.k, k.data(), kvd);
  probe(N.v, v.data(), kvd);
  if (c.use_rope) {
    kernels::rope_apply_at(q.data(), T, nq, d, positions.data(), inv_freq_.data());
    kernels::rope_apply_at(k.data(), T, nkv, d, positions.data(), inv_freq_.data());
  }
  // Every key of the pass is in the cache before any query reads it; each query row then attends
  // to positions 0..its own, whichever pass wrote them.
  float* kc = kv.k(L.ordinal);
  float* vc = kv.v(L.ordinal);
  std::vector<kernels::AttnSeq> seqs;
  int64_t row = 0;
  for (const SeqChunk& s : b.seqs) {
    const int* table = kv.block_table(s.slot);
    kernels::kv_write(kv.layout(), kc, vc, table, s.start, s.n, k.data() + row * kvd, v.data() + row * kvd);
    seqs.push_back({row, s.n, s.start, table});
    row += s.n;
  }
  kernels::attention_varlen(kv.layout(), nq, static_cast<float>(c.attention_multiplier), q.data(), seqs.data(),
                            static_cast<int>(seqs.size()), kc, vc, o.data());
  kernels::gemm(o.data(), T, qd, L.attn.o, bias(L.attn.o_bias), out, H);
}

void GraniteHybridModel::feed_forward(const GraniteLayerWeights& L, const LayerNames& N, int T, const float* x,
                                      float* out, ProbeHooks* hooks, const ProbeRows& meta) const {
  const io::GraniteHybridConfig& c = cfg_;
  const int H = c.hidden_size, S = c.shared_intermediate_size;
  auto probe = [&](const std::string& name, float* data, int cols) {
    if (hooks && hooks->wants(name)) hooks->visit(name, data, T, cols, meta);
  };
  std::vector<float> moe;
  if (c.has_experts()) {
    // The router probe is an interception point: replaced logits are what top-k reads, in either
    // routing pattern (granite_moe.h).
    const MoeBlockShape s{H, c.num_local_experts, c.num_experts_per_tok, c.intermediate_size};
    moe.resize(std::size_t(T) * H);
    granite_moe_forward(opts_.moe_routing, L.moe, s, x, T, N.router, hooks, meta, moe.data());
    probe(N.moe, moe.data(), H);
  }
  std::vector<float> gu(std::size_t(T) * 2 * S), act(std::size_t(T) * S);
  kernels::gemm(x, T, H, L.shared.in, nullptr, gu.data(), 2 * S);
  kernels::swiglu(gu.data(), T, S, act.data());
  kernels::gemm(act.data(), T, S, L.shared.out, nullptr, out, H);
  probe(N.shared, out, H);
  if (!moe.empty())
    for (std::size_t i = 0; i < moe.size(); ++i) out[i] = moe[i] + out[i];
}

void GraniteHybridModel::forward(const ForwardBatch& b, cache::ModelCache& mc, ScanMode mode, float* logits,
                                 ProbeHooks* hooks) const {
  validate_batch(*this, b, mc, mode);
  const io::GraniteHybridConfig& c = cfg_;
  const int T = static_cast<int>(b.tokens.size()), H = c.hidden_size, V = c.vocab_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float emb_mult = static_cast<float>(c.embedding_multiplier);
  const float res_mult = static_cast<float>(c.residual_multiplier);
  const float scaling = static_cast<float>(c.logits_scaling);
  const ProbeRows meta = probe_rows(b, hooks);
  auto probe = [&](const std::string& name, float* data, int cols) {
    if (hooks && hooks->wants(name)) hooks->visit(name, data, T, cols, meta);
  };
  std::vector<int64_t> positions;
  positions.reserve(static_cast<std::size_t>(T));
  for (const SeqChunk& s : b.seqs)
    for (int j = 0; j < s.n; ++j) positions.push_back(s.start + j);

  std::vector<float> resid(std::size_t(T) * H), normed(std::size_t(T) * H), out(std::size_t(T) * H);
  const io::TensorView& E = *w_.embeddings;
  for (int t = 0; t < T; ++t) {
    float* dst = resid.data() + std::size_t(t) * H;
    const std::size_t off = std::size_t(b.tokens[static_cast<std::size_t>(t)]) * H;
    if (E.dtype == DType::F32) {
      std::memcpy(dst, static_cast<const float*>(E.data) + off, std::size_t(H) * 4);
    } else {
      const uint16_t* src = static_cast<const uint16_t*>(E.data) + off;
      for (int i = 0; i < H; ++i) dst[i] = E.dtype == DType::BF16 ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
    }
  }
  probe("model.embed_tokens", resid.data(), H);
  for (float& v : resid) v = v * emb_mult;

  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const GraniteLayerWeights& L = w_.layers[static_cast<std::size_t>(l)];
    const LayerNames& N = names_[static_cast<std::size_t>(l)];
    kernels::rmsnorm(resid.data(), T, H, L.input_norm.data(), eps, normed.data());
    if (L.kind == GraniteLayerType::Mamba)
      mamba2_mixer_forward(mamba_cfg_, L.mamba, L.ordinal, b, normed.data(), out.data(), *mc.mamba(), mode,
                           {N.in_proj, N.conv1d, N.dt, N.norm}, hooks, meta);
    else
      attention(L, N, b, normed.data(), out.data(), *mc.kv(), positions, hooks, meta);
    probe(N.mixer, out.data(), H);
    // HF: residual + hidden * residual_multiplier (the product rounded, then the add).
    for (std::size_t i = 0; i < resid.size(); ++i) resid[i] = resid[i] + out[i] * res_mult;
    kernels::rmsnorm(resid.data(), T, H, L.post_norm.data(), eps, normed.data());
    feed_forward(L, N, T, normed.data(), out.data(), hooks, meta);
    for (std::size_t i = 0; i < resid.size(); ++i) resid[i] = resid[i] + out[i] * res_mult;
    probe(N.layer, resid.data(), H);
  }
  for (const SeqChunk& s : b.seqs) mc.set_position(s.slot, s.start + s.n);

  if (hooks && (hooks->wants("model.norm") || hooks->wants("lm_head"))) {
    // A probed head sees every row; row-wise norm and the M-invariant GEMM give the asked-for
    // rows the bits of the fast path below.
    std::vector<float> hn(std::size_t(T) * H), all(std::size_t(T) * V);
    kernels::rmsnorm(resid.data(), T, H, w_.norm.data(), eps, hn.data());
    probe("model.norm", hn.data(), H);
    kernels::gemm(hn.data(), T, H, w_.lm_head, nullptr, all.data(), V);
    for (float& x : all) x = x / scaling;
    probe("lm_head", all.data(), V);
    for (std::size_t i = 0; i < b.logit_rows.size(); ++i)
      std::memcpy(logits + i * std::size_t(V), all.data() + std::size_t(b.logit_rows[i]) * V, std::size_t(V) * 4);
    return;
  }
  const int R = static_cast<int>(b.logit_rows.size());
  if (R == 0) return;
  std::vector<float> last(std::size_t(R) * H);
  for (int i = 0; i < R; ++i)
    std::memcpy(last.data() + std::size_t(i) * H, resid.data() + std::size_t(b.logit_rows[static_cast<std::size_t>(i)]) * H,
                std::size_t(H) * 4);
  kernels::rmsnorm(last.data(), R, H, w_.norm.data(), eps, last.data());
  kernels::gemm(last.data(), R, H, w_.lm_head, nullptr, logits, V);
  // logits_scaling is a divisor in HF (logits / logits_scaling), not a multiplier by its inverse.
  for (std::size_t i = 0; i < std::size_t(R) * V; ++i) logits[i] = logits[i] / scaling;
}

}  // namespace parity::model
