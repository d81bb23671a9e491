// NemotronHForCausalLM against a hand-written float64 forward on a small checkpoint written here: one MoE layer
// (sigmoid router + correction bias, top-2, norm_topk_prob, routed_scaling_factor, ReLU² experts, shared expert),
// one ReLU² MLP layer and one attention layer (GQA, no position embedding, scale 1/sqrt(head_dim)), each behind
// its own RMSNorm with a plain residual. Until the Hugging Face fixture exists this pins the block semantics
// written from transformers' modeling_nemotron_h.py (docs/hybrids.md); the companion shows the check can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "hybrid_ref64.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "test_support.h"

using namespace parity;
namespace fs = std::filesystem;

// Its own namespace, tests included: the dimensions' one-letter names (V, H, F, ...) and ref64's helpers
// must not meet the other test files compiled with this one in a unity batch.
namespace nemotron_h_test {
using namespace parity::test::ref64;

namespace {

constexpr int V = 40, H = 16, E = 4, K = 2, F = 6, S = 10, FM = 12, NQ = 4, NKV = 2, D = 4;
constexpr double kScaling = 2.5, kEps = 1e-5;

Mat relu2_mlp(const Mat& x, const std::vector<float>& up, const std::vector<float>& down, int width,
              std::size_t up_off = 0, std::size_t down_off = 0) {
  Mat a = linear(x, up, width, H, up_off);
  for (auto& r : a)
    for (auto& v : r) v = v > 0 ? v * v : 0.0;
  return linear(a, down, H, width, down_off);
}

// The expected logits, in double, of the checkpoint below ("E-*").
Mat reference(const Weights& w, const std::vector<int32_t>& toks) {
  const std::size_t T = toks.size();
  Mat h(T, std::vector<double>(H));
  for (std::size_t t = 0; t < T; ++t)
    for (int i = 0; i < H; ++i) h[t][i] = w.at("model.embeddings.weight")[std::size_t(toks[t]) * H + i];
  {  // layer 0: MoE
    const std::string m = "model.layers.0.mixer.";
    const Mat x = rmsnorm(h, w.at("model.layers.0.norm.weight"), kEps);
    const Mat r = linear(x, w.at(m + "gate.weight"), E, H);
    Mat out = relu2_mlp(x, w.at(m + "shared_experts.up_proj.weight"), w.at(m + "shared_experts.down_proj.weight"), S);
    for (std::size_t t = 0; t < T; ++t) {
      std::vector<double> s(E), c(E);
      std::vector<int> order(E);
      for (int e = 0; e < E; ++e) {
        s[e] = 1.0 / (1.0 + std::exp(-r[t][e]));
        c[e] = s[e] + w.at(m + "gate.e_score_correction_bias")[e];
        order[e] = e;
      }
      std::sort(order.begin(), order.end(), [&](int a, int b) { return c[a] > c[b]; });
      double sum = 0;
      for (int j = 0; j < K; ++j) sum += s[order[j]];
      for (int j = 0; j < K; ++j) {
        const int e = order[j];
        const double g = s[e] / (sum + 1e-20) * kScaling;
        const Mat y = relu2_mlp(Mat{x[t]}, w.at(m + "experts." + std::to_string(e) + ".up_proj.weight"),
                                w.at(m + "experts." + std::to_string(e) + ".down_proj.weight"), F);
        for (int i = 0; i < H; ++i) out[t][i] += g * y[0][i];
      }
    }
    add_to(h, out);
  }
  {  // layer 1: ReLU² MLP
    const Mat x = rmsnorm(h, w.at("model.layers.1.norm.weight"), kEps);
    add_to(h, relu2_mlp(x, w.at("model.layers.1.mixer.up_proj.weight"), w.at("model.layers.1.mixer.down_proj.weight"),
                        FM));
  }
  {  // layer 2: causal GQA attention, no RoPE (rotary_dim 0), scale 1/sqrt(D)
    AttnShape a;
    a.hidden = H, a.heads = NQ, a.kv_heads = NKV, a.head_dim = D, a.rotary_dim = 0;
    add_to(h, attention(rmsnorm(h, w.at("model.layers.2.norm.weight"), kEps), w, "model.layers.2.mixer.", a));
  }
  return linear(rmsnorm(h, w.at("model.norm_f.weight"), kEps), w.at("lm_head.weight"), V, H);
}

Weights write_checkpoint(const fs::path& dir) {
  Weights w;
  const float in = 1.0f / std::sqrt(static_cast<float>(H));
  w.add("model.embeddings.weight", {V, H}, 1.0f);
  for (int l = 0; l < 3; ++l) w.add("model.layers." + std::to_string(l) + ".norm.weight", {H}, 0.1f, 1.0f);
  const std::string m = "model.layers.0.mixer.";
  w.add(m + "gate.weight", {E, H}, 2.0f * in);
  w.add(m + "gate.e_score_correction_bias", {E}, 0.1f);
  for (int e = 0; e < E; ++e) {
    w.add(m + "experts." + std::to_string(e) + ".up_proj.weight", {F, H}, in);
    w.add(m + "experts." + std::to_string(e) + ".down_proj.weight", {H, F}, 0.4f);
  }
  w.add(m + "shared_experts.up_proj.weight", {S, H}, in);
  w.add(m + "shared_experts.down_proj.weight", {H, S}, 0.3f);
  w.add("model.layers.1.mixer.up_proj.weight", {FM, H}, in);
  w.add("model.layers.1.mixer.down_proj.weight", {H, FM}, 0.3f);
  const std::string a = "model.layers.2.mixer.";
  w.add(a + "q_proj.weight", {NQ * D, H}, in);
  w.add(a + "k_proj.weight", {NKV * D, H}, in);
  w.add(a + "v_proj.weight", {NKV * D, H}, in);
  w.add(a + "o_proj.weight", {H, NQ * D}, 0.25f);
  w.add("model.norm_f.weight", {H}, 0.1f, 1.0f);
  w.add("lm_head.weight", {V, H}, in);
  w.write(dir / "model.safetensors");
  test::write_text(dir / "config.json", R"({
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "vocab_size": 40, "hidden_size": 16,
    "layers_block_type": ["moe", "mlp", "full_attention"], "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 4, "intermediate_size": 12, "mlp_hidden_act": "relu2", "n_routed_experts": 4,
    "num_experts_per_tok": 2, "moe_intermediate_size": 6, "moe_shared_expert_intermediate_size": 10,
    "n_shared_experts": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": true, "n_group": 1, "topk_group": 1,
    "layer_norm_epsilon": 1e-5, "tie_word_embeddings": false})");
  return w;
}

double rel_error(const std::vector<float>& got, const Mat& ref) {
  double num = 0, den = 0;
  for (std::size_t t = 0; t < ref.size(); ++t)
    for (int i = 0; i < V; ++i) {
      const double d = got[t * V + i] - ref[t][i];
      num += d * d;
      den += ref[t][i] * ref[t][i];
    }
  return std::sqrt(num / den);
}

}  // namespace

