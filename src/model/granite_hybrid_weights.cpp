#include "model/granite_hybrid_weights.h"

#include <string>

#include "model/weight_loading.h"

namespace parity::model {
namespace {

// Expert e of a stacked [E, rows, cols] tensor, packed as one [rows, cols] weight.
kernels::PackedWeight pack_expert(const io::TensorView& t, int e) {
  const int64_t rows = t.shape[1], cols = t.shape[2];
  const auto* base = static_cast<const uint8_t*>(t.data);
  const std::size_t off = static_cast<std::size_t>(e) * std::size_t(rows) * std::size_t(cols) * dtype_size(t.dtype);
  return kernels::pack_weight(base + off, t.dtype, static_cast<int>(rows), static_cast<int>(cols));
}

}  // namespace

GraniteHybridWeights load_granite_hybrid_weights(const io::GraniteHybridConfig& c, const Checkpoint& ck) {
  const int64_t H = c.hidden_size, V = c.vocab_size;
  GraniteHybridWeights w;
  w.embeddings = &need_tensor(ck, "model.embed_tokens.weight", {V, H});
  int mamba_seen = 0, attn_seen = 0;
  const bool has_mamba = c.num_layers_of(io::GraniteLayerType::Mamba) > 0;
  const io::Mamba2Config mcfg = has_mamba ? io::to_mamba2_config(c) : io::Mamba2Config{};
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    GraniteLayerWeights L;
    L.kind = c.layer_types[static_cast<std::size_t>(l)];
    L.input_norm = widen(need_tensor(ck, p + "input_layernorm.weight", {H}));
    if (L.kind == io::GraniteLayerType::Mamba) {
      L.ordinal = mamba_seen++;
      L.mamba = load_mamba2_mixer_weights(mcfg, ck, p + "mamba.");
    } else {
      L.ordinal = attn_seen++;
      const int64_t q = c.q_dim(), kv = c.kv_dim();
      const std::string a = p + "self_attn.";
      L.attn.q = pack_tensor(need_tensor(ck, a + "q_proj.weight", {q, H}));
      L.attn.k = pack_tensor(need_tensor(ck, a + "k_proj.weight", {kv, H}));
      L.attn.v = pack_tensor(need_tensor(ck, a + "v_proj.weight", {kv, H}));
      L.attn.o = pack_tensor(need_tensor(ck, a + "o_proj.weight", {H, q}));
      if (c.attention_bias) {
        L.attn.q_bias = widen(need_tensor(ck, a + "q_proj.bias", {q}));
        L.attn.k_bias = widen(need_tensor(ck, a + "k_proj.bias", {kv}));
        L.attn.v_bias = widen(need_tensor(ck, a + "v_proj.bias", {kv}));
        L.attn.o_bias = widen(need_tensor(ck, a + "o_proj.bias", {H}));
      }
    }
    L.post_norm = widen(need_tensor(ck, p + "post_attention_layernorm.weight", {H}));
    if (c.has_experts()) {
      const int64_t E = c.num_local_experts, F = c.intermediate_size;
      const std::string m = p + "block_sparse_moe.";
      L.moe.router = pack_tensor(need_tensor(ck, m + "router.layer.weight", {E, H}));
      const io::TensorView& in = need_tensor(ck, m + "input_linear.weight", {E, 2 * F, H});
      const io::TensorView& out = need_tensor(ck, m + "output_linear.weight", {E, H, F});
      for (int e = 0; e < E; ++e) {
        L.moe.w_in.push_back(pack_expert(in, e));
        L.moe.w_out.push_back(pack_expert(out, e));
      }
    }
    const int64_t S = c.shared_intermediate_size;
    L.shared.in = pack_tensor(need_tensor(ck, p + "shared_mlp.input_linear.weight", {2 * S, H}));
    L.shared.out = pack_tensor(need_tensor(ck, p + "shared_mlp.output_linear.weight", {H, S}));
    w.layers.push_back(std::move(L));
  }
  w.norm = widen(need_tensor(ck, "model.norm.weight", {H}));
  w.lm_head = c.tie_word_embeddings ? pack_tensor(*w.embeddings) : pack_tensor(need_tensor(ck, "lm_head.weight", {V, H}));
  return w;
}

std::vector<std::string> granite_hybrid_tensor_names(const io::GraniteHybridConfig& c) {
  std::vector<std::string> n = {"model.embed_tokens.weight"};
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    n.push_back(p + "input_layernorm.weight");
    if (c.layer_types[static_cast<std::size_t>(l)] == io::GraniteLayerType::Mamba) {
      for (const char* s : {"in_proj.weight", "in_proj.bias", "conv1d.weight", "conv1d.bias", "A_log", "dt_bias", "D",
                            "norm.weight", "out_proj.weight", "out_proj.bias"})
        n.push_back(p + "mamba." + s);
    } else {
      for (const char* s : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
        n.push_back(p + "self_attn." + s + ".weight");
        n.push_back(p + "self_attn." + s + ".bias");
      }
    }
    n.push_back(p + "post_attention_layernorm.weight");
    for (const char* s : {"router.layer.weight", "input_linear.weight", "output_linear.weight"})
      n.push_back(p + "block_sparse_moe." + s);
    n.push_back(p + "shared_mlp.input_linear.weight");
    n.push_back(p + "shared_mlp.output_linear.weight");
  }
  n.push_back("model.norm.weight");
  n.push_back("lm_head.weight");
  return n;
}

}  // namespace parity::model
