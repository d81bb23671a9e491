// The family adapters of io/hybrid_spec.h: NemotronH (both layer spellings, the MoE options), Bamba and FalconH1
// mapped onto the layer list with the right names, multipliers and shapes; unknown pattern characters,
// unsupported options and shape mismatches refused with the key and value named.
#include <gtest/gtest.h>

#include "error_test_support.h"

#include <cmath>
#include <string>
#include <vector>

#include "io/hybrid_spec.h"

using nlohmann::json;
using namespace parity::io;
using parity::test::expect_error;

namespace {

json nemotron_config() {
  return json::parse(R"({
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
    "vocab_size": 100, "hidden_size": 32, "hybrid_override_pattern": "ME*M-",
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 48,
    "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 8, "n_groups": 2, "conv_kernel": 4,
    "chunk_size": 16, "n_routed_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 12,
    "moe_shared_expert_intermediate_size": 20, "routed_scaling_factor": 2.5, "norm_topk_prob": true,
    "n_group": 1, "topk_group": 1, "moe_latent_size": null, "layer_norm_epsilon": 1e-5,
    "mlp_hidden_act": "relu2", "time_step_limit": [0.0, {"__float__": "Infinity"}]
  })");
}

std::vector<BlockKind> kinds(const HybridSpec& s) {
  std::vector<BlockKind> k;
  for (const auto& L : s.layers)
    for (const auto& sub : L.subs)
      for (const auto& b : sub.blocks) k.push_back(b.kind);
  return k;
}

const auto none = [](const std::string&) { return false; };

void refused(const json& cfg, const std::vector<std::string>& parts) {
  expect_error([&] { hybrid_spec_from_config(cfg, none); }, parts);
}

}  // namespace

TEST(IoHybridConfig, NemotronHPatternMapsToOneBlockPerLayer) {
  const HybridSpec s = hybrid_spec_from_config(nemotron_config(), none);
  EXPECT_EQ(s.architecture, "NemotronHForCausalLM");
  EXPECT_EQ(kinds(s), (std::vector<BlockKind>{BlockKind::Mamba, BlockKind::Moe, BlockKind::Attention,
                                               BlockKind::Mamba, BlockKind::Mlp}));
  EXPECT_EQ(s.num_mamba, 2);
  EXPECT_EQ(s.num_attention, 1);
  EXPECT_EQ(s.mamba.intermediate_size, 64) << "mamba_num_heads · mamba_head_dim, not expand · hidden";
  EXPECT_EQ(s.mamba.n_groups, 2);
  EXPECT_EQ(s.mamba.chunk_size, 16);
  EXPECT_EQ(s.embed, "model.embeddings.weight");
  EXPECT_EQ(s.final_norm_probe, "model.norm_f");
  const Block& moe = s.layers[1].subs[0].blocks[0];
  EXPECT_EQ(moe.probe, "model.layers.1.mixer");
  EXPECT_EQ(moe.moe.router, RouterKind::SigmoidTopK);
  EXPECT_EQ(moe.moe.act, Activation::ReLU2);
  EXPECT_EQ(moe.moe.router_probe, "model.layers.1.mixer.gate");
  EXPECT_EQ(moe.moe.correction_bias, "model.layers.1.mixer.gate.e_score_correction_bias");
  EXPECT_EQ(moe.moe.experts_in, "model.layers.1.mixer.experts.{e}.up_proj.weight");
  EXPECT_TRUE(moe.moe.has_shared);
  EXPECT_EQ(moe.moe.shared.width, 20);
  EXPECT_DOUBLE_EQ(moe.moe.routed_scaling_factor, 2.5);
  const Block& att = s.layers[2].subs[0].blocks[0];
  EXPECT_FALSE(att.attn.rope) << "NemotronH attention has no position embedding";
  EXPECT_DOUBLE_EQ(att.attn.scale, 1.0 / std::sqrt(8.0));
  EXPECT_EQ(att.attn.q_probe, "model.layers.2.mixer.q_proj");
  EXPECT_EQ(s.layers[4].subs[0].blocks[0].mlp.act, Activation::ReLU2);
  EXPECT_EQ(s.layers[4].subs[0].norm, "model.layers.4.norm.weight");
}

