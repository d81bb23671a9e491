#include "model/builtin.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/dtype.h"
#include "common/error.h"
#include "io/granite_config.h"
#include "io/hf_config.h"
#include "io/hybrid_spec.h"
#include "model/hybrid_weights.h"
#include "kernels/math.h"

namespace parity::model {
namespace {

// splitmix64: tiny, fast, and the same sequence everywhere.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0,1)
  // Irwin–Hall(4) rescaled to unit variance: close enough to normal for weights, and free of
  // libm calls (Box–Muller would make the weights depend on the C library).
  float normal() {
    float a = uniform() + uniform() + uniform() + uniform() - 2.0f;
    return a * 1.7320508f;
  }
};

struct OwnedTensor {
  std::vector<int64_t> shape;
  DType dtype;
  std::vector<uint8_t> bytes;
};

struct BuiltinStore {
  std::map<std::string, OwnedTensor> owned;
  std::map<std::string, io::TensorView> views;
};

void put(BuiltinStore& st, const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v,
         DType dtype) {
  OwnedTensor t{std::move(shape), dtype, {}};
  t.bytes.resize(v.size() * dtype_size(dtype));
  if (dtype == DType::BF16) {
    auto* p = reinterpret_cast<uint16_t*>(t.bytes.data());
    for (std::size_t i = 0; i < v.size(); ++i) p[i] = f32_to_bf16(v[i]);
  } else {
    std::memcpy(t.bytes.data(), v.data(), v.size() * 4);
  }
  st.owned[name] = std::move(t);
}

std::vector<float> normal_vec(Rng& r, std::size_t n, float std, float mean = 0.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = mean + std * r.normal();
  return v;
}

// One Mamba2 mixer's tensors under prefix p (shared by the Mamba2 and hybrid built-ins).
void put_mixer(BuiltinStore& st, Rng& r, const io::Mamba2Config& c, const std::string& p, DType wt) {
  const int D = c.hidden_size, I = c.intermediate_size, H = c.num_heads;
  const int conv = c.conv_dim(), proj = c.in_proj_dim(), K = c.conv_kernel;
  const float proj_std = 1.0f / std::sqrt(static_cast<float>(D));
  const float out_std = 1.0f / std::sqrt(static_cast<float>(I)) / std::sqrt(2.0f * c.num_hidden_layers);
  put(st, p + "in_proj.weight", {proj, D}, normal_vec(r, std::size_t(proj) * D, proj_std), wt);
  if (c.use_bias) put(st, p + "in_proj.bias", {proj}, normal_vec(r, proj, 0.02f), wt);
  std::vector<float> cw(std::size_t(conv) * K);
  for (auto& x : cw) x = (r.uniform() - 0.5f) * (2.0f / std::sqrt(static_cast<float>(K)));
  put(st, p + "conv1d.weight", {conv, 1, K}, cw, wt);
  if (c.use_conv_bias) put(st, p + "conv1d.bias", {conv}, normal_vec(r, conv, 0.1f), wt);
  // Realistic Mamba2 init: A = -U(1, 16); dt log-uniform in [1e-3, 1e-1] (tiny-g2 reaches above
  // its 0.05 limit on purpose, so the clamp is exercised); dt_bias = softplus^-1(dt).
  std::vector<float> alog(H), dtb(H), dd(H);
  for (int h = 0; h < H; ++h) {
    alog[h] = kernels::log_f(1.0f + 15.0f * r.uniform());
    float lo = kernels::log_f(1e-3f), hi = kernels::log_f(1e-1f);
    float dt = kernels::exp_f(lo + (hi - lo) * r.uniform());
    dtb[h] = kernels::log_f(kernels::exp_f(dt) - 1.0f);
    dd[h] = 1.0f + 0.1f * r.normal();
  }
  put(st, p + "A_log", {H}, alog, DType::F32);
  put(st, p + "dt_bias", {H}, dtb, DType::F32);
  put(st, p + "D", {H}, dd, DType::F32);
  put(st, p + "norm.weight", {I}, normal_vec(r, I, 0.05f, 1.0f), wt);
  put(st, p + "out_proj.weight", {D, I}, normal_vec(r, std::size_t(D) * I, out_std), wt);
  if (c.use_bias) put(st, p + "out_proj.bias", {D}, normal_vec(r, D, 0.02f), wt);
}

io::Mamba2Config builtin_config(const std::string& name) {
  io::Mamba2Config c;
  if (name == "tiny" || name == "tiny-g2") {
    c.vocab_size = 512;
    c.hidden_size = 64;
    c.num_hidden_layers = 2;
    c.num_heads = 4;
    c.head_dim = 32;
    c.state_size = 16;
    c.expand = 2;
    c.intermediate_size = 128;
    c.chunk_size = 32;
    if (name == "tiny-g2") {
      c.num_hidden_layers = 3;
      c.num_heads = 8;
      c.head_dim = 16;
      c.n_groups = 2;
      c.use_bias = true;
      c.tie_word_embeddings = false;
      c.time_step_max_limit = 0.05;
    }
  } else if (name == "mamba2-130m") {
    c.vocab_size = 50288;
    c.hidden_size = 768;
    c.num_hidden_layers = 24;
    c.num_heads = 24;
    c.head_dim = 64;
    c.state_size = 128;
    c.expand = 2;
    c.intermediate_size = 1536;
    c.chunk_size = 256;
  } else if (name == "mamba2-2.7b") {
    // state-spaces/mamba2-2.7b's shape (random weights): the GPU benchmarks' real-size model.
    c.vocab_size = 50288;
    c.hidden_size = 2560;
    c.num_hidden_layers = 64;
    c.num_heads = 80;
    c.head_dim = 64;
    c.state_size = 128;
    c.expand = 2;
    c.intermediate_size = 5120;
    c.chunk_size = 256;
  } else {
    std::string all;
    for (auto& n : builtin_names()) all += (all.empty() ? "" : ", ") + n;
    throw Error("unknown built-in model 'builtin:" + name + "' (available: " + all + ")");
  }
  return c;
}

uint64_t seed_of(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: a stable seed per name
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
}

}  // namespace

