#include <gtest/gtest.h>

#include "error_test_support.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "accuracy/captures_file.h"
#include "common/error.h"
#include "io/granite_config.h"
#include "io/hf_config.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "io/token_file.h"

using nlohmann::json;
using parity::Error;
using namespace parity::io;

namespace {

using LT = GraniteLayerType;

using parity::test::expect_error;

void expect_granite_refused(const json& cfg, const std::vector<std::string>& parts) {
  expect_error([&] { parse_granite_hybrid_config(cfg); }, parts);
}

// A config as transformers 5.17 writes it (the spellings of tests/data/granite_hybrid/config.json).
json granite_config() {
  return json::parse(R"({
    "architectures": ["GraniteMoeHybridForCausalLM"],
    "model_type": "granitemoehybrid",
    "vocab_size": 100,
    "hidden_size": 32,
    "num_hidden_layers": 3,
    "layer_types": ["linear_attention", "full_attention", "linear_attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "attention_bias": false,
    "position_embedding_type": "rope",
    "rope_parameters": {"rope_theta": 5000.0, "rope_type": "default"},
    "embedding_multiplier": 12.0,
    "attention_multiplier": 0.125,
    "residual_multiplier": 0.22,
    "logits_scaling": 6.0,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "tie_word_embeddings": true,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "intermediate_size": 16,
    "shared_intermediate_size": 24,
    "mamba_n_heads": 8,
    "mamba_n_groups": 2,
    "mamba_d_state": 16,
    "mamba_d_head": 8,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_chunk_size": 64,
    "mamba_conv_bias": true,
    "mamba_proj_bias": false,
    "time_step_limit": [0.0, {"__float__": "Infinity"}]
  })");
}

}  // namespace

TEST(IoGraniteConfig, ParsesTheFixture) {
  json j = read_json_file(std::string(PARITY_TEST_DATA) + "/granite_hybrid/config.json");
  EXPECT_EQ(architecture_of(j), "GraniteMoeHybridForCausalLM");
  GraniteHybridConfig c = parse_granite_hybrid_config(j);
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.layer_types, (std::vector<LT>{LT::Mamba, LT::Attention, LT::Mamba, LT::Attention}));
  EXPECT_EQ(c.num_layers_of(LT::Mamba), 2);
  EXPECT_EQ(c.num_layers_of(LT::Attention), 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.q_dim(), 64);
  EXPECT_EQ(c.kv_dim(), 32);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.use_rope);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.embedding_multiplier, 12.0);
  EXPECT_EQ(c.attention_multiplier, 0.0625);
  EXPECT_EQ(c.residual_multiplier, 0.25);
  EXPECT_EQ(c.logits_scaling, 4.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.has_experts());
  EXPECT_EQ(c.num_local_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.intermediate_size, 32);
  EXPECT_EQ(c.shared_intermediate_size, 48);
  EXPECT_EQ(c.mamba_n_heads, 4);
  EXPECT_EQ(c.mamba_n_groups, 1);
  EXPECT_EQ(c.mamba_d_state, 16);
  EXPECT_EQ(c.mamba_d_head, 32);
  EXPECT_EQ(c.mamba_d_conv, 4);
  EXPECT_EQ(c.mamba_expand, 2);
  EXPECT_EQ(c.mamba_intermediate_size(), 128);
  EXPECT_EQ(c.mamba_chunk_size, 32);
  EXPECT_TRUE(c.mamba_conv_bias);
  EXPECT_FALSE(c.mamba_proj_bias);
  EXPECT_EQ(c.time_step_min_limit, 0.0);
  EXPECT_TRUE(std::isinf(c.time_step_max_limit));

  Mamba2Config m = to_mamba2_config(c);
  EXPECT_EQ(m.num_hidden_layers, 2);
  EXPECT_EQ(m.conv_dim(), 160);
  EXPECT_EQ(m.in_proj_dim(), 292);  // the fixture's model.layers.0.mamba.in_proj.weight is [292, 64]
}

