#include "io/hybrid_spec.h"

#include <limits>

#include "common/error.h"

namespace parity::io {

const char* to_string(BlockKind k) {
  switch (k) {
    case BlockKind::Mamba: return "mamba";
    case BlockKind::Attention: return "attention";
    case BlockKind::Mlp: return "mlp";
    case BlockKind::Moe: return "moe";
  }
  return "?";
}

bool is_hybrid_architecture(const std::string& arch) {
  return arch == "GraniteMoeHybridForCausalLM" || arch == "NemotronHForCausalLM" || arch == "BambaForCausalLM" ||
         arch == "FalconH1ForCausalLM";
}

HybridSpec hybrid_spec_from_config(const nlohmann::json& cfg, const HasTensor& has_tensor) {
  const std::string arch = architecture_of(cfg);
  if (arch == "GraniteMoeHybridForCausalLM") return granite_hybrid_spec(cfg);
  if (arch == "NemotronHForCausalLM") return nemotron_h_spec(cfg, has_tensor);
  if (arch == "BambaForCausalLM") return bamba_spec(cfg);
  if (arch == "FalconH1ForCausalLM") return falcon_h1_spec(cfg);
  throw Error("architecture '" + arch + "' is not a hybrid model");
}

void finish_hybrid_spec(HybridSpec& s) {
  s.num_mamba = s.num_attention = 0;
  // Every width a kernel is called with must fit an int with room for the doubled SwiGLU width.
  constexpr long long kMax = std::numeric_limits<int>::max() / 4;
  auto fits = [&](long long v, const std::string& what) {
    if (v > kMax) throw Error("config.json: " + what + " = " + std::to_string(v) + " is too large");
  };
  for (const HybridLayer& L : s.layers)
    for (const SubLayer& sub : L.subs)
      for (const Block& b : sub.blocks) {
        fits(static_cast<long long>(b.attn.heads) * b.attn.head_dim, "num_attention_heads * head_dim");
        fits(static_cast<long long>(b.attn.kv_heads) * b.attn.head_dim, "num_key_value_heads * head_dim");
        fits(b.mlp.width, "the MLP width");
        fits(b.moe.width, "the expert width");
        fits(b.moe.shared.width, "the shared expert width");
        if (b.kind == BlockKind::Mamba) ++s.num_mamba;
        if (b.kind != BlockKind::Attention) continue;
        if (s.num_attention++ == 0) {
          s.kv_heads = b.attn.kv_heads;
          s.head_dim = b.attn.head_dim;
        } else if (s.kv_heads != b.attn.kv_heads || s.head_dim != b.attn.head_dim) {
          throw Error("config.json: attention blocks of different KV shapes are not supported");
        }
      }
  s.mamba.num_hidden_layers = s.num_mamba;
}

std::string expert_tensor(const std::string& pattern, int e) {
  const std::size_t at = pattern.find("{e}");
  return at == std::string::npos ? pattern : pattern.substr(0, at) + std::to_string(e) + pattern.substr(at + 3);
}

}  // namespace parity::io