std::vector<std::string> builtin_names() {
  return {"tiny",           "tiny-g2",           "tiny-hybrid",     "tiny-hybrid-g2", "granite-h-bench",
          "granite-h-tiny", "granite-h-tiny-g2", "tiny-nemotron-h", "tiny-bamba",     "tiny-falcon-h1",
          "mamba2-130m",    "mamba2-2.7b"};
}

namespace {

Checkpoint finish(std::shared_ptr<BuiltinStore> st, const std::string& name, nlohmann::json config) {
  for (auto& [n, t] : st->owned) {
    io::TensorView v;
    v.name = n;
    v.dtype = t.dtype;
    v.shape = t.shape;
    v.data = t.bytes.data();
    v.nbytes = t.bytes.size();
    st->views[n] = v;
  }
  Checkpoint ck;
  ck.origin = "builtin:" + name;
  ck.config = std::move(config);
  ck.find = [st](const std::string& n) -> const io::TensorView* {
    auto it = st->views.find(n);
    return it == st->views.end() ? nullptr : &it->second;
  };
  ck.keepalive = st;
  return ck;
}

// A small GraniteMoeHybrid: Mamba layers 0 and 2, attention (GQA 4:1, RoPE) in 1 and 3, 8 experts
// top-2 plus the shared MLP after every layer, and the fixture's µP multipliers, so that every
// part of the hybrid forward runs in fast tests.
nlohmann::json tiny_hybrid_config() {
  return nlohmann::json{{"architectures", {"GraniteMoeHybridForCausalLM"}},
                        {"model_type", "granitemoehybrid"},
                        {"vocab_size", 512},
                        {"hidden_size", 64},
                        {"num_hidden_layers", 4},
                        {"layer_types", {"mamba", "attention", "mamba", "attention"}},
                        {"num_attention_heads", 4},
                        {"num_key_value_heads", 1},
                        {"attention_bias", false},
                        {"position_embedding_type", "rope"},
                        {"rope_theta", 10000.0},
                        {"embedding_multiplier", 12.0},
                        {"attention_multiplier", 0.0625},
                        {"residual_multiplier", 0.25},
                        {"logits_scaling", 4.0},
                        {"rms_norm_eps", 1e-5},
                        {"hidden_act", "silu"},
                        {"tie_word_embeddings", false},
                        {"num_local_experts", 8},
                        {"num_experts_per_tok", 2},
                        {"intermediate_size", 32},
                        {"shared_intermediate_size", 48},
                        {"mamba_n_heads", 4},
                        {"mamba_n_groups", 1},
                        {"mamba_d_state", 16},
                        {"mamba_d_head", 32},
                        {"mamba_d_conv", 4},
                        {"mamba_expand", 2},
                        {"mamba_chunk_size", 32},
                        {"mamba_conv_bias", true},
                        {"mamba_proj_bias", false}};
}

// A benchmark-size GraniteMoeHybrid (about 190M parameters): the Mamba mixer of mamba2-130m
// (24 heads × 64, state 128, chunk 256) in 12 of 16 layers, GQA attention (12 heads, 4 kv heads,
// head_dim 64, RoPE) in every 4th, 8 experts top-2 of width 256 plus a shared MLP of 1024 after
// every layer. Granite 4.0 H's proportions at a size a 2-core machine can step through.
// tiny-hybrid with two Mamba groups and two KV heads: the GraniteMoeHybrid that splits over two tensor-parallel
// ranks (tiny-hybrid's single group and KV head cannot be split).
nlohmann::json tiny_hybrid_g2_config() {
  nlohmann::json c = tiny_hybrid_config();
  c["mamba_n_groups"] = 2;
  c["num_key_value_heads"] = 2;
  return c;
}

nlohmann::json bench_hybrid_config() {
  nlohmann::json c = tiny_hybrid_config();
  std::vector<std::string> types;
  for (int l = 0; l < 16; ++l) types.push_back(l % 4 == 3 ? "attention" : "mamba");
  c["vocab_size"] = 32000;
  c["hidden_size"] = 768;
  c["num_hidden_layers"] = 16;
  c["layer_types"] = types;
  c["num_attention_heads"] = 12;
  c["num_key_value_heads"] = 4;
  c["attention_multiplier"] = 0.015625;
  c["intermediate_size"] = 256;
  c["shared_intermediate_size"] = 1024;
  c["mamba_n_heads"] = 24;
  c["mamba_d_state"] = 128;
  c["mamba_d_head"] = 64;
  c["mamba_chunk_size"] = 256;
  return c;
}

// Granite 4.0 H Tiny's shape (about 7B parameters, 1B active; random weights): the GPU benchmarks' real-size
// hybrid. 40 layers of which 4 attention (NoPE), 64 experts top-6 of width 512 plus a shared MLP of 1024,
// Mamba2 48 heads × 64 with state 128, vocabulary 100352 (from the published config.json; not downloaded).
nlohmann::json granite_h_tiny_config() {
  nlohmann::json c = tiny_hybrid_config();
  std::vector<std::string> types;
  for (int l = 0; l < 40; ++l) types.push_back(l % 10 == 5 ? "attention" : "mamba");
  c["vocab_size"] = 100352;
  c["hidden_size"] = 1536;
  c["num_hidden_layers"] = 40;
  c["layer_types"] = types;
  c["num_attention_heads"] = 12;
  c["num_key_value_heads"] = 4;
  c["position_embedding_type"] = "nope";
  c["attention_multiplier"] = 0.0078125;
  c["embedding_multiplier"] = 12.0;
  c["residual_multiplier"] = 0.22;
  c["logits_scaling"] = 6.0;
  c["num_local_experts"] = 64;
  c["num_experts_per_tok"] = 6;
  c["intermediate_size"] = 512;
  c["shared_intermediate_size"] = 1024;
  c["mamba_n_heads"] = 48;
  c["mamba_d_state"] = 128;
  c["mamba_d_head"] = 64;
  c["mamba_chunk_size"] = 256;
  return c;
}

// granite-h-tiny with two Mamba groups (B and C twice as wide, 1 % more parameters): the 7B-class hybrid that
// splits over two tensor-parallel ranks, for the TP benchmarks (granite-h-tiny's single group cannot be split).
nlohmann::json granite_h_tiny_g2_config() {
  nlohmann::json c = granite_h_tiny_config();
  c["mamba_n_groups"] = 2;
  return c;
}

// A large tensor's values, filled in parallel: block b of 2^20 values draws from its own stream seeded by the
// model, the tensor and b, so the bits do not depend on the thread count (7B values in seconds, not minutes).
void put_normal_parallel(BuiltinStore& st, uint64_t model_seed, const std::string& name, std::vector<int64_t> shape,
                         float sd) {
  std::size_t count = 1;
  for (int64_t x : shape) count *= static_cast<std::size_t>(x);
  OwnedTensor t{std::move(shape), DType::BF16, {}};
  t.bytes.resize(count * 2);
  auto* out = reinterpret_cast<uint16_t*>(t.bytes.data());
  const uint64_t tensor_seed = model_seed ^ seed_of(name);
  constexpr std::size_t kBlock = std::size_t(1) << 20;
  const auto blocks = static_cast<int64_t>((count + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    Rng r(tensor_seed + static_cast<uint64_t>(b) * 0x9e3779b97f4a7c15ull);
    const std::size_t lo = static_cast<std::size_t>(b) * kBlock, hi = std::min(count, lo + kBlock);
    for (std::size_t i = lo; i < hi; ++i) out[i] = f32_to_bf16(sd * r.normal());
  }
  st.owned[name] = std::move(t);
}

Checkpoint make_hybrid(const std::string& name, const nlohmann::json& config) {
  const io::GraniteHybridConfig c = io::parse_granite_hybrid_config(config);
  const io::Mamba2Config mc = io::to_mamba2_config(c);
  auto st = std::make_shared<BuiltinStore>();
  Rng r(seed_of(name));
  const int D = c.hidden_size, V = c.vocab_size, E = c.num_local_experts, F = c.intermediate_size;
  const int S = c.shared_intermediate_size, q = c.q_dim(), kv = c.kv_dim();
  const DType wt = DType::BF16;
  const float in_std = 1.0f / std::sqrt(static_cast<float>(D));
  auto norm = [&](const std::string& n) { put(*st, n, {D}, normal_vec(r, D, 0.05f, 1.0f), wt); };
  // Only the real-size model fills in parallel: the small built-ins keep the values they always had.
  const bool parallel_fill = name == "granite-h-tiny" || name == "granite-h-tiny-g2";
  auto lin = [&](const std::string& n, std::vector<int64_t> shape, float sd) {
    std::size_t count = 1;
    for (int64_t x : shape) count *= static_cast<std::size_t>(x);
    if (parallel_fill)
      put_normal_parallel(*st, seed_of(name), n, std::move(shape), sd);
    else
      put(*st, n, std::move(shape), normal_vec(r, count, sd), wt);
  };
  // With embedding_multiplier 12 the residual stream starts at about unit scale.
  lin("model.embed_tokens.weight", {V, D}, 0.1f);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    norm(p + "input_layernorm.weight");
    if (c.layer_types[static_cast<std::size_t>(l)] == io::GraniteLayerType::Mamba) {
      put_mixer(*st, r, mc, p + "mamba.", wt);
    } else {
      lin(p + "self_attn.q_proj.weight", {q, D}, in_std);
      lin(p + "self_attn.k_proj.weight", {kv, D}, in_std);
      lin(p + "self_attn.v_proj.weight", {kv, D}, in_std);
      lin(p + "self_attn.o_proj.weight", {D, q}, 1.0f / std::sqrt(static_cast<float>(q)));
    }
    norm(p + "post_attention_layernorm.weight");
    // Router std 2/sqrt(D): logits of a few units, so the top-2 choice is rarely a near tie.
    lin(p + "block_sparse_moe.router.layer.weight", {E, D}, 2.0f * in_std);
    lin(p + "block_sparse_moe.input_linear.weight", {E, 2 * F, D}, in_std);
    lin(p + "block_sparse_moe.output_linear.weight", {E, D, F}, 1.0f / std::sqrt(static_cast<float>(F)));
    lin(p + "shared_mlp.input_linear.weight", {2 * S, D}, in_std);
    lin(p + "shared_mlp.output_linear.weight", {D, S}, 1.0f / std::sqrt(static_cast<float>(S)));
  }
  norm("model.norm.weight");
  // logits_scaling 4 divides: a wider head keeps the logits spread over a few units.
  lin("lm_head.weight", {V, D}, 4.0f * in_std);
  return finish(st, name, config);
}

// The other hybrid families' built-ins, small models with each family's real proportions of block kinds:
// tiny-nemotron-h (Nemotron-H's dense layers and Nemotron 3's MoE layers: Mamba-heavy, one attention layer, ReLU²
// MLP and MoE with a sigmoid router, correction bias and shared expert), tiny-bamba (Mamba2 with one
// partial-RoPE attention layer, SwiGLU after every layer), tiny-falcon-h1 (attention and Mamba2 side by side in
// every layer, µP multipliers, mamba_d_ssm, gated norm per group).
nlohmann::json family_config(const std::string& name) {
  if (name == "tiny-nemotron-h")
    return nlohmann::json{{"architectures", {"NemotronHForCausalLM"}},
                          {"model_type", "nemotron_h"},
                          {"vocab_size", 512},
                          {"hidden_size", 64},
                          {"hybrid_override_pattern", "ME*M-E"},
                          {"num_attention_heads", 4},
                          {"num_key_value_heads", 2},
                          {"head_dim", 16},
                          {"intermediate_size", 96},
                          {"mlp_hidden_act", "relu2"},
                          {"mamba_num_heads", 8},
                          {"mamba_head_dim", 16},
                          {"ssm_state_size", 16},
                          {"n_groups", 2},
                          {"conv_kernel", 4},
                          {"chunk_size", 32},
                          {"n_routed_experts", 8},
                          {"num_experts_per_tok", 2},
                          {"moe_intermediate_size", 32},
                          {"moe_shared_expert_intermediate_size", 48},
                          {"n_shared_experts", 1},
                          {"routed_scaling_factor", 2.5},
                          {"norm_topk_prob", true},
                          {"n_group", 1},
                          {"topk_group", 1},
                          {"layer_norm_epsilon", 1e-5},
                          {"tie_word_embeddings", false}};
  if (name == "tiny-bamba")
    return nlohmann::json{{"architectures", {"BambaForCausalLM"}},
                          {"model_type", "bamba"},
                          {"vocab_size", 512},
                          {"hidden_size", 64},
                          {"num_hidden_layers", 4},
                          {"attn_layer_indices", {2}},
                          {"num_attention_heads", 4},
                          {"num_key_value_heads", 2},
                          {"intermediate_size", 96},
                          {"mamba_n_heads", 4},
                          {"mamba_d_head", "auto"},
                          {"mamba_n_groups", 1},
                          {"mamba_d_state", 16},
                          {"mamba_d_conv", 4},
                          {"mamba_expand", 2},
                          {"mamba_chunk_size", 32},
                          {"rms_norm_eps", 1e-5},
                          {"partial_rotary_factor", 0.5},
                          {"rope_theta", 10000.0},
                          {"tie_word_embeddings", false}};
  if (name == "tiny-falcon-h1")
    return nlohmann::json{{"architectures", {"FalconH1ForCausalLM"}},
                          {"model_type", "falcon_h1"},
                          {"vocab_size", 512},
                          {"hidden_size", 64},
                          {"num_hidden_layers", 3},
                          {"num_attention_heads", 4},
                          {"num_key_value_heads", 2},
                          {"intermediate_size", 96},
                          {"mamba_d_ssm", 96},
                          {"mamba_n_heads", 6},
                          {"mamba_d_head", 16},
                          {"mamba_n_groups", 2},
                          {"mamba_d_state", 16},
                          {"mamba_d_conv", 4},
                          {"mamba_chunk_size", 32},
                          {"mamba_rms_norm", true},
                          {"mamba_norm_before_gate", false},
                          {"rms_norm_eps", 1e-5},
                          {"rope_theta", 10000.0},
                          {"embedding_multiplier", 2.0},
                          {"lm_head_multiplier", 0.5},
                          {"mlp_multipliers", {0.5, 2.0}},
                          {"key_multiplier", 0.5},
                          {"attention_in_multiplier", 1.5},
                          {"attention_out_multiplier", 0.75},
                          {"ssm_multipliers", {0.5, 1.25, 0.75, 1.5, 0.625}},
                          {"ssm_in_multiplier", 1.25},
                          {"ssm_out_multiplier", 0.5},
                          {"tie_word_embeddings", false}};
  return nullptr;
}

// Every tensor of a family built-in from its spec (io/hybrid_spec.h), with the scales of make_hybrid.
Checkpoint make_family(const std::string& name, const nlohmann::json& config) {
  const io::HybridSpec s = io::hybrid_spec_from_config(config, [](const std::string&) { return false; });
  auto st = std::make_shared<BuiltinStore>();
  Rng r(seed_of(name));
  const int D = s.hidden_size, V = s.vocab_size;
  const DType wt = DType::BF16;
  const float in_std = 1.0f / std::sqrt(static_cast<float>(D));
  auto count = [](const std::vector<int64_t>& shape) {
    std::size_t c = 1;
    for (int64_t x : shape) c *= static_cast<std::size_t>(x);
    return c;
  };
  auto lin = [&](const std::string& n, std::vector<int64_t> shape, float sd) {
    const std::size_t c = count(shape);
    put(*st, n, std::move(shape), normal_vec(r, c, sd), wt);
  };
  auto norm = [&](const std::string& n) { put(*st, n, {D}, normal_vec(r, D, 0.05f, 1.0f), wt); };
  auto mlp = [&](const io::MlpSpec& m) {
    const int F = m.width;
    if (!m.gate_up.empty()) lin(m.gate_up, {2 * F, D}, in_std);
    if (!m.gate.empty()) lin(m.gate, {F, D}, in_std);
    if (!m.up.empty()) lin(m.up, {F, D}, in_std);
    lin(m.down, {D, F}, 1.0f / std::sqrt(static_cast<float>(F)));
  };
  lin(s.embed, {V, D}, 0.5f);
  for (const io::HybridLayer& L : s.layers)
    for (const io::SubLayer& sub : L.subs) {
      norm(sub.norm);
      for (const io::Block& b : sub.blocks) {
        switch (b.kind) {
          case io::BlockKind::Mamba:
            put_mixer(*st, r, s.mamba, b.mamba.prefix, wt);
            break;
          case io::BlockKind::Attention: {
            const int q = b.attn.heads * b.attn.head_dim, kv = b.attn.kv_heads * b.attn.head_dim;
            lin(b.attn.q + ".weight", {q, D}, in_std);
            lin(b.attn.k + ".weight", {kv, D}, in_std);
            lin(b.attn.v + ".weight", {kv, D}, in_std);
            lin(b.attn.o + ".weight", {D, q}, 1.0f / std::sqrt(static_cast<float>(q)));
            break;
          }
          case io::BlockKind::Mlp:
            mlp(b.mlp);
            break;
          case io::BlockKind::Moe: {
            const io::MoeSpec& m = b.moe;
            const int E = m.experts, F = m.width, rows = m.act == io::Activation::SwiGLU ? 2 * F : F;
            // Router std 2/sqrt(D): logits of a few units, so the top-k choice is rarely a near tie.
            lin(m.router_weight, {E, D}, 2.0f * in_std);
            if (!m.correction_bias.empty()) put(*st, m.correction_bias, {E}, normal_vec(r, E, 0.05f), DType::F32);
            for (int e = 0; e < E; ++e) {
              lin(io::expert_tensor(m.experts_in, e), {rows, D}, in_std);
              lin(io::expert_tensor(m.experts_out, e), {D, F}, 1.0f / std::sqrt(static_cast<float>(F)));
            }
            if (m.has_shared) mlp(m.shared);
            break;
          }
        }
      }
    }
  norm(s.final_norm);
  if (!s.lm_head.empty()) lin(s.lm_head, {V, D}, 2.0f * in_std);
  return finish(st, name, config);
}

}  // namespace