// The fixture's other files have the shapes the config implies; the router logits file is a flat-layout
// captures file that parity's reader takes.
TEST(IoGraniteConfig, FixtureFilesMatchTheConfig) {
  const std::string dir = std::string(PARITY_TEST_DATA) + "/granite_hybrid";
  GraniteHybridConfig c = parse_granite_hybrid_config(read_json_file(dir + "/config.json"));
  WeightStore w = WeightStore::open_folder(dir);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    if (c.layer_types[l] == GraniteLayerType::Mamba) {
      EXPECT_EQ(w.get(p + "mamba.in_proj.weight").shape, (std::vector<int64_t>{292, 64}));
      EXPECT_EQ(w.find(p + "self_attn.q_proj.weight"), nullptr);
    } else {
      EXPECT_EQ(w.get(p + "self_attn.q_proj.weight").shape, (std::vector<int64_t>{c.q_dim(), 64}));
      EXPECT_EQ(w.get(p + "self_attn.k_proj.weight").shape, (std::vector<int64_t>{c.kv_dim(), 64}));
      EXPECT_EQ(w.find(p + "mamba.in_proj.weight"), nullptr);
    }
    EXPECT_EQ(w.get(p + "block_sparse_moe.input_linear.weight").shape,
              (std::vector<int64_t>{c.num_local_experts, 2 * c.intermediate_size, c.hidden_size}));
    EXPECT_EQ(w.get(p + "block_sparse_moe.output_linear.weight").shape,
              (std::vector<int64_t>{c.num_local_experts, c.hidden_size, c.intermediate_size}));
    EXPECT_EQ(w.get(p + "block_sparse_moe.router.layer.weight").shape,
              (std::vector<int64_t>{c.num_local_experts, c.hidden_size}));
    EXPECT_EQ(w.get(p + "shared_mlp.input_linear.weight").shape,
              (std::vector<int64_t>{2 * c.shared_intermediate_size, c.hidden_size}));
  }
  EXPECT_NE(w.find("lm_head.weight"), nullptr);

  const std::vector<int32_t> tokens = read_tokens(dir + "/tokens.json");
  ASSERT_EQ(tokens.size(), 100u);
  auto ref = SafetensorsFile::open(dir + "/reference_logits.safetensors");
  ASSERT_NE(ref->find("logits"), nullptr);
  EXPECT_EQ(ref->find("logits")->shape, (std::vector<int64_t>{100, c.vocab_size}));

  parity::accuracy::Captures cap = parity::accuracy::read_captures(dir + "/router_logits.safetensors");
  EXPECT_EQ(cap.layout, parity::accuracy::CaptureLayout::Flat);
  ASSERT_EQ(cap.prompts.size(), 1u);
  EXPECT_EQ(cap.prompts[0].prompt_token_ids, tokens);
  const std::vector<std::string> modules = parity::accuracy::captured_modules(cap);
  ASSERT_EQ(modules.size(), 4u);
  for (int l = 0; l < 4; ++l) {
    const std::string m = "model.layers." + std::to_string(l) + ".block_sparse_moe.router";
    ASSERT_EQ(cap.prompts[0].flat.count(m), 1u) << m;
    EXPECT_EQ(cap.prompts[0].flat.at(m).rows, 100);
    EXPECT_EQ(cap.prompts[0].flat.at(m).cols, c.num_local_experts);
  }
}

TEST(IoGraniteConfig, ParsesEveryField) {
  GraniteHybridConfig c = parse_granite_hybrid_config(granite_config());
  EXPECT_EQ(c.layer_types, (std::vector<LT>{LT::Mamba, LT::Attention, LT::Mamba}));
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.rope_theta, 5000.0);
  EXPECT_EQ(c.attention_multiplier, 0.125);
  EXPECT_EQ(c.residual_multiplier, 0.22);
  EXPECT_EQ(c.logits_scaling, 6.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.num_local_experts, 4);
  EXPECT_EQ(c.mamba_n_groups, 2);
  EXPECT_EQ(c.mamba_chunk_size, 64);

  json j = granite_config();
  j["head_dim"] = 12;  // an explicit head_dim wins over hidden_size / heads
  j["attention_bias"] = true;
  j["mamba_proj_bias"] = true;
  j["mamba_conv_bias"] = false;
  j["time_step_limit"] = {0.001, 0.1};
  c = parse_granite_hybrid_config(j);
  EXPECT_EQ(c.head_dim, 12);
  EXPECT_EQ(c.q_dim(), 48);
  EXPECT_EQ(c.kv_dim(), 24);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.mamba_proj_bias);
  EXPECT_FALSE(c.mamba_conv_bias);
  EXPECT_EQ(c.time_step_min_limit, 0.001);
  EXPECT_EQ(c.time_step_max_limit, 0.1);
}

