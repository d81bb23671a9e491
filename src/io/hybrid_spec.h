#pragma once
// One description for every hybrid family parity runs (GraniteMoeHybrid, NemotronH, Bamba, FalconH1): a
// per-layer list of residual sub-layers, each an RMSNorm followed by one or more blocks (Mamba2 mixer, GQA
// attention, dense MLP, MoE) whose outputs are summed, with the µP-style multipliers where each family puts
// them. A small adapter per family (granite_config.cpp, nemotron_h_config.cpp, bamba_config.cpp,
// falcon_h1_config.cpp) maps config.json onto it, naming tensors and probe points with the family's Hugging Face
// names; the model (model/hybrid_model.h) runs any such list. The equations are in docs/hybrids.md.
#include <array>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/hf_config.h"

namespace parity::io {

enum class BlockKind { Mamba, Attention, Mlp, Moe };
const char* to_string(BlockKind k);

// Dense MLP / expert activation: SwiGLU = silu(gate) ⊙ up; ReLU2 = relu(up)², no gate (NemotronH).
enum class Activation { SwiGLU, ReLU2 };

// How top-k experts and their weights come from the router logits r [E]:
//  SoftmaxTopK (Granite): the k largest r, then softmax over those k values.
//  SigmoidTopK (NemotronH, DeepSeek-V3's router): s = sigmoid(r); the k largest s + correction bias choose
//    the experts; weights = s of the chosen, divided by their sum when norm_topk_prob, times
//    routed_scaling_factor.
enum class RouterKind { SoftmaxTopK, SigmoidTopK };

struct MlpSpec {
  Activation act = Activation::SwiGLU;
  int width = 0;
  // Tensor names. SwiGLU: either gate_up ([2F, H], gate rows first) or gate and up ([F, H] each); ReLU2: up.
  std::string gate_up, gate, up, down;  // down: [H, F]
  double gate_multiplier = 1.0;         // FalconH1 mlp_multipliers[0]: silu(gate · m)
  double down_multiplier = 1.0;         // FalconH1 mlp_multipliers[1]: down(·) · m
};

struct MoeSpec {
  RouterKind router = RouterKind::SoftmaxTopK;
  Activation act = Activation::SwiGLU;
  int experts = 0, top_k = 0, width = 0;
  bool norm_topk_prob = false;          // SigmoidTopK only
  double routed_scaling_factor = 1.0;   // SigmoidTopK only
  std::string router_weight;            // [E, H]
  std::string correction_bias;          // [E] or empty
  // Expert weights: stacked ([E, rows, cols]) or one tensor per expert ("{e}" in the name is the expert id).
  std::string experts_in, experts_out;  // in: [E, 2F or F, H]; out: [E, H, F]
  std::string router_probe;             // HF module name of the router (its [T, E] logits output)
  bool has_shared = false;              // a shared expert inside the block (NemotronH shared_experts)
  MlpSpec shared;
  std::string shared_probe;
};

struct AttentionSpec {
  int heads = 0, kv_heads = 0, head_dim = 0;
  bool bias = false;
  std::string q, k, v, o;  // tensor-name prefixes ("model.layers.1.self_attn.q_proj"); ".weight" / ".bias" added
  std::string q_probe, k_probe, v_probe;
  double scale = 1.0;           // the score scale (Granite: attention_multiplier; others 1/sqrt(head_dim))
  double key_multiplier = 1.0;  // FalconH1: k_proj output · key_multiplier
  bool rope = false;
  int rotary_dim = 0;  // the first rotary_dim elements of each head rotate (Bamba: head_dim / 2)
  double rope_theta = 10000.0;
};

struct MambaSpec {
  std::string prefix;  // tensor-name prefix ("model.layers.0.mamba.")
  std::string in_proj_probe, conv1d_probe, dt_probe, norm_probe;
  // FalconH1's µP: in_proj output columns [z | x | B | C | dt] multiplied per segment (all 1 elsewhere).
  bool has_segment_multipliers = false;
  std::array<double, 5> segment_multipliers{1.0, 1.0, 1.0, 1.0, 1.0};
};

struct Block {
  BlockKind kind = BlockKind::Mamba;
  std::string probe;             // HF module name of the block's output
  double in_multiplier = 1.0;    // the normed input is multiplied by it first (FalconH1)
  double out_multiplier = 1.0;   // the block's output is multiplied by it before the sum (FalconH1)
  MambaSpec mamba;
  AttentionSpec attn;
  MlpSpec mlp;
  MoeSpec moe;
};

// h = h + (Σ_b out_multiplier_b · block_b(in_multiplier_b · RMSNorm_norm(h))) · residual_multiplier
struct SubLayer {
  std::string norm;  // RMSNorm weight tensor name
  std::vector<Block> blocks;
  double residual_multiplier = 1.0;
};

struct HybridLayer {
  std::string probe;  // the layer's output (residual stream), e.g. "model.layers.3"
  std::vector<SubLayer> subs;
};

struct HybridSpec {
  std::string architecture;  // config.json's
  int vocab_size = 0, hidden_size = 0;
  double rms_norm_eps = 1e-5;  // every RMSNorm, the Mamba gated norm included
  std::string embed, embed_probe;            // [V, H]; probe before embedding_multiplier
  std::string final_norm, final_norm_probe;  // [H]
  std::string lm_head;                       // [V, H]; empty when tied to the embeddings
  double embedding_multiplier = 1.0;
  double logits_divisor = 1.0;     // Granite logits_scaling: logits / it
  double logits_multiplier = 1.0;  // FalconH1 lm_head_multiplier: logits · it
  io::Mamba2Config mamba;          // the shape of every Mamba mixer (num_hidden_layers = the Mamba-layer count)
  int num_mamba = 0, num_attention = 0;
  int kv_heads = 0, head_dim = 0;  // of every attention block (the KV cache's shape)
  std::vector<HybridLayer> layers;
};

// Does the checkpoint hold this tensor (adapters pick between naming conventions with it)?
using HasTensor = std::function<bool(const std::string&)>;

// True for the architectures hybrid_spec_from_config accepts.
bool is_hybrid_architecture(const std::string& arch);
// One expert's tensor name from a per-expert pattern ("{e}" stands for the expert id); a pattern without
// "{e}" (stacked experts) is returned as it is.
std::string expert_tensor(const std::string& pattern, int e);

// Dispatch on `architectures`: the family's adapter. Throws parity::Error naming the key and value of
// anything the model cannot run.
HybridSpec hybrid_spec_from_config(const nlohmann::json& cfg, const HasTensor& has_tensor);

// The adapters.
HybridSpec granite_hybrid_spec(const nlohmann::json& cfg);
HybridSpec nemotron_h_spec(const nlohmann::json& cfg, const HasTensor& has_tensor);
HybridSpec bamba_spec(const nlohmann::json& cfg);
HybridSpec falcon_h1_spec(const nlohmann::json& cfg);

// Fills num_mamba / num_attention / kv_heads / head_dim from the layers and checks that every attention block
// has the same KV shape (one paged KV cache serves them all).
void finish_hybrid_spec(HybridSpec& s);

}  // namespace parity::io