Checkpoint make_builtin(const std::string& name) {
  if (name == "tiny-hybrid") return make_hybrid(name, tiny_hybrid_config());
  if (name == "tiny-hybrid-g2") return make_hybrid(name, tiny_hybrid_g2_config());
  if (name == "granite-h-bench") return make_hybrid(name, bench_hybrid_config());
  if (name == "granite-h-tiny") return make_hybrid(name, granite_h_tiny_config());
  if (name == "granite-h-tiny-g2") return make_hybrid(name, granite_h_tiny_g2_config());
  if (const nlohmann::json fc = family_config(name); !fc.is_null()) return make_family(name, fc);
  const io::Mamba2Config c = builtin_config(name);
  auto st = std::make_shared<BuiltinStore>();
  Rng r(seed_of(name));
  const int D = c.hidden_size, V = c.vocab_size;
  const DType wt = DType::BF16;
  const float proj_std = 1.0f / std::sqrt(static_cast<float>(D));
  // std 0.1: tied logits then spread over a few units, so sampling has a real distribution to
  // draw from (0.5 made the tiny model repeat one token with near certainty).
  put(*st, "backbone.embeddings.weight", {V, D}, normal_vec(r, std::size_t(V) * D, 0.1f), wt);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "backbone.layers." + std::to_string(l) + ".";
    put(*st, p + "norm.weight", {D}, normal_vec(r, D, 0.05f, 1.0f), wt);
    put_mixer(*st, r, c, p + "mixer.", wt);
  }
  put(*st, "backbone.norm_f.weight", {D}, normal_vec(r, D, 0.05f, 1.0f), wt);
  if (!c.tie_word_embeddings)
    put(*st, "lm_head.weight", {V, D}, normal_vec(r, std::size_t(V) * D, proj_std), wt);
  return finish(st, name, io::to_json(c));
}

