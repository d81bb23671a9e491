#include "model/hybrid_model.h"

#include <cstring>

#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/moe.h"
#include "kernels/norm.h"
#include "model/hybrid_moe.h"
#include "model/mamba2_mixer.h"

namespace parity::model {

using io::BlockKind;

struct HybridModel::Pass {
  const ForwardBatch& b;
  cache::ModelCache& cache;
  ScanMode mode;
  ProbeHooks* hooks;
  ProbeRows meta;
  std::vector<int64_t> positions;
  int T;
  void probe(const std::string& name, float* data, int cols) const {
    if (hooks && !name.empty() && hooks->wants(name)) hooks->visit(name, data, T, cols, meta);
  }
};

std::unique_ptr<HybridModel> HybridModel::load(const Checkpoint& ck, const ModelOptions& opts) {
  return build(ck, io::hybrid_spec_from_config(ck.config, [&ck](const std::string& n) { return ck.find(n) != nullptr; }),
               opts);
}

std::unique_ptr<HybridModel> HybridModel::load_rank(const Checkpoint& ck, const io::HybridSpec& rank_spec,
                                                    const ModelOptions& opts, const cache::ModelCacheSpec& cache,
                                                    TensorParallelRank tp) {
  auto m = build(ck, rank_spec, opts);
  m->cache_spec_ = cache;
  m->tp_ = tp;
  return m;
}

std::unique_ptr<HybridModel> HybridModel::build(const Checkpoint& ck, io::HybridSpec spec, const ModelOptions& opts) {
  auto m = std::unique_ptr<HybridModel>(new HybridModel());
  m->spec_ = std::move(spec);
  m->opts_ = opts;
  m->origin_ = ck.origin;
  m->keepalive_ = ck.keepalive;
  const io::HybridSpec& s = m->spec_;
  m->w_ = load_hybrid_weights(s, ck);
  m->cache_spec_.num_mamba_layers = s.num_mamba;
  m->cache_spec_.mamba = s.mamba;
  m->cache_spec_.num_attention_layers = s.num_attention;
  m->cache_spec_.num_kv_heads = s.kv_heads;
  m->cache_spec_.head_dim = s.head_dim;
  m->cache_spec_.chunk_size = s.mamba.chunk_size;
  return m;
}

std::vector<ProbePoint> HybridModel::probe_points() const { return hybrid_probe_points(spec_); }

std::vector<ProbePoint> hybrid_probe_points(const io::HybridSpec& s) {
  const int H = s.hidden_size;
  const io::Mamba2Config& mc = s.mamba;
  std::vector<ProbePoint> p;
  p.push_back({s.embed_probe, H, s.embedding_multiplier != 1.0 ? "token embeddings (before embedding_multiplier)"
                                                               : "token embeddings"});
  for (const io::HybridLayer& L : s.layers) {
    for (const io::SubLayer& sub : L.subs) {
      const std::string before_res = sub.residual_multiplier != 1.0 ? ", before residual_multiplier" : "";
      for (const io::Block& b : sub.blocks) {
        const std::string before_out = b.out_multiplier != 1.0 ? ", before its output multiplier" : before_res;
        switch (b.kind) {
          case BlockKind::Mamba:
            p.push_back({b.mamba.in_proj_probe, mc.in_proj_dim(), "in_proj output [z | xBC | dt]"});
            p.push_back({b.mamba.conv1d_probe, mc.conv_dim(), "causal conv1d output over xBC, before SiLU"});
            p.push_back({b.mamba.dt_probe, mc.num_heads, "raw dt (before dt_bias, softplus and clamp)"});
            if (mc.rms_norm) p.push_back({b.mamba.norm_probe, mc.intermediate_size, "gated RMSNorm output"});
            p.push_back({b.probe, H, "mamba mixer output (out_proj)" + before_out});
            break;
          case BlockKind::Attention: {
            const int q = b.attn.heads * b.attn.head_dim, kv = b.attn.kv_heads * b.attn.head_dim;
            const std::string rope = b.attn.rope ? " (before RoPE)" : "";
            p.push_back({b.attn.q_probe, q, "q_proj output" + rope});
            p.push_back({b.attn.k_probe, kv, "k_proj output" + rope});
            p.push_back({b.attn.v_probe, kv, "v_proj output"});
            p.push_back({b.probe, H, "attention output (o_proj)" + before_out});
            break;
          }
          case BlockKind::Mlp:
            p.push_back({b.probe, H,
                         b.probe.size() >= 10 && b.probe.compare(b.probe.size() - 10, 10, "shared_mlp") == 0
                             ? std::string("shared MLP output")
                             : "MLP output" + before_out});
            break;
          case BlockKind::Moe:
            p.push_back({b.moe.router_probe, b.moe.experts,
                         "router logits, pre-top-k (replacing them changes the routing)"});
            if (b.moe.has_shared) p.push_back({b.moe.shared_probe, H, "shared expert output"});
            p.push_back({b.probe, H,
                         b.moe.has_shared ? "MoE output (top-k experts + shared expert)"
                                          : "MoE output (top-k experts combined)"});
            break;
        }
      }
    }
    p.push_back({L.probe, H, "layer output (residual stream)"});
  }
  p.push_back({s.final_norm_probe, H, "final RMSNorm output"});
  // As for every model here, "lm_head" is the logits: what the family's ForCausalLM returns (Granite: divided
  // by logits_scaling; FalconH1: times lm_head_multiplier), what validate compares.
  p.push_back({"lm_head", s.vocab_size,
               s.logits_divisor != 1.0       ? "logits (lm_head output / logits_scaling)"
               : s.logits_multiplier != 1.0 ? "logits (lm_head output · lm_head_multiplier)"
                                            : "logits (lm_head output)"});
  return p;
}

void HybridModel::mlp(const io::MlpSpec& m, const MlpWeights& w, int T, const float* x, float* out) const {
  const int H = spec_.hidden_size, F = m.width;
  std::vector<float> act(std::size_t(T) * F);
  if (m.act == io::Activation::ReLU2) {
    std::vector<float> up(std::size_t(T) * F);
    kernels::gemm(x, T, H, w.in, nullptr, up.data(), F);
    kernels::relu_squared(up.data(), int64_t(T) * F, act.data());
  } else {
    std::vector<float> gu(std::size_t(T) * 2 * F);
    kernels::gemm(x, T, H, w.in, nullptr, gu.data(), 2 * F);
    if (m.gate_multiplier != 1.0) {  // FalconH1: silu(gate_proj(x) · mlp_multipliers[0])
      const float gm = static_cast<float>(m.gate_multiplier);
      for (int t = 0; t < T; ++t)
        for (int i = 0; i < F; ++i) gu[std::size_t(t) * 2 * F + i] = gu[std::size_t(t) * 2 * F + i] * gm;
    }
    kernels::swiglu(gu.data(), T, F, act.data());
  }
  kernels::gemm(act.data(), T, F, w.out, nullptr, out, H);
  tp_.sum(out, std::size_t(T) * H);  // down_proj by rows: each rank's is a partial sum
  if (m.down_multiplier != 1.0) {
    const float dm = static_cast<float>(m.down_multiplier);
    for (std::size_t i = 0; i < std::size_t(T) * H; ++i) out[i] = out[i] * dm;
  }
}

void HybridModel::attention(const io::AttentionSpec& a, const AttentionWeights& w, int ordinal, Pass& p,
                            const float* x, float* out) const {
  const int T = p.T, H = spec_.hidden_size, d = a.head_dim;
  const int qd = a.heads * d, kvd = a.kv_heads * d;
  auto bias = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  std::vector<float> q(std::size_t(T) * qd), k(std::size_t(T) * kvd), v(std::size_t(T) * kvd), o(std::size_t(T) * qd);
  kernels::gemm(x, T, H, w.q, bias(w.q_bias), q.data(), qd);
  kernels::gemm(x, T, H, w.k, bias(w.k_bias), k.data(), kvd);
  kernels::gemm(x, T, H, w.v, bias(w.v_bias), v.data(), kvd);
  p.probe(a.q_probe, q.data(), qd);
  p.probe(a.k_probe, k.data(), kvd);
  p.probe(a.v_probe, v.data(), kvd);
  if (a.key_multiplier != 1.0) {  // FalconH1: k_proj(x) · key_multiplier, before RoPE
    const float km = static_cast<float>(a.key_multiplier);
    for (float& e : k) e = e * km;
  }
  if (a.rope) {
    kernels::rope_apply_partial_at(q.data(), T, a.heads, d, a.rotary_dim, p.positions.data(), w.inv_freq.data());
    kernels::rope_apply_partial_at(k.data(), T, a.kv_heads, d, a.rotary_dim, p.positions.data(), w.inv_freq.data());
  }
  // Every key of the pass is in the cache before any query reads it; each query row then attends to
  // positions 0..its own, whichever pass wrote them.
  cache::KvCache& kv = *p.cache.kv();
  float* kc = kv.k(ordinal, tp_.rank);
  float* vc = kv.v(ordinal, tp_.rank);
  std::vector<kernels::AttnSeq> seqs;
  int64_t row = 0;
  for (const SeqChunk& s : p.b.seqs) {
    const int* table = kv.block_table(s.slot);
    kernels::kv_write(kv.layout(), kc, vc, table, s.start, s.n, k.data() + row * kvd, v.data() + row * kvd);
    seqs.push_back({row, s.n, s.start, table});
    row += s.n;
  }
  kernels::attention_varlen(kv.layout(), a.heads, static_cast<float>(a.scale), q.data(), seqs.data(),
                            static_cast<int>(seqs.size()), kc, vc, o.data());
  kernels::gemm(o.data(), T, qd, w.o, bias(w.o_bias), out, H);
  tp_.sum(out, std::size_t(T) * H);  // o_proj by rows: each rank's is a partial sum
}

void HybridModel::run_block(const io::Block& b, const BlockWeights& w, Pass& p, const float* x, float* out) const {
  const int T = p.T, H = spec_.hidden_size;
  switch (b.kind) {
    case BlockKind::Mamba:
      mamba2_mixer_forward(spec_.mamba, w.mamba, w.ordinal, p.b, x, out, *p.cache.mamba(tp_.rank), p.mode,
                           {b.mamba.in_proj_probe, b.mamba.conv1d_probe, b.mamba.dt_probe, b.mamba.norm_probe},
                           p.hooks, p.meta, w.in_proj_scale.empty() ? nullptr : w.in_proj_scale.data());
      tp_.sum(out, std::size_t(T) * H);  // out_proj by rows: each rank's is a partial sum
      break;
    case BlockKind::Attention:
      attention(b.attn, w.attn, w.ordinal, p, x, out);
      break;
    case BlockKind::Mlp:
      mlp(b.mlp, w.mlp, T, x, out);
      break;
    case BlockKind::Moe:
      // The router probe is an interception point: replaced logits are what the routing reads, in either
      // routing pattern (hybrid_moe.h).
      moe_forward(opts_.moe_routing, w.moe, b.moe, H, x, T, p.hooks, p.meta, out);
      tp_.sum(out, std::size_t(T) * H);  // every expert's down_proj by rows: partial sums
      if (b.moe.has_shared) {  // NemotronH: routed experts + shared_experts(x)
        std::vector<float> sh(std::size_t(T) * H);
        mlp(b.moe.shared, w.mlp, T, x, sh.data());
        p.probe(b.moe.shared_probe, sh.data(), H);
        for (std::size_t i = 0; i < sh.size(); ++i) out[i] = out[i] + sh[i];
      }
      break;
  }
}

void HybridModel::forward(const ForwardBatch& b, cache::ModelCache& mc, ScanMode mode, float* logits,
                          ProbeHooks* hooks) const {
  validate_batch(*this, b, mc, mode);
  const io::HybridSpec& s = spec_;
  const int T = static_cast<int>(b.tokens.size()), H = s.hidden_size, V = s.vocab_size;
  const float eps = static_cast<float>(s.rms_norm_eps);
  Pass p{b, mc, mode, hooks, probe_rows(b, hooks), {}, T};
  p.positions.reserve(static_cast<std::size_t>(T));
  for (const SeqChunk& sq : b.seqs)
    for (int j = 0; j < sq.n; ++j) p.positions.push_back(sq.start + j);

  const std::size_t n = std::size_t(T) * H;
  std::vector<float> resid(n), normed(n), scaled, out(n), acc(n);
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
  p.probe(s.embed_probe, resid.data(), H);
  if (s.embedding_multiplier != 1.0) {
    const float em = static_cast<float>(s.embedding_multiplier);
    for (float& v : resid) v = v * em;
  }

  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    const io::HybridLayer& L = s.layers[l];
    for (std::size_t si = 0; si < L.subs.size(); ++si) {
      const io::SubLayer& sub = L.subs[si];
      const SubLayerWeights& sw = w_.layers[l][si];
      kernels::rmsnorm(resid.data(), T, H, sw.norm.data(), eps, normed.data());
      for (std::size_t bi = 0; bi < sub.blocks.size(); ++bi) {
        const io::Block& blk = sub.blocks[bi];
        const float* x = normed.data();
        if (blk.in_multiplier != 1.0) {  // FalconH1: the block reads x · its input multiplier
          const float im = static_cast<float>(blk.in_multiplier);
          scaled.resize(n);
          for (std::size_t i = 0; i < n; ++i) scaled[i] = normed[i] * im;
          x = scaled.data();
        }
        run_block(blk, sw.blocks[bi], p, x, out.data());
        p.probe(blk.probe, out.data(), H);
        // Blocks of one sub-layer are summed in order, each times its output multiplier (1: the value itself).
        const float om = static_cast<float>(blk.out_multiplier);
        if (bi == 0)
          for (std::size_t i = 0; i < n; ++i) acc[i] = out[i] * om;
        else
          for (std::size_t i = 0; i < n; ++i) acc[i] = acc[i] + out[i] * om;
      }
      // HF: residual + hidden * residual_multiplier (the product rounded, then the add).
      const float rm = static_cast<float>(sub.residual_multiplier);
      for (std::size_t i = 0; i < n; ++i) resid[i] = resid[i] + acc[i] * rm;
    }
    p.probe(L.probe, resid.data(), H);
  }
  if (tp_.size == 1)  // ranks share the positions: their caller advances them once
    for (const SeqChunk& sq : b.seqs) mc.set_position(sq.slot, sq.start + sq.n);