TEST(IoGraniteConfig, BothLayerTypeSpellings) {
  const std::vector<LT> want{LT::Mamba, LT::Attention, LT::Mamba};
  json j = granite_config();
  j["layer_types"] = {"mamba", "attention", "mamba"};
  EXPECT_EQ(parse_granite_hybrid_config(j).layer_types, want);
  j["layer_types"] = {"linear_attention", "attention", "mamba"};  // mixed spellings are read one by one
  EXPECT_EQ(parse_granite_hybrid_config(j).layer_types, want);

  // The older key, alone or beside an identical layer_types.
  j = granite_config();
  j.erase("layer_types");
  j["layers_block_type"] = {"mamba", "attention", "mamba"};
  EXPECT_EQ(parse_granite_hybrid_config(j).layer_types, want);
  j["layer_types"] = j["layers_block_type"];
  EXPECT_EQ(parse_granite_hybrid_config(j).layer_types, want);
  j["layer_types"] = {"mamba", "mamba", "mamba"};
  expect_granite_refused(j, {"layer_types", "layers_block_type", "disagree"});

  // Absent, null or empty: every layer is Mamba (HF's layers_block_type); attention fields then optional.
  for (json lt : {json(), json::array()}) {
    j = granite_config();
    if (lt.is_null())
      j.erase("layer_types");
    else
      j["layer_types"] = lt;
    j.erase("num_attention_heads");
    j.erase("num_key_value_heads");
    GraniteHybridConfig c = parse_granite_hybrid_config(j);
    EXPECT_EQ(c.layer_types, (std::vector<LT>(3, LT::Mamba)));
    EXPECT_EQ(c.num_attention_heads, 0);
    EXPECT_EQ(c.head_dim, 0);
  }
  EXPECT_STREQ(to_string(LT::Mamba), "mamba");
  EXPECT_STREQ(to_string(LT::Attention), "attention");
}

TEST(IoGraniteConfig, AutoMambaHeadDim) {
  json j = granite_config();
  j["mamba_d_head"] = "auto";
  EXPECT_EQ(parse_granite_hybrid_config(j).mamba_d_head, 8);  // 2 * 32 / 8
  j.erase("mamba_d_head");
  EXPECT_EQ(parse_granite_hybrid_config(j).mamba_d_head, 8);
  j["mamba_n_heads"] = 4;
  j["mamba_expand"] = 1;
  GraniteHybridConfig c = parse_granite_hybrid_config(j);
  EXPECT_EQ(c.mamba_d_head, 8);  // 1 * 32 / 4
  EXPECT_EQ(c.mamba_intermediate_size(), 32);
}

TEST(IoGraniteConfig, DefaultsOfTransformers) {
  json j = granite_config();
  for (const char* k : {"num_key_value_heads", "attention_bias", "embedding_multiplier", "attention_multiplier",
                        "residual_multiplier", "logits_scaling", "rms_norm_eps", "hidden_act", "tie_word_embeddings",
                        "num_local_experts", "num_experts_per_tok", "mamba_n_groups", "mamba_d_head", "mamba_d_conv",
                        "mamba_expand", "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias", "time_step_limit",
                        "position_embedding_type", "rope_parameters"})
    j.erase(k);
  j["hidden_size"] = 512;  // so that the default mamba_chunk_size etc. make sense
  j["intermediate_size"] = 64;
  GraniteHybridConfig c = parse_granite_hybrid_config(j);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_FALSE(c.use_rope);
  EXPECT_EQ(c.embedding_multiplier, 1.0);
  EXPECT_EQ(c.attention_multiplier, 1.0);
  EXPECT_EQ(c.residual_multiplier, 1.0);
  EXPECT_EQ(c.logits_scaling, 1.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.num_local_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.mamba_n_groups, 1);
  EXPECT_EQ(c.mamba_d_head, 128);  // auto: 2 * 512 / 8
  EXPECT_EQ(c.mamba_d_conv, 4);
  EXPECT_EQ(c.mamba_expand, 2);
  EXPECT_EQ(c.mamba_chunk_size, 256);
  EXPECT_TRUE(c.mamba_conv_bias);
  EXPECT_FALSE(c.mamba_proj_bias);
  EXPECT_EQ(c.time_step_min_limit, 0.0);
  EXPECT_TRUE(std::isinf(c.time_step_max_limit));
}

