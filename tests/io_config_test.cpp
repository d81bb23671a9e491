#include <gtest/gtest.h>

#include "error_test_support.h"
#include "test_support.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>

#include "common/error.h"
#include "io/hf_config.h"
#include "io/json_file.h"

namespace fs = std::filesystem;
using nlohmann::json;
using parity::Error;
using namespace parity::io;

namespace {

using parity::test::expect_error;

json mamba2_config() {
  return json::parse(R"({
    "architectures": ["Mamba2ForCausalLM"],
    "model_type": "mamba2",
    "vocab_size": 64,
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_heads": 8,
    "head_dim": 4,
    "state_size": 8,
    "n_groups": 2,
    "expand": 2,
    "conv_kernel": 4,
    "chunk_size": 16,
    "use_bias": true,
    "use_conv_bias": false,
    "layer_norm_epsilon": 1e-6,
    "rms_norm": true,
    "norm_before_gate": true,
    "residual_in_fp32": false,
    "tie_word_embeddings": true,
    "time_step_limit": [0.001, 100.0],
    "hidden_act": "silu",
    "pad_token_id": 1
  })");
}

void expect_mamba2_refused(json cfg, const std::vector<std::string>& parts) {
  expect_error([&] { parse_mamba2_config(cfg); }, parts);
}

class IoJsonFile : public parity::test::ScratchDirTest {};

}  // namespace

TEST(IoConfig, ParsesEveryField) {
  Mamba2Config c = parse_mamba2_config(mamba2_config());
  EXPECT_EQ(c.vocab_size, 64);
  EXPECT_EQ(c.hidden_size, 16);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.state_size, 8);
  EXPECT_EQ(c.n_groups, 2);
  EXPECT_EQ(c.expand, 2);
  EXPECT_EQ(c.intermediate_size, 32);
  EXPECT_EQ(c.conv_kernel, 4);
  EXPECT_EQ(c.chunk_size, 16);
  EXPECT_TRUE(c.use_bias);
  EXPECT_FALSE(c.use_conv_bias);
  EXPECT_EQ(c.layer_norm_epsilon, 1e-6);
  EXPECT_TRUE(c.rms_norm);
  EXPECT_TRUE(c.norm_before_gate);
  EXPECT_FALSE(c.residual_in_fp32);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.time_step_min_limit, 0.001);
  EXPECT_EQ(c.time_step_max_limit, 100.0);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.conv_dim(), 32 + 2 * 2 * 8);
  EXPECT_EQ(c.in_proj_dim(), 2 * 32 + 2 * 2 * 8 + 8);
}

TEST(IoConfig, AbsentOptionalKeysTakeTransformersDefaults) {
  json cfg = mamba2_config();
  for (const char* k : {"n_groups", "expand", "conv_kernel", "chunk_size", "use_bias", "use_conv_bias",
                        "layer_norm_epsilon", "rms_norm", "norm_before_gate", "residual_in_fp32",
                        "tie_word_embeddings", "time_step_limit", "hidden_act"})
    cfg.erase(k);
  cfg["hidden_size"] = 16;
  cfg["num_heads"] = 8;  // must stay a multiple of the default n_groups = 8
  Mamba2Config c = parse_mamba2_config(cfg);
  EXPECT_EQ(c.n_groups, 8);
  EXPECT_EQ(c.expand, 2);
  EXPECT_EQ(c.intermediate_size, 32);
  EXPECT_EQ(c.conv_kernel, 4);
  EXPECT_EQ(c.chunk_size, 256);
  EXPECT_FALSE(c.use_bias);
  EXPECT_TRUE(c.use_conv_bias);
  EXPECT_EQ(c.layer_norm_epsilon, 1e-5);
  EXPECT_TRUE(c.rms_norm);
  EXPECT_FALSE(c.norm_before_gate);
  EXPECT_TRUE(c.residual_in_fp32);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.time_step_min_limit, 0.0);
  EXPECT_TRUE(std::isinf(c.time_step_max_limit) && c.time_step_max_limit > 0);
  EXPECT_EQ(c.hidden_act, "silu");
}

TEST(IoConfig, ExplicitIntermediateSizeAndSwish) {
  json cfg = mamba2_config();
  cfg["intermediate_size"] = 32;
  cfg["hidden_act"] = "swish";
  Mamba2Config c = parse_mamba2_config(cfg);
  EXPECT_EQ(c.intermediate_size, 32);
  EXPECT_EQ(c.hidden_act, "swish");
}