TEST(IoHybridConfig, NemotronHLayersBlockTypeSpellingsAndCheckpointNames) {
  json a = nemotron_config();
  a.erase("hybrid_override_pattern");
  a["layers_block_type"] = {"linear_attention", "moe", "full_attention", "mamba", "mlp"};
  json b = nemotron_config();
  b["layers_block_type"] = {"mamba", "moe", "attention", "mamba", "mlp"};  // both given, agreeing
  EXPECT_EQ(kinds(hybrid_spec_from_config(a, none)), kinds(hybrid_spec_from_config(nemotron_config(), none)));
  EXPECT_EQ(kinds(hybrid_spec_from_config(b, none)), kinds(hybrid_spec_from_config(nemotron_config(), none)));
  // NVIDIA's checkpoints say backbone.; stacked experts (transformers 5's module layout) are read too.
  const HybridSpec s = hybrid_spec_from_config(nemotron_config(), [](const std::string& n) {
    return n == "backbone.embeddings.weight" || n == "backbone.layers.1.mixer.experts.up_proj";
  });
  EXPECT_EQ(s.embed, "backbone.embeddings.weight");
  EXPECT_EQ(s.embed_probe, "model.embeddings") << "probe names stay transformers' module names";
  EXPECT_EQ(s.layers[1].subs[0].blocks[0].moe.experts_in, "backbone.layers.1.mixer.experts.up_proj");
  EXPECT_EQ(s.layers[1].subs[0].blocks[0].moe.router_probe, "model.layers.1.mixer.gate");
  // NVIDIA's Nemotron-H-8B config.json says attention_head_dim.
  json c = nemotron_config();
  c.erase("head_dim");
  c["attention_head_dim"] = 16;
  EXPECT_EQ(hybrid_spec_from_config(c, none).layers[2].subs[0].blocks[0].attn.head_dim, 16);
  c["head_dim"] = 8;
  refused(c, {"head_dim = 8", "attention_head_dim = 16", "disagree"});
}

TEST(IoHybridConfig, NemotronHRefusalsNameTheKeyAndValue) {
  json c = nemotron_config();
  c["hybrid_override_pattern"] = "M*X-";
  refused(c, {"hybrid_override_pattern", "'X'", "at 2"});
  c = nemotron_config();
  c.erase("hybrid_override_pattern");
  c["layers_block_type"] = {"mamba", "cross_attention"};
  refused(c, {"layers_block_type[1]", "cross_attention"});
  c = nemotron_config();
  c["layers_block_type"] = {"mamba", "moe"};
  refused(c, {"hybrid_override_pattern and layers_block_type", "different"});
  c = nemotron_config();
  c.erase("hybrid_override_pattern");
  refused(c, {"neither hybrid_override_pattern nor layers_block_type"});
  c = nemotron_config();
  c["num_hidden_layers"] = 7;
  refused(c, {"num_hidden_layers = 7", "5 layers"});
  c = nemotron_config();
  c["n_group"] = 8;
  refused(c, {"n_group = 8", "grouped"});
  c = nemotron_config();
  c["topk_group"] = 2;
  refused(c, {"topk_group = 2"});
  c = nemotron_config();
  c["moe_latent_size"] = 16;
  refused(c, {"moe_latent_size = 16", "latent"});
  c = nemotron_config();
  c["mlp_hidden_act"] = "silu";
  refused(c, {"mlp_hidden_act = 'silu'", "relu2"});
  c = nemotron_config();
  c["num_experts_per_tok"] = 9;
  refused(c, {"num_experts_per_tok = 9", "n_routed_experts = 6"});
  c = nemotron_config();
  c["mamba_num_heads"] = 3;
  refused(c, {"mamba_num_heads = 3", "n_groups = 2"});
  c = nemotron_config();
  c["sliding_window"] = 128;
  refused(c, {"sliding_window = 128"});
  c = nemotron_config();
  c["n_groups"] = 2;
  c["mamba_n_groups"] = 4;
  refused(c, {"n_groups = 2", "mamba_n_groups = 4", "disagree"});
  c = nemotron_config();
  c["mamba_num_heads"] = 2000000000;
  c["mamba_head_dim"] = 1024;
  refused(c, {"mamba_num_heads * mamba_head_dim", "too large"});
  c = nemotron_config();
  c["moe_intermediate_size"] = 2000000000;
  refused(c, {"the expert width", "too large"});
  c = nemotron_config();
  c["hybrid_override_pattern"] = 5;
  refused(c, {"hybrid_override_pattern must be a string"});
}

