// FalconH1ForCausalLM and BambaForCausalLM against hand-written float64 forwards (tests/hybrid_ref64.h) on small
// checkpoints written here. FalconH1: attention and Mamba2 side by side in every layer with all of its µP
// multipliers (embedding, ssm_in / ssm_multipliers / ssm_out, attention_in / key / attention_out, mlp gate and
// down, lm_head), mamba_d_ssm, with and without the gated norm. Bamba: Mamba2 and partial-RoPE attention layers,
// SwiGLU after each. Every row within 1e-5 relative; companions show the comparison can fail.
#include <gtest/gtest.h>

#include <filesystem>

#include "hybrid_ref64.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "test_support.h"

using namespace parity;
namespace fs = std::filesystem;

// Its own namespace, tests included: the dimensions' one-letter names (V, H, F, ...) and ref64's helpers
// must not meet the other test files compiled with this one in a unity batch.
namespace falcon_bamba_test {
using namespace parity::test::ref64;

namespace {

constexpr int V = 40, H = 16, NQ = 4, NKV = 2, F = 12;
constexpr double kEps = 1e-5;
const std::vector<int32_t> kTokens = {3, 17, 5, 39, 0, 22, 8, 8, 31, 12, 7, 1};

Mat embed(const Weights& w, const std::string& name, double mult) {
  Mat h;
  for (int32_t t : kTokens) {
    std::vector<double> r(H);
    for (int i = 0; i < H; ++i) r[i] = w.at(name)[std::size_t(t) * H + i] * mult;
    h.push_back(r);
  }
  return h;
}

void add_mamba(Weights& w, const std::string& p, const MambaShape& s) {
  const int conv = s.inner + 2 * s.groups * s.state, proj = s.inner + conv + s.heads;
  const float in = 1.0f / std::sqrt(static_cast<float>(H));
  w.add(p + "in_proj.weight", {proj, H}, in);
  w.add(p + "conv1d.weight", {conv, 1, s.conv}, 0.4f);
  w.add(p + "conv1d.bias", {conv}, 0.1f);
  std::vector<float> dtb(static_cast<std::size_t>(s.heads)), alog(dtb.size()), d(dtb.size());
  for (int h = 0; h < s.heads; ++h) {
    const double dt = std::exp(std::log(1e-3) + (std::log(1e-1) - std::log(1e-3)) * (h + 0.5) / s.heads);
    dtb[h] = static_cast<float>(dt + std::log(-std::expm1(-dt)));
    alog[h] = static_cast<float>(std::log(1.0 + 15.0 * (h + 0.3) / s.heads));
    d[h] = 1.0f + 0.1f * static_cast<float>(h);
  }
  w.set(p + "dt_bias", {s.heads}, dtb);
  w.set(p + "A_log", {s.heads}, alog);
  w.set(p + "D", {s.heads}, d);
  w.add(p + "norm.weight", {s.inner}, 0.1f, 1.0f);
  w.add(p + "out_proj.weight", {H, s.inner}, 1.0f / std::sqrt(static_cast<float>(s.inner)));
}

void add_attention(Weights& w, const std::string& p, int head_dim) {
  const float in = 1.0f / std::sqrt(static_cast<float>(H));
  w.add(p + "q_proj.weight", {NQ * head_dim, H}, in);
  w.add(p + "k_proj.weight", {NKV * head_dim, H}, in);
  w.add(p + "v_proj.weight", {NKV * head_dim, H}, in);
  w.add(p + "o_proj.weight", {H, NQ * head_dim}, 0.3f);
}

void add_mlp(Weights& w, const std::string& p) {
  const float in = 1.0f / std::sqrt(static_cast<float>(H));
  w.add(p + "gate_proj.weight", {F, H}, in);
  w.add(p + "up_proj.weight", {F, H}, in);
  w.add(p + "down_proj.weight", {H, F}, 0.3f);
}

// ---- FalconH1

struct Falcon {
  bool rms_norm;
  int groups;
  bool before_gate;
};

const double kSsm[5] = {0.5, 1.25, 0.75, 1.5, 0.625};

MambaShape falcon_mamba(const Falcon& f) {
  MambaShape s;
  s.hidden = H, s.inner = 24, s.heads = 3, s.head_dim = 8, s.groups = f.groups, s.state = 4, s.conv = 4;
  s.rms_norm = f.rms_norm, s.norm_before_gate = f.before_gate, s.eps = kEps;
  s.segment_multipliers.assign(std::begin(kSsm), std::end(kSsm));
  return s;
}

Weights falcon_checkpoint(const fs::path& dir, const Falcon& f) {
  Weights w;
  w.add("model.embed_tokens.weight", {V, H}, 1.0f);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w.add(p + "input_layernorm.weight", {H}, 0.1f, 1.0f);
    w.add(p + "pre_ff_layernorm.weight", {H}, 0.1f, 1.0f);
    add_mamba(w, p + "mamba.", falcon_mamba(f));
    add_attention(w, p + "self_attn.", 4);
    add_mlp(w, p + "feed_forward.");
  }
  w.add("model.final_layernorm.weight", {H}, 0.1f, 1.0f);
  w.add("lm_head.weight", {V, H}, 0.25f);
  w.write(dir / "model.safetensors");
  nlohmann::json c = {{"architectures", {"FalconH1ForCausalLM"}}, {"model_type", "falcon_h1"}, {"vocab_size", V},
                      {"hidden_size", H}, {"num_hidden_layers", 2}, {"num_attention_heads", NQ},
                      {"num_key_value_heads", NKV}, {"intermediate_size", F}, {"mamba_d_ssm", 24},
                      {"mamba_n_heads", 3}, {"mamba_d_head", 8}, {"mamba_n_groups", f.groups}, {"mamba_d_state", 4},
                      {"mamba_d_conv", 4}, {"mamba_chunk_size", 4}, {"mamba_rms_norm", f.rms_norm},
                      {"mamba_norm_before_gate", f.before_gate}, {"rms_norm_eps", kEps}, {"rope_theta", 1000.0},
                      {"embedding_multiplier", 2.0}, {"lm_head_multiplier", 0.7}, {"mlp_multipliers", {0.6, 1.3}},
                      {"key_multiplier", 0.8}, {"attention_in_multiplier", 1.2}, {"attention_out_multiplier", 0.9},
                      {"ssm_multipliers", kSsm}, {"ssm_in_multiplier", 1.1}, {"ssm_out_multiplier", 0.85},
                      {"tie_word_embeddings", false}};
  test::write_text(dir / "config.json", c.dump(2));
  return w;
}

Mat falcon_reference(const Weights& w, const Falcon& f, double key_multiplier = 0.8) {
  Mat h = embed(w, "model.embed_tokens.weight", 2.0);
  AttnShape a;
  a.hidden = H, a.heads = NQ, a.kv_heads = NKV, a.head_dim = 4, a.rotary_dim = 4, a.theta = 1000.0;
  a.key_multiplier = key_multiplier;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const Mat x = rmsnorm(h, w.at(p + "input_layernorm.weight"), kEps);
    Mat m = scale(mamba2(scale(x, 1.1), w, p + "mamba.", falcon_mamba(f)), 0.85);
    add_to(m, scale(attention(scale(x, 1.2), w, p + "self_attn.", a), 0.9));
    add_to(h, m);
    add_to(h, swiglu(rmsnorm(h, w.at(p + "pre_ff_layernorm.weight"), kEps), w, p + "feed_forward.", H, F, 0.6, 1.3));
  }
  return scale(linear(rmsnorm(h, w.at("model.final_layernorm.weight"), kEps), w.at("lm_head.weight"), V, H), 0.7);
}