TEST(IoConfig, ArchitectureOf) {
  EXPECT_EQ(architecture_of(mamba2_config()), "Mamba2ForCausalLM");
  EXPECT_EQ(architecture_of(json{{"model_type", "mamba2"}}), "Mamba2ForCausalLM");
  expect_error([] { architecture_of(json{{"architectures", {"LlamaForCausalLM"}}}); },
               {"unknown architecture 'LlamaForCausalLM' (supported: Mamba2ForCausalLM, GraniteMoeHybridForCausalLM, NemotronHForCausalLM, BambaForCausalLM, FalconH1ForCausalLM)"});
  expect_error([] { architecture_of(json{{"model_type", "mamba"}}); },
               {"unknown architecture 'mamba' (supported: Mamba2ForCausalLM, GraniteMoeHybridForCausalLM, NemotronHForCausalLM, BambaForCausalLM, FalconH1ForCausalLM)"});
  expect_error([] { architecture_of(json{{"hidden_size", 4}}); }, {"neither architectures nor model_type"});
  expect_error([] { architecture_of(json{{"architectures", json::array()}}); }, {"architectures"});
  expect_error([] { architecture_of(json::array()); }, {"not a JSON object"});
}

TEST(IoConfig, MissingRequiredInts) {
  for (const char* k : {"vocab_size", "hidden_size", "num_hidden_layers", "num_heads", "head_dim", "state_size"}) {
    json cfg = mamba2_config();
    cfg.erase(k);
    expect_mamba2_refused(cfg, {std::string("required field ") + k + " is missing"});
    cfg[k] = nullptr;
    expect_mamba2_refused(cfg, {std::string("required field ") + k + " is missing"});
  }
}

TEST(IoConfig, NonPositiveSizes) {
  for (const char* k : {"vocab_size", "hidden_size", "num_hidden_layers", "num_heads", "head_dim",
                        "state_size", "n_groups", "expand", "chunk_size"}) {
    for (int v : {0, -2}) {
      json cfg = mamba2_config();
      cfg[k] = v;
      expect_mamba2_refused(cfg, {std::string(k) + " must be positive, got " + std::to_string(v)});
    }
  }
  json cfg = mamba2_config();
  cfg["intermediate_size"] = 0;
  expect_mamba2_refused(cfg, {"intermediate_size must be positive"});
}

TEST(IoConfig, WrongJsonTypes) {
  json cfg = mamba2_config();
  cfg["hidden_size"] = "16";
  expect_mamba2_refused(cfg, {"hidden_size must be an integer"});
  cfg = mamba2_config();
  cfg["expand"] = 2.5;
  expect_mamba2_refused(cfg, {"expand must be an integer"});
  cfg = mamba2_config();
  cfg["vocab_size"] = 1ll << 40;
  expect_mamba2_refused(cfg, {"vocab_size = 1099511627776 is out of range"});
  cfg["vocab_size"] = 1ull << 63;
  expect_mamba2_refused(cfg, {"vocab_size = 9223372036854775808 is out of range"});
  cfg = mamba2_config();
  cfg["use_bias"] = 1;
  expect_mamba2_refused(cfg, {"use_bias must be true or false"});
  cfg = mamba2_config();
  cfg["hidden_act"] = 3;
  expect_mamba2_refused(cfg, {"hidden_act must be a string"});
  cfg = mamba2_config();
  cfg["layer_norm_epsilon"] = "small";
  expect_mamba2_refused(cfg, {"layer_norm_epsilon", "expected a number"});
  cfg = mamba2_config();
  cfg["layer_norm_epsilon"] = 0.0;
  expect_mamba2_refused(cfg, {"layer_norm_epsilon must be a positive finite number"});
  cfg = mamba2_config();
  cfg["time_step_limit"] = {0.0};
  expect_mamba2_refused(cfg, {"time_step_limit must be a list [min, max]"});
  expect_mamba2_refused(json::array(), {"not a JSON object"});
}

TEST(IoConfig, HeadsTimesHeadDimMustEqualIntermediate) {
  json cfg = mamba2_config();
  cfg["head_dim"] = 8;
  expect_mamba2_refused(cfg, {"num_heads * head_dim = 64 must equal intermediate_size = 32"});
}

TEST(IoConfig, IntermediateSizeMustAgreeWithExpand) {
  json cfg = mamba2_config();
  cfg["intermediate_size"] = 64;
  expect_mamba2_refused(cfg, {"intermediate_size = 64 disagrees with expand * hidden_size = 32"});
}

TEST(IoConfig, HeadsMustBeAMultipleOfGroups) {
  json cfg = mamba2_config();
  cfg["n_groups"] = 3;
  expect_mamba2_refused(cfg, {"num_heads = 8 is not a multiple of n_groups = 3"});
}

TEST(IoConfig, RmsNormFalseRefused) {
  json cfg = mamba2_config();
  cfg["rms_norm"] = false;
  expect_mamba2_refused(cfg, {"rms_norm = false is not supported"});
}

TEST(IoConfig, HiddenActOtherThanSiluRefused) {
  json cfg = mamba2_config();
  cfg["hidden_act"] = "gelu";
  expect_mamba2_refused(cfg, {"hidden_act = 'gelu' is not supported"});
}