int builtin_vocab_size(const std::string& name) {
  if (name == "tiny-hybrid") return tiny_hybrid_config()["vocab_size"].get<int>();
  if (name == "tiny-hybrid-g2") return tiny_hybrid_g2_config()["vocab_size"].get<int>();
  if (name == "granite-h-bench") return bench_hybrid_config()["vocab_size"].get<int>();
  if (name == "granite-h-tiny") return granite_h_tiny_config()["vocab_size"].get<int>();
  if (name == "granite-h-tiny-g2") return granite_h_tiny_g2_config()["vocab_size"].get<int>();
  if (const nlohmann::json fc = family_config(name); !fc.is_null()) return fc["vocab_size"].get<int>();
  return builtin_config(name).vocab_size;
}

void save_checkpoint(const Checkpoint& ck, const std::string& dir) {
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir + "/config.json");
    f << ck.config.dump(2) << "\n";
    if (!f) throw Error("cannot write " + dir + "/config.json");
  }
  std::vector<std::string> names;
  if (io::is_hybrid_architecture(io::architecture_of(ck.config))) {
    names = hybrid_tensor_names(
        io::hybrid_spec_from_config(ck.config, [&ck](const std::string& n) { return ck.find(n) != nullptr; }));
  } else {
    auto cfg = io::parse_mamba2_config(ck.config);
    names = {"backbone.embeddings.weight", "backbone.norm_f.weight", "lm_head.weight"};
    const char* per_layer[] = {"norm.weight", "mixer.in_proj.weight", "mixer.in_proj.bias", "mixer.conv1d.weight",
                               "mixer.conv1d.bias", "mixer.A_log", "mixer.dt_bias", "mixer.D", "mixer.norm.weight",
                               "mixer.out_proj.weight", "mixer.out_proj.bias"};
    for (int l = 0; l < cfg.num_hidden_layers; ++l)
      for (auto* s : per_layer) names.push_back("backbone.layers." + std::to_string(l) + "." + s);
  }
  std::vector<io::TensorToWrite> out;
  for (auto& n : names) {
    const io::TensorView* v = ck.find(n);
    if (!v) continue;
    out.push_back({n, v->dtype, v->shape, v->data});
  }
  io::write_safetensors(dir + "/model.safetensors", out, {{"format", "pt"}});
}

}  // namespace parity::model