// ---- Bamba

MambaShape bamba_mamba() {
  MambaShape s;
  s.hidden = H, s.inner = 32, s.heads = 4, s.head_dim = 8, s.groups = 1, s.state = 4, s.conv = 4, s.eps = kEps;
  return s;
}

Weights bamba_checkpoint(const fs::path& dir) {
  Weights w;
  w.add("model.embed_tokens.weight", {V, H}, 1.0f);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w.add(p + "input_layernorm.weight", {H}, 0.1f, 1.0f);
    w.add(p + "pre_ff_layernorm.weight", {H}, 0.1f, 1.0f);
    if (l == 0) add_mamba(w, p + "mamba.", bamba_mamba());
    else add_attention(w, p + "self_attn.", 8);
    add_mlp(w, p + "feed_forward.");
  }
  w.add("model.final_layernorm.weight", {H}, 0.1f, 1.0f);
  w.add("lm_head.weight", {V, H}, 0.25f);
  w.write(dir / "model.safetensors");
  test::write_text(dir / "config.json", R"({
    "architectures": ["BambaForCausalLM"], "model_type": "bamba", "vocab_size": 40, "hidden_size": 16,
    "num_hidden_layers": 2, "attn_layer_indices": [1], "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 8, "intermediate_size": 12, "mamba_n_heads": 4, "mamba_d_head": "auto", "mamba_n_groups": 1,
    "mamba_d_state": 4, "mamba_d_conv": 4, "mamba_chunk_size": 4, "rms_norm_eps": 1e-5,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.5},
    "tie_word_embeddings": false})");
  return w;
}