TEST(NemotronH, MoeMlpAndAttentionBlocksMatchAFloat64Forward) {
  const fs::path dir = test::scratch_dir("nemotron_blocks");
  const Weights w = write_checkpoint(dir);
  const std::vector<int32_t> toks = {3, 17, 5, 39, 0, 22, 8, 8, 31, 12};
  auto m = model::load_model(model::open_checkpoint(dir.string()));
  EXPECT_EQ(m->architecture(), "NemotronHForCausalLM");
  const Mat ref = reference(w, toks);
  for (auto mode : {model::ScanMode::Exact, model::ScanMode::Plain}) {
    const auto got = model::score_all_rows(*m, toks, mode);
    const double rel = rel_error(got, ref);
    RecordProperty("rel_fro", std::to_string(rel));
    EXPECT_LT(rel, 1e-5);
  }
  fs::remove_all(dir);
}

// The companion: the same forward read as a softmax router without the correction bias and scaling (Granite's
// semantics) is far off, so the comparison above can fail.
TEST(NemotronH, TheFloat64ComparisonCanFail) {
  const fs::path dir = test::scratch_dir("nemotron_blocks_bad");
  Weights w = write_checkpoint(dir);
  const std::vector<int32_t> toks = {3, 17, 5, 39, 0, 22, 8, 8, 31, 12};
  auto m = model::load_model(model::open_checkpoint(dir.string()));
  const auto got = model::score_all_rows(*m, toks);
  for (auto& v : w.t.at("model.layers.0.mixer.gate.e_score_correction_bias").second) v = -v;
  EXPECT_GT(rel_error(got, reference(w, toks)), 1e-3) << "another correction bias must give other logits";
  fs::remove_all(dir);
}

}  // namespace nemotron_h_test
