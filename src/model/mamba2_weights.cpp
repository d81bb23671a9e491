#include "model/mamba2_weights.h"

#include <cstring>
#include <sstream>

#include "common/error.h"
#include "kernels/math.h"

namespace parity::model {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << "[";
  for (std::size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

const io::TensorView& need(const Checkpoint& ck, const std::string& name, std::vector<int64_t> shape) {
  const io::TensorView* t = ck.find(name);
  if (!t) throw Error(ck.origin + ": missing tensor '" + name + "'");
  if (t->shape != shape)
    throw Error(ck.origin + ": tensor '" + name + "' has shape " + shape_str(t->shape) + ", the config needs " +
                shape_str(shape));
  if (t->dtype != DType::F32 && t->dtype != DType::BF16 && t->dtype != DType::F16)
    throw Error(ck.origin + ": tensor '" + name + "' has dtype " + dtype_name(t->dtype) +
                "; weights must be F32, F16 or BF16");
  return *t;
}

kernels::PackedWeight pack(const io::TensorView& t) {
  return kernels::pack_weight(t.data, t.dtype, static_cast<int>(t.shape[0]), static_cast<int>(t.shape[1]));
}

}  // namespace

std::vector<float> widen(const io::TensorView& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  if (t.dtype == DType::F32) {
    std::memcpy(v.data(), t.data, v.size() * 4);
  } else {
    const auto* p = static_cast<const uint16_t*>(t.data);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = t.dtype == DType::BF16 ? bf16_to_f32(p[i]) : f16_to_f32(p[i]);
  }
  return v;
}

Mamba2Weights load_mamba2_weights(const io::Mamba2Config& c, const Checkpoint& ck) {
  Mamba2Weights w;
  const int64_t D = c.hidden_size, I = c.intermediate_size, H = c.num_heads, V = c.vocab_size;
  const int64_t conv = c.conv_dim(), proj = c.in_proj_dim(), K = c.conv_kernel;
  // Older checkpoints say "embedding"; HF renames it on load, and so do we.
  std::string emb = ck.find("backbone.embeddings.weight") ? "backbone.embeddings.weight" : "backbone.embedding.weight";
  w.embeddings = &need(ck, emb, {V, D});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "backbone.layers." + std::to_string(l) + ".";
    Mamba2LayerWeights L;
    L.norm = widen(need(ck, p + "norm.weight", {D}));
    L.in_proj = pack(need(ck, p + "mixer.in_proj.weight", {proj, D}));
    if (c.use_bias) L.in_proj_bias = widen(need(ck, p + "mixer.in_proj.bias", {proj}));
    L.conv_w = widen(need(ck, p + "mixer.conv1d.weight", {conv, 1, K}));
    if (c.use_conv_bias) L.conv_b = widen(need(ck, p + "mixer.conv1d.bias", {conv}));
    L.dt_bias = widen(need(ck, p + "mixer.dt_bias", {H}));
    std::vector<float> alog = widen(need(ck, p + "mixer.A_log", {H}));
    L.A.resize(H);
    for (int h = 0; h < H; ++h) L.A[h] = -kernels::exp_f(alog[h]);
    L.D = widen(need(ck, p + "mixer.D", {H}));
    L.gate_norm = widen(need(ck, p + "mixer.norm.weight", {I}));
    L.out_proj = pack(need(ck, p + "mixer.out_proj.weight", {D, I}));
    if (c.use_bias) L.out_proj_bias = widen(need(ck, p + "mixer.out_proj.bias", {D}));
    w.layers.push_back(std::move(L));
  }
  w.norm_f = widen(need(ck, "backbone.norm_f.weight", {D}));
  if (c.tie_word_embeddings) w.lm_head = pack(*w.embeddings);
  else w.lm_head = pack(need(ck, "lm_head.weight", {V, D}));
  return w;
}

}  // namespace parity::model