TEST(IoHybridConfig, BambaAttentionIndicesAndPartialRope) {
  const json c = json::parse(R"({
    "architectures": ["BambaForCausalLM"], "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 3,
    "attn_layer_indices": [1], "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 40,
    "mamba_n_heads": 4, "mamba_d_head": "auto", "mamba_d_state": 8, "mamba_chunk_size": 16,
    "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0, "partial_rotary_factor": 0.5}
  })");
  const HybridSpec s = hybrid_spec_from_config(c, none);
  EXPECT_EQ(kinds(s), (std::vector<BlockKind>{BlockKind::Mamba, BlockKind::Mlp, BlockKind::Attention, BlockKind::Mlp,
                                               BlockKind::Mamba, BlockKind::Mlp}));
  const AttentionSpec& a = s.layers[1].subs[0].blocks[0].attn;
  EXPECT_TRUE(a.rope);
  EXPECT_EQ(a.head_dim, 8);
  EXPECT_EQ(a.rotary_dim, 4);
  EXPECT_DOUBLE_EQ(a.rope_theta, 5000.0);
  EXPECT_EQ(s.mamba.head_dim, 16);
  EXPECT_EQ(s.layers[0].subs[1].norm, "model.layers.0.pre_ff_layernorm.weight");
  EXPECT_EQ(s.layers[0].subs[1].blocks[0].mlp.gate, "model.layers.0.feed_forward.gate_proj.weight");
  EXPECT_EQ(s.final_norm, "model.final_layernorm.weight");
  json bad = c;
  bad["attn_layer_indices"] = {1, 3};
  refused(bad, {"attn_layer_indices[1] = 3", "num_hidden_layers = 3"});
  bad = c;
  bad["rope_parameters"]["rope_type"] = "yarn";
  refused(bad, {"rope_parameters.rope_type = 'yarn'"});
}

TEST(IoHybridConfig, FalconH1ParallelBlocksAndMultipliers) {
  const json c = json::parse(R"({
    "architectures": ["FalconH1ForCausalLM"], "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 40, "mamba_d_ssm": 48,
    "mamba_n_heads": 3, "mamba_d_head": 16, "mamba_d_state": 8, "mamba_n_groups": 1, "mamba_chunk_size": 16,
    "mamba_rms_norm": false, "embedding_multiplier": 2.0, "lm_head_multiplier": 0.25,
    "mlp_multipliers": [0.5, 2.0], "key_multiplier": 0.5, "attention_in_multiplier": 1.5,
    "attention_out_multiplier": 0.75, "ssm_multipliers": [1, 2, 3, 4, 5], "ssm_in_multiplier": 1.25,
    "ssm_out_multiplier": 0.5, "rope_theta": 100000.0
  })");
  const HybridSpec s = hybrid_spec_from_config(c, none);
  ASSERT_EQ(s.layers.size(), 2u);
  const SubLayer& mix = s.layers[0].subs[0];
  ASSERT_EQ(mix.blocks.size(), 2u) << "attention and Mamba2 side by side";
  EXPECT_EQ(mix.blocks[0].kind, BlockKind::Mamba);
  EXPECT_EQ(mix.blocks[1].kind, BlockKind::Attention);
  EXPECT_DOUBLE_EQ(mix.blocks[0].in_multiplier, 1.25);
  EXPECT_DOUBLE_EQ(mix.blocks[0].out_multiplier, 0.5);
  EXPECT_DOUBLE_EQ(mix.blocks[1].in_multiplier, 1.5);
  EXPECT_DOUBLE_EQ(mix.blocks[1].out_multiplier, 0.75);
  EXPECT_DOUBLE_EQ(mix.blocks[1].attn.key_multiplier, 0.5);
  EXPECT_DOUBLE_EQ(mix.blocks[0].mamba.segment_multipliers[4], 5.0);
  EXPECT_EQ(s.mamba.intermediate_size, 48) << "mamba_d_ssm, not expand · hidden";
  EXPECT_FALSE(s.mamba.rms_norm);
  EXPECT_TRUE(mix.blocks[0].mamba.norm_probe.empty());
  EXPECT_DOUBLE_EQ(s.embedding_multiplier, 2.0);
  EXPECT_DOUBLE_EQ(s.logits_multiplier, 0.25);
  EXPECT_DOUBLE_EQ(s.layers[0].subs[1].blocks[0].mlp.gate_multiplier, 0.5);
  EXPECT_DOUBLE_EQ(s.layers[0].subs[1].blocks[0].mlp.down_multiplier, 2.0);
  json bad = c;
  bad["ssm_multipliers"] = {1, 2, 3};
  refused(bad, {"ssm_multipliers must be a list of 5 numbers"});
  bad = c;
  bad["mamba_d_head"] = 10;
  refused(bad, {"mamba_d_head * mamba_n_heads = 10 * 3", "mamba_d_ssm = 48"});
  bad = c;
  bad["projectors_bias"] = true;
  refused(bad, {"projectors_bias = true"});
  bad = c;
  bad["hidden_act"] = "gelu";
  refused(bad, {"hidden_act = 'gelu'"});
}