TEST(IoGraniteConfig, PositionEmbeddings) {
  json j = granite_config();
  for (json pet : {json(), json("nope")}) {
    j["position_embedding_type"] = pet;
    j["rope_parameters"] = {{"rope_type", "yarn"}};  // not read without RoPE
    EXPECT_FALSE(parse_granite_hybrid_config(j).use_rope);
  }
  j = granite_config();
  j.erase("rope_parameters");
  EXPECT_EQ(parse_granite_hybrid_config(j).rope_theta, 10000.0);  // HF's default
  j["rope_theta"] = 2500;                                         // transformers 4.x spelling
  EXPECT_EQ(parse_granite_hybrid_config(j).rope_theta, 2500.0);
  j["rope_parameters"] = {{"rope_theta", 2500.0}, {"rope_type", "default"}};
  EXPECT_EQ(parse_granite_hybrid_config(j).rope_theta, 2500.0);
  j["rope_scaling"] = {{"type", "default"}};
  EXPECT_EQ(parse_granite_hybrid_config(j).rope_theta, 2500.0);
}

TEST(IoGraniteConfig, DenseModelHasNoExperts) {
  json j = granite_config();
  j["num_local_experts"] = 0;
  j.erase("intermediate_size");
  j["num_experts_per_tok"] = 6;  // ignored without experts, as in HF
  GraniteHybridConfig c = parse_granite_hybrid_config(j);
  EXPECT_FALSE(c.has_experts());
  EXPECT_EQ(c.num_experts_per_tok, 0);
  EXPECT_EQ(c.intermediate_size, 0);
  EXPECT_EQ(c.shared_intermediate_size, 24);
}

TEST(IoGraniteConfig, ToMamba2Config) {
  json j = granite_config();
  j["mamba_proj_bias"] = true;
  j["time_step_limit"] = {0.0, 0.5};
  GraniteHybridConfig c = parse_granite_hybrid_config(j);
  Mamba2Config m = to_mamba2_config(c);
  EXPECT_EQ(m.vocab_size, 100);
  EXPECT_EQ(m.hidden_size, 32);
  EXPECT_EQ(m.num_hidden_layers, 2);  // the Mamba layers only
  EXPECT_EQ(m.num_heads, 8);
  EXPECT_EQ(m.head_dim, 8);
  EXPECT_EQ(m.state_size, 16);
  EXPECT_EQ(m.n_groups, 2);
  EXPECT_EQ(m.expand, 2);
  EXPECT_EQ(m.intermediate_size, 64);
  EXPECT_EQ(m.conv_kernel, 4);
  EXPECT_EQ(m.chunk_size, 64);
  EXPECT_TRUE(m.use_bias);
  EXPECT_TRUE(m.use_conv_bias);
  EXPECT_EQ(m.layer_norm_epsilon, 1e-5);
  EXPECT_TRUE(m.rms_norm);
  EXPECT_FALSE(m.norm_before_gate);
  EXPECT_TRUE(m.tie_word_embeddings);
  EXPECT_EQ(m.time_step_min_limit, 0.0);
  EXPECT_EQ(m.time_step_max_limit, 0.5);
  EXPECT_EQ(m.hidden_act, "silu");
  EXPECT_EQ(m.conv_dim(), 64 + 2 * 2 * 16);
  EXPECT_EQ(m.in_proj_dim(), 2 * 64 + 2 * 2 * 16 + 8);

  // The Mamba2 parser accepts the shape as it is (round trip through its JSON form).
  Mamba2Config back = parse_mamba2_config(to_json(m));
  EXPECT_EQ(back.num_heads, m.num_heads);
  EXPECT_EQ(back.head_dim, m.head_dim);
  EXPECT_EQ(back.intermediate_size, m.intermediate_size);
  EXPECT_EQ(back.chunk_size, m.chunk_size);
  EXPECT_EQ(back.layer_norm_epsilon, m.layer_norm_epsilon);
  EXPECT_EQ(back.time_step_max_limit, m.time_step_max_limit);

  j["layer_types"] = {"attention", "attention", "full_attention"};
  c = parse_granite_hybrid_config(j);
  EXPECT_EQ(c.mamba_n_heads, 0);
  expect_error([&] { to_mamba2_config(c); }, {"no mamba layer"});
}