TEST(IoConfig, ChunkSizeMustBeAPowerOfTwo) {
  for (int v : {3, 6, 100, 255}) {
    json cfg = mamba2_config();
    cfg["chunk_size"] = v;
    expect_mamba2_refused(cfg, {"chunk_size = " + std::to_string(v) + " is not a power of two"});
  }
  for (int v : {1, 2, 64, 256}) {
    json cfg = mamba2_config();
    cfg["chunk_size"] = v;
    EXPECT_EQ(parse_mamba2_config(cfg).chunk_size, v);
  }
}

TEST(IoConfig, ConvKernelRange) {
  for (int v : {0, -1, 9}) {
    json cfg = mamba2_config();
    cfg["conv_kernel"] = v;
    expect_mamba2_refused(cfg, {"conv_kernel = " + std::to_string(v) + " is outside the supported range 1..8"});
  }
  for (int v : {1, 8}) {
    json cfg = mamba2_config();
    cfg["conv_kernel"] = v;
    EXPECT_EQ(parse_mamba2_config(cfg).conv_kernel, v);
  }
}

TEST(IoConfig, TimeStepLimitMinAboveMaxRefused) {
  json cfg = mamba2_config();
  cfg["time_step_limit"] = {1.0, 0.5};
  expect_mamba2_refused(cfg, {"time_step_limit min", "greater than max"});
  cfg["time_step_limit"] = {json{{"__float__", "NaN"}}, 1.0};
  expect_mamba2_refused(cfg, {"time_step_limit must not contain NaN"});
}

TEST(IoConfig, TimeStepLimitBothInfinitySpellings) {
  const std::string head = R"({"architectures": ["Mamba2ForCausalLM"], "vocab_size": 8, "hidden_size": 4,
    "num_hidden_layers": 1, "num_heads": 2, "head_dim": 4, "state_size": 2, "n_groups": 1, )";
  for (const std::string& tail : {std::string(R"("time_step_limit": [0.0, Infinity]})"),
                                 std::string(R"("time_step_limit": [0.0, {"__float__": "Infinity"}]})")}) {
    Mamba2Config c = parse_mamba2_config(parse_hf_json(head + tail, "config.json"));
    EXPECT_EQ(c.time_step_min_limit, 0.0) << tail;
    EXPECT_EQ(c.time_step_max_limit, std::numeric_limits<double>::infinity()) << tail;
  }
  Mamba2Config c = parse_mamba2_config(
      parse_hf_json(head + R"("time_step_limit": [-Infinity, 2]})", "config.json"));
  EXPECT_EQ(c.time_step_min_limit, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(c.time_step_max_limit, 2.0);
}

TEST(IoConfig, ToJsonRoundTrips) {
  json cfg = mamba2_config();
  cfg["time_step_limit"] = {0.0, json{{"__float__", "Infinity"}}};
  Mamba2Config c = parse_mamba2_config(cfg);
  json out = to_json(c);
  EXPECT_EQ(out["time_step_limit"][1], (json{{"__float__", "Infinity"}}));
  EXPECT_EQ(out["architectures"][0], "Mamba2ForCausalLM");
  EXPECT_EQ(architecture_of(out), "Mamba2ForCausalLM");
  // Through text, as a builtin model's config.json would be written and read back.
  Mamba2Config d = parse_mamba2_config(parse_hf_json(out.dump(2), "config.json"));
  EXPECT_EQ(to_json(d), out);
  EXPECT_EQ(d.vocab_size, c.vocab_size);
  EXPECT_EQ(d.hidden_size, c.hidden_size);
  EXPECT_EQ(d.num_hidden_layers, c.num_hidden_layers);
  EXPECT_EQ(d.num_heads, c.num_heads);
  EXPECT_EQ(d.head_dim, c.head_dim);
  EXPECT_EQ(d.state_size, c.state_size);
  EXPECT_EQ(d.n_groups, c.n_groups);
  EXPECT_EQ(d.expand, c.expand);
  EXPECT_EQ(d.intermediate_size, c.intermediate_size);
  EXPECT_EQ(d.conv_kernel, c.conv_kernel);
  EXPECT_EQ(d.chunk_size, c.chunk_size);
  EXPECT_EQ(d.use_bias, c.use_bias);
  EXPECT_EQ(d.use_conv_bias, c.use_conv_bias);
  EXPECT_EQ(d.layer_norm_epsilon, c.layer_norm_epsilon);
  EXPECT_EQ(d.rms_norm, c.rms_norm);
  EXPECT_EQ(d.norm_before_gate, c.norm_before_gate);
  EXPECT_EQ(d.residual_in_fp32, c.residual_in_fp32);
  EXPECT_EQ(d.tie_word_embeddings, c.tie_word_embeddings);
  EXPECT_EQ(d.time_step_min_limit, c.time_step_min_limit);
  EXPECT_EQ(d.time_step_max_limit, c.time_step_max_limit);
  EXPECT_EQ(d.hidden_act, c.hidden_act);
}