Mat bamba_reference(const Weights& w, int rotary_dim = 4) {
  Mat h = embed(w, "model.embed_tokens.weight", 1.0);
  AttnShape a;
  a.hidden = H, a.heads = NQ, a.kv_heads = NKV, a.head_dim = 8, a.rotary_dim = rotary_dim, a.theta = 1000.0;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const Mat x = rmsnorm(h, w.at(p + "input_layernorm.weight"), kEps);
    add_to(h, l == 0 ? mamba2(x, w, p + "mamba.", bamba_mamba()) : attention(x, w, p + "self_attn.", a));
    add_to(h, swiglu(rmsnorm(h, w.at(p + "pre_ff_layernorm.weight"), kEps), w, p + "feed_forward.", H, F));
  }
  return linear(rmsnorm(h, w.at("model.final_layernorm.weight"), kEps), w.at("lm_head.weight"), V, H);
}

double parity_vs(const fs::path& dir, const Mat& ref, model::ScanMode mode) {
  auto m = model::load_model(model::open_checkpoint(dir.string()));
  return worst_row(model::score_all_rows(*m, kTokens, mode), ref);
}

}  // namespace

TEST(FalconH1, EveryMultiplierMatchesAFloat64Forward) {
  for (const Falcon f : {Falcon{false, 1, false}, Falcon{true, 3, true}, Falcon{true, 1, false}}) {
    SCOPED_TRACE("mamba_rms_norm " + std::to_string(f.rms_norm) + " groups " + std::to_string(f.groups) +
                 " norm_before_gate " + std::to_string(f.before_gate));
    const fs::path dir = test::scratch_dir("falcon_ref");
    const Weights w = falcon_checkpoint(dir, f);
    const Mat ref = falcon_reference(w, f);
    for (auto mode : {model::ScanMode::Exact, model::ScanMode::Plain}) {
      const double e = parity_vs(dir, ref, mode);
      std::fprintf(stderr, "[ measured ] falcon-h1 worst row relative %.3g\n", e);
      EXPECT_LT(e, 1e-5);
    }
    fs::remove_all(dir);
  }
}

// The companion: one multiplier left out of the reference (key_multiplier 1) is far off.
TEST(FalconH1, TheFloat64ComparisonCanFail) {
  const fs::path dir = test::scratch_dir("falcon_ref_bad");
  const Falcon f{false, 1, false};
  const Weights w = falcon_checkpoint(dir, f);
  EXPECT_GT(parity_vs(dir, falcon_reference(w, f, 1.0), model::ScanMode::Exact), 1e-4);
  fs::remove_all(dir);
}

TEST(Bamba, MambaAndPartialRopeAttentionMatchAFloat64Forward) {
  const fs::path dir = test::scratch_dir("bamba_ref");
  const Weights w = bamba_checkpoint(dir);
  const Mat ref = bamba_reference(w);
  for (auto mode : {model::ScanMode::Exact, model::ScanMode::Plain}) {
    const double e = parity_vs(dir, ref, mode);
    std::fprintf(stderr, "[ measured ] bamba worst row relative %.3g\n", e);
    EXPECT_LT(e, 1e-5);
  }
  // The companion: RoPE over the whole head (partial_rotary_factor ignored) is far off.
  EXPECT_GT(parity_vs(dir, bamba_reference(w, 8), model::ScanMode::Exact), 1e-4);
  fs::remove_all(dir);
}

}  // namespace falcon_bamba_test