TEST(IoGraniteConfig, ArchitectureOf) {
  EXPECT_EQ(architecture_of(granite_config()), "GraniteMoeHybridForCausalLM");
  EXPECT_EQ(architecture_of(json{{"model_type", "granitemoehybrid"}}), "GraniteMoeHybridForCausalLM");
  expect_error([] { architecture_of(json{{"architectures", {"GraniteMoeForCausalLM"}}}); },
               {"unknown architecture 'GraniteMoeForCausalLM'", "Mamba2ForCausalLM", "GraniteMoeHybridForCausalLM"});
  expect_error([] { architecture_of(json{{"vocab_size", 4}}); },
               {"neither architectures nor model_type", "GraniteMoeHybridForCausalLM"});
}

TEST(IoGraniteConfig, RefusesMissingSizes) {
  for (const char* k : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                        "shared_intermediate_size", "mamba_n_heads", "mamba_d_state"}) {
    json j = granite_config();
    j.erase(k);
    expect_granite_refused(j, {"required field", k});
  }
  expect_granite_refused(json::array(), {"not a JSON object"});
}

TEST(IoGraniteConfig, RefusesLayerTypes) {
  json j = granite_config();
  j["layer_types"] = {"mamba", "moe", "attention"};
  expect_granite_refused(j, {"layer_types[1] = 'moe'", "not a known layer type", "full_attention"});
  j["layer_types"] = {"mamba", "attention"};
  expect_granite_refused(j, {"layer_types has 2 entries", "num_hidden_layers is 3"});
  j["layer_types"] = "mamba";
  expect_granite_refused(j, {"layer_types must be a list"});
  j["layer_types"] = {"mamba", 1, "mamba"};
  expect_granite_refused(j, {"layer_types[1] must be a string"});
  j.erase("layer_types");
  j["layers_block_type"] = {"mamba", "sliding_attention", "mamba"};
  expect_granite_refused(j, {"layers_block_type[1] = 'sliding_attention'"});
}

TEST(IoGraniteConfig, RefusesAttentionShapes) {
  json j = granite_config();
  j["num_key_value_heads"] = 3;
  expect_granite_refused(j, {"num_attention_heads = 4", "not a multiple of num_key_value_heads = 3"});
  j["num_key_value_heads"] = 0;
  expect_granite_refused(j, {"num_key_value_heads must be positive"});
  j = granite_config();
  j["num_attention_heads"] = 64;  // hidden 32 / 64 = 0
  j["num_key_value_heads"] = 64;
  expect_granite_refused(j, {"head_dim 0"});
  j = granite_config();
  j["head_dim"] = 7;
  expect_granite_refused(j, {"head_dim = 7", "even for RoPE"});
  j["head_dim"] = -2;
  expect_granite_refused(j, {"head_dim must be positive"});
  j = granite_config();
  j["attention_bias"] = 1;
  expect_granite_refused(j, {"attention_bias must be true or false"});
}

