#include "model/hybrid_weights.h"

#include <cstring>

#include "common/error.h"
#include "kernels/attention.h"
#include "model/weight_loading.h"

namespace parity::model {
namespace {

using io::Activation;

bool per_expert(const std::string& pattern) { return pattern.find("{e}") != std::string::npos; }

// Expert e of a stacked [E, rows, cols] tensor, packed as one [rows, cols] weight.
kernels::PackedWeight pack_expert(const io::TensorView& t, int e) {
  const int64_t rows = t.shape[1], cols = t.shape[2];
  const auto* base = static_cast<const uint8_t*>(t.data);
  const std::size_t off = static_cast<std::size_t>(e) * std::size_t(rows) * std::size_t(cols) * dtype_size(t.dtype);
  return kernels::pack_weight(base + off, t.dtype, static_cast<int>(rows), static_cast<int>(cols));
}

// The experts' in or out weights, stacked or one tensor per expert.
std::vector<kernels::PackedWeight> load_experts(const Checkpoint& ck, const std::string& pattern, int E, int64_t rows,
                                                int64_t cols) {
  std::vector<kernels::PackedWeight> out;
  if (per_expert(pattern)) {
    for (int e = 0; e < E; ++e) out.push_back(pack_tensor(need_tensor(ck, io::expert_tensor(pattern, e), {rows, cols})));
  } else {
    const io::TensorView& t = need_tensor(ck, pattern, {E, rows, cols});
    for (int e = 0; e < E; ++e) out.push_back(pack_expert(t, e));
  }
  return out;
}

MlpWeights load_mlp(const Checkpoint& ck, const io::MlpSpec& m, int64_t H) {
  const int64_t F = m.width;
  MlpWeights w;
  if (m.act == Activation::ReLU2) {
    w.in = pack_tensor(need_tensor(ck, m.up, {F, H}));
  } else if (!m.gate_up.empty()) {
    w.in = pack_tensor(need_tensor(ck, m.gate_up, {2 * F, H}));
  } else {
    // gate_proj and up_proj as one [2F, H] weight: each output column is its own dot product, so the fused GEMM
    // gives the bits of two.
    std::vector<float> gu = need_floats(ck, m.gate, {F, H});
    std::vector<float> up = need_floats(ck, m.up, {F, H});
    gu.insert(gu.end(), up.begin(), up.end());
    w.in = kernels::pack_weight(gu.data(), DType::F32, static_cast<int>(2 * F), static_cast<int>(H));
  }
  w.out = pack_tensor(need_tensor(ck, m.down, {H, F}));
  return w;
}

AttentionWeights load_attention(const Checkpoint& ck, const io::AttentionSpec& a, int64_t H) {
  const int64_t q = int64_t(a.heads) * a.head_dim, kv = int64_t(a.kv_heads) * a.head_dim;
  AttentionWeights w;
  w.q = pack_tensor(need_tensor(ck, a.q + ".weight", {q, H}));
  w.k = pack_tensor(need_tensor(ck, a.k + ".weight", {kv, H}));
  w.v = pack_tensor(need_tensor(ck, a.v + ".weight", {kv, H}));
  w.o = pack_tensor(need_tensor(ck, a.o + ".weight", {H, q}));
  if (a.bias) {
    w.q_bias = need_floats(ck, a.q + ".bias", {q});
    w.k_bias = need_floats(ck, a.k + ".bias", {kv});
    w.v_bias = need_floats(ck, a.v + ".bias", {kv});
    w.o_bias = need_floats(ck, a.o + ".bias", {H});
  }
  if (a.rope) {
    w.inv_freq.resize(static_cast<std::size_t>(a.rotary_dim / 2));
    kernels::rope_inv_freq(a.rotary_dim, static_cast<float>(a.rope_theta), w.inv_freq.data());
  }
  return w;
}

MoeWeights load_moe(const Checkpoint& ck, const io::MoeSpec& m, int64_t H) {
  const int E = m.experts;
  const int64_t F = m.width, in_rows = m.act == Activation::SwiGLU ? 2 * F : F;
  MoeWeights w;
  w.router = pack_tensor(need_tensor(ck, m.router_weight, {E, H}));
  if (!m.correction_bias.empty()) w.correction_bias = need_floats(ck, m.correction_bias, {E});
  w.w_in = load_experts(ck, m.experts_in, E, in_rows, H);
  w.w_out = load_experts(ck, m.experts_out, E, H, F);
  return w;
}

// FalconH1's ssm_multipliers as a per-column vector over in_proj's [z | x | B | C | dt].
std::vector<float> segment_scale(const io::Mamba2Config& c, const io::MambaSpec& m) {
  const int I = c.intermediate_size, GN = c.n_groups * c.state_size;
  const int ends[5] = {I, 2 * I, 2 * I + GN, 2 * I + 2 * GN, c.in_proj_dim()};
  std::vector<float> v(static_cast<std::size_t>(c.in_proj_dim()));
  int seg = 0;
  for (int i = 0; i < c.in_proj_dim(); ++i) {
    while (i >= ends[seg]) ++seg;
    v[static_cast<std::size_t>(i)] = static_cast<float>(m.segment_multipliers[static_cast<std::size_t>(seg)]);
  }
  return v;
}

}  // namespace

HybridWeights load_hybrid_weights(const io::HybridSpec& s, const Checkpoint& ck) {
  const int64_t H = s.hidden_size, V = s.vocab_size;
  HybridWeights w;
  w.embeddings = &need_tensor(ck, s.embed, {V, H});
  int mamba_seen = 0, attn_seen = 0;
  for (const io::HybridLayer& L : s.layers) {
    std::vector<SubLayerWeights> subs;
    for (const io::SubLayer& sub : L.subs) {
      SubLayerWeights sw;
      sw.norm = need_floats(ck, sub.norm, {H});
      for (const io::Block& b : sub.blocks) {
        BlockWeights bw;
        switch (b.kind) {
          case io::BlockKind::Mamba:
            bw.ordinal = mamba_seen++;
            bw.mamba = load_mamba2_mixer_weights(s.mamba, ck, b.mamba.prefix);
            if (b.mamba.has_segment_multipliers) bw.in_proj_scale = segment_scale(s.mamba, b.mamba);
            break;
          case io::BlockKind::Attention:
            bw.ordinal = attn_seen++;
            bw.attn = load_attention(ck, b.attn, H);
            break;
          case io::BlockKind::Mlp:
            bw.mlp = load_mlp(ck, b.mlp, H);
            break;
          case io::BlockKind::Moe:
            bw.moe = load_moe(ck, b.moe, H);
            if (b.moe.has_shared) bw.mlp = load_mlp(ck, b.moe.shared, H);
            break;
        }
        sw.blocks.push_back(std::move(bw));
      }
      subs.push_back(std::move(sw));
    }
    w.layers.push_back(std::move(subs));
  }
  w.final_norm = need_floats(ck, s.final_norm, {H});
  w.lm_head = s.lm_head.empty() ? pack_tensor(*w.embeddings) : pack_tensor(need_tensor(ck, s.lm_head, {V, H}));
  return w;
}

std::vector<std::string> hybrid_tensor_names(const io::HybridSpec& s) {
  std::vector<std::string> n = {s.embed};
  auto mlp = [&](const io::MlpSpec& m) {
    for (const std::string* t : {&m.gate_up, &m.gate, &m.up, &m.down})
      if (!t->empty()) n.push_back(*t);
  };
  for (const io::HybridLayer& L : s.layers)
    for (const io::SubLayer& sub : L.subs) {
      n.push_back(sub.norm);
      for (const io::Block& b : sub.blocks) {
        switch (b.kind) {
          case io::BlockKind::Mamba:
            for (const char* t : {"in_proj.weight", "in_proj.bias", "conv1d.weight", "conv1d.bias", "A_log",
                                  "dt_bias", "D", "norm.weight", "out_proj.weight", "out_proj.bias"})
              n.push_back(b.mamba.prefix + t);
            break;
          case io::BlockKind::Attention:
            for (const std::string* t : {&b.attn.q, &b.attn.k, &b.attn.v, &b.attn.o}) {
              n.push_back(*t + ".weight");
              n.push_back(*t + ".bias");
            }
            break;
          case io::BlockKind::Mlp:
            mlp(b.mlp);
            break;
          case io::BlockKind::Moe:
            n.push_back(b.moe.router_weight);
            if (!b.moe.correction_bias.empty()) n.push_back(b.moe.correction_bias);
            for (const std::string* t : {&b.moe.experts_in, &b.moe.experts_out}) {
              if (per_expert(*t))
                for (int e = 0; e < b.moe.experts; ++e) n.push_back(io::expert_tensor(*t, e));
              else
                n.push_back(*t);
            }
            if (b.moe.has_shared) mlp(b.moe.shared);
            break;
        }
      }
    }
  n.push_back(s.final_norm);
  if (!s.lm_head.empty()) n.push_back(s.lm_head);
  return n;
}

}  // namespace parity::model