  // The logits: Granite divides by logits_scaling, FalconH1 multiplies by lm_head_multiplier; both are 1
  // elsewhere, and x / 1 and x · 1 are x exactly.
  const float div = static_cast<float>(s.logits_divisor), mul = static_cast<float>(s.logits_multiplier);
  if (hooks && (hooks->wants(s.final_norm_probe) || hooks->wants("lm_head"))) {
    // A probed head sees every row; row-wise norm and the M-invariant GEMM give the asked-for rows the bits of
    // the fast path below.
    std::vector<float> hn(n), all(std::size_t(T) * V);
    kernels::rmsnorm(resid.data(), T, H, w_.final_norm.data(), eps, hn.data());
    p.probe(s.final_norm_probe, hn.data(), H);
    kernels::gemm(hn.data(), T, H, w_.lm_head, nullptr, all.data(), V);
    for (float& x : all) x = x / div * mul;
    p.probe("lm_head", all.data(), V);
    for (std::size_t i = 0; i < b.logit_rows.size(); ++i)
      std::memcpy(logits + i * std::size_t(V), all.data() + std::size_t(b.logit_rows[i]) * V, std::size_t(V) * 4);
    return;
  }
  const int R = static_cast<int>(b.logit_rows.size());
  if (R == 0) return;
  std::vector<float> last(std::size_t(R) * H);
  for (int i = 0; i < R; ++i)
    std::memcpy(last.data() + std::size_t(i) * H,
                resid.data() + std::size_t(b.logit_rows[static_cast<std::size_t>(i)]) * H, std::size_t(H) * 4);
  kernels::rmsnorm(last.data(), R, H, w_.final_norm.data(), eps, last.data());
  kernels::gemm(last.data(), R, H, w_.lm_head, nullptr, logits, V);
  for (std::size_t i = 0; i < std::size_t(R) * V; ++i) logits[i] = logits[i] / div * mul;
}

}  // namespace parity::model