TEST(IoGraniteConfig, RefusesPositionEmbeddings) {
  json j = granite_config();
  j["position_embedding_type"] = "alibi";
  expect_granite_refused(j, {"position_embedding_type = 'alibi'", "not supported", "rope"});
  j["position_embedding_type"] = 3;
  expect_granite_refused(j, {"position_embedding_type must be a string"});
  j = granite_config();
  j["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "yarn"}, {"factor", 4.0}};
  expect_granite_refused(j, {"rope_parameters.rope_type = 'yarn'", "not supported"});
  j = granite_config();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  expect_granite_refused(j, {"rope_scaling.type = 'linear'"});
  j = granite_config();
  j["rope_theta"] = 10000.0;  // disagrees with rope_parameters.rope_theta 5000
  expect_granite_refused(j, {"rope_theta", "rope_parameters.rope_theta", "disagree"});
  j = granite_config();
  j["rope_parameters"]["rope_theta"] = -1.0;
  expect_granite_refused(j, {"rope_theta must be a positive finite number"});
  j = granite_config();
  j["rope_parameters"] = "default";
  expect_granite_refused(j, {"rope_parameters must be an object"});
}

TEST(IoGraniteConfig, RefusesMoeShapes) {
  json j = granite_config();
  j["num_experts_per_tok"] = 5;
  expect_granite_refused(j, {"num_experts_per_tok = 5 exceeds num_local_experts = 4"});
  j["num_experts_per_tok"] = 0;
  expect_granite_refused(j, {"num_experts_per_tok must be positive"});
  j = granite_config();
  j["num_local_experts"] = -1;
  expect_granite_refused(j, {"num_local_experts must be 0 (dense) or positive"});
  j = granite_config();
  j["intermediate_size"] = 0;
  expect_granite_refused(j, {"intermediate_size must be positive"});
  j = granite_config();
  j["shared_intermediate_size"] = 0;
  expect_granite_refused(j, {"shared_intermediate_size must be positive"});
}

TEST(IoGraniteConfig, RefusesMambaShapes) {
  json j = granite_config();
  j["mamba_n_heads"] = 5;  // 64 % 5 != 0
  expect_granite_refused(j, {"mamba_n_heads = 5 does not divide mamba_expand * hidden_size = 64"});
  j = granite_config();
  j["mamba_d_head"] = 16;
  expect_granite_refused(j, {"mamba_d_head * mamba_n_heads = 16 * 8", "must equal mamba_expand * hidden_size = 64"});
  j["mamba_d_head"] = "half";
  expect_granite_refused(j, {"mamba_d_head must be an integer or \"auto\""});
  j = granite_config();
  j["mamba_n_groups"] = 3;
  expect_granite_refused(j, {"mamba_n_heads = 8 is not a multiple of mamba_n_groups = 3"});
  j = granite_config();
  j["mamba_expand"] = 1.5;
  expect_granite_refused(j, {"mamba_expand must be an integer"});
  j = granite_config();
  j["mamba_chunk_size"] = 48;
  expect_granite_refused(j, {"mamba_chunk_size = 48 is not a power of two"});
  j = granite_config();
  j["mamba_d_conv"] = 9;
  expect_granite_refused(j, {"mamba_d_conv = 9 is outside the supported range 1..8"});
  j = granite_config();
  j["mamba_d_state"] = 0;
  expect_granite_refused(j, {"mamba_d_state must be positive"});
  j = granite_config();
  j["time_step_limit"] = {0.5, 0.1};
  expect_granite_refused(j, {"time_step_limit min"});
  j["time_step_limit"] = {0.5};
  expect_granite_refused(j, {"time_step_limit must be a list [min, max]"});
  j = granite_config();
  j["mamba_conv_bias"] = "yes";
  expect_granite_refused(j, {"mamba_conv_bias must be true or false"});
}

TEST(IoGraniteConfig, RefusesScalars) {
  json j = granite_config();
  j["logits_scaling"] = 0;
  expect_granite_refused(j, {"logits_scaling must not be 0"});
  j["logits_scaling"] = {{"__float__", "Infinity"}};
  expect_granite_refused(j, {"logits_scaling must be a finite number"});
  j = granite_config();
  j["embedding_multiplier"] = "12";
  expect_granite_refused(j, {"embedding_multiplier", "expected a number"});
  j = granite_config();
  j["residual_multiplier"] = {{"__float__", "NaN"}};
  expect_granite_refused(j, {"residual_multiplier must be a finite number"});
  j = granite_config();
  j["rms_norm_eps"] = 0.0;
  expect_granite_refused(j, {"rms_norm_eps must be a positive finite number"});
  j = granite_config();
  j["hidden_act"] = "gelu";
  expect_granite_refused(j, {"hidden_act = 'gelu' is not supported"});
  j = granite_config();
  j["vocab_size"] = 1.5;
  expect_granite_refused(j, {"vocab_size must be an integer"});
  j["vocab_size"] = 0;
  expect_granite_refused(j, {"vocab_size must be positive"});
  j = granite_config();
  j["tie_word_embeddings"] = "true";
  expect_granite_refused(j, {"tie_word_embeddings must be true or false"});
}

namespace {

// Found through fuzz_config: widths past int (UB in conv_dim() and q_dim()) are refused, naming the fields.
TEST(IoGraniteConfig, WidthsPastIntAreRefused) {
  json cfg = granite_config();
  cfg["mamba_d_state"] = 2000000000;
  expect_granite_refused(cfg, {"mamba_n_groups = 2 and mamba_d_state = 2000000000 are too large"});
  cfg = granite_config();
  cfg["head_dim"] = 1000000000;
  expect_granite_refused(cfg, {"num_attention_heads * head_dim = 4 * 1000000000 does not fit in 32 bits"});
  cfg["head_dim"] = 500000000;
  EXPECT_EQ(parse_granite_hybrid_config(cfg).q_dim(), 2000000000);
}

}  // namespace