TEST(IoJson, BareSpecialFloatsOutsideStrings) {
  json j = parse_hf_json(R"({"a": [Infinity, -Infinity, NaN], "s": "Infinity, NaN \" -Infinity",
                             "n": -1.5e3})", "x.json");
  EXPECT_EQ(as_float(j["a"][0], "a0"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(as_float(j["a"][1], "a1"), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(as_float(j["a"][2], "a2")));
  EXPECT_EQ(j["s"], "Infinity, NaN \" -Infinity");
  EXPECT_EQ(as_float(j["n"], "n"), -1500.0);
  EXPECT_EQ(as_float(json(3), "i"), 3.0);
}

TEST(IoJson, ParseErrorsNameTheSourceAndOriginalPosition) {
  // The rewrite lengthens line 1; the reported column must still be the one in the input.
  expect_error([] { parse_hf_json("{\"a\": Infinity,\n \"b\": Infinityx}", "cfg.json"); },
               {"cfg.json: invalid JSON at line 2, column"});
  expect_error([] { parse_hf_json("[Infinity, 1,, 2]", "t.json"); },
               {"t.json: invalid JSON at line 1, column 14 (byte 13)"});
  expect_error([] { parse_hf_json("", "empty.json"); }, {"empty.json: invalid JSON"});
  expect_error([] { parse_hf_json("[--Infinity]", "m.json"); }, {"m.json: invalid JSON"});
}

// Found by fuzz_config: nlohmann throws out_of_range, not parse_error, for a float past double's range.
TEST(IoJson, FloatOverflowIsAParseErrorNamingTheFile) {
  expect_error([] { parse_hf_json(R"({"layer_norm_epsilon": 1e400})", "cfg.json"); },
               {"cfg.json: invalid JSON: a number is outside the range of a double"});
  EXPECT_EQ(parse_hf_json(R"({"e": 1e300})", "cfg.json")["e"].get<double>(), 1e300);
}

TEST(IoJson, AsFloatRefusesOtherValues) {
  expect_error([] { as_float(json("1.0"), "eps"); }, {"eps: expected a number"});
  expect_error([] { as_float(json(true), "eps"); }, {"eps: expected a number"});
  expect_error([] { as_float(json{{"__float__", "inf"}}, "eps"); }, {"eps: unknown special float 'inf'"});
}

TEST_F(IoJsonFile, ReadJsonFile) {
  std::string p = write("config.json", "{\"time_step_limit\": [0.0, Infinity]}\n");
  json j = read_json_file(p);
  EXPECT_TRUE(std::isinf(as_float(j["time_step_limit"][1], "t")));
  std::string bad = write("bad.json", "{\n  \"a\": 1,\n  \"b\": }\n");
  expect_error([&] { read_json_file(bad); }, {bad + ": invalid JSON at line 3, column"});
  expect_error([&] { read_json_file((dir_ / "nope.json").string()); }, {"cannot read", "nope.json"});
  expect_error([&] { read_json_file(dir_.string()); }, {"is a directory"});
}

// The fixtures were written by transformers itself, so they pin the format as it is in the wild.
TEST(IoConfig, TransformersWrittenFixtures) {
  const std::string root = PARITY_TEST_DATA;
  for (const char* d : {"mamba2_g1", "mamba2_g2"}) {
    const std::string cfg_path = root + "/" + d + "/config.json";
    ASSERT_TRUE(fs::exists(cfg_path)) << "the committed fixture " << cfg_path << " is missing";
    json cfg = read_json_file(cfg_path);
    EXPECT_EQ(architecture_of(cfg), "Mamba2ForCausalLM");
    Mamba2Config c = parse_mamba2_config(cfg);
    EXPECT_EQ(c.num_heads * c.head_dim, c.intermediate_size) << d;
    EXPECT_EQ(c.time_step_min_limit, 0.0) << d;
  }
}

// Found through fuzz_config: a state_size whose in_proj width overflows int (UB in conv_dim()).
TEST(IoConfig, WidthsPastIntAreRefused) {
  json cfg = mamba2_config();
  cfg["state_size"] = 2000000000;
  expect_mamba2_refused(cfg, {"n_groups = 2 and state_size = 2000000000 are too large", "does not fit in 32 bits"});
  // The largest state size whose width fits is accepted: the bound is the width, not a guess.
  cfg["state_size"] = (2147483647LL - 2 * 32 - 8) / 4;
  const Mamba2Config c = parse_mamba2_config(cfg);
  EXPECT_EQ(c.in_proj_dim(), 2 * 32 + 4 * c.state_size + 8);
}
