#include "model/mamba2_weights.h"

#include "kernels/conv1d.h"
#include "kernels/math.h"
#include "model/weight_loading.h"

namespace parity::model {

Mamba2LayerWeights load_mamba2_mixer_weights(const io::Mamba2Config& c, const Checkpoint& ck, const std::string& p) {
  const int64_t D = c.hidden_size, I = c.intermediate_size, H = c.num_heads;
  const int64_t conv = c.conv_dim(), proj = c.in_proj_dim(), K = c.conv_kernel;
  Mamba2LayerWeights L;
  L.in_proj = pack_tensor(need_tensor(ck, p + "in_proj.weight", {proj, D}));
  if (c.use_bias) L.in_proj_bias = need_floats(ck, p + "in_proj.bias", {proj});
  L.conv_taps = kernels::conv1d_taps(need_floats(ck, p + "conv1d.weight", {conv, 1, K}).data(), static_cast<int>(conv),
                                     static_cast<int>(K));
  if (c.use_conv_bias) L.conv_b = need_floats(ck, p + "conv1d.bias", {conv});
  L.dt_bias = need_floats(ck, p + "dt_bias", {H});
  std::vector<float> alog = need_floats(ck, p + "A_log", {H});
  L.A.resize(H);
  for (int h = 0; h < H; ++h) L.A[h] = -kernels::exp_f(alog[h]);
  L.D = need_floats(ck, p + "D", {H});
  if (c.rms_norm) L.gate_norm = need_floats(ck, p + "norm.weight", {I});  // FalconH1 may have none
  L.out_proj = pack_tensor(need_tensor(ck, p + "out_proj.weight", {D, I}));
  if (c.use_bias) L.out_proj_bias = need_floats(ck, p + "out_proj.bias", {D});
  return L;
}

Mamba2Weights load_mamba2_weights(const io::Mamba2Config& c, const Checkpoint& ck) {
  Mamba2Weights w;
  const int64_t D = c.hidden_size, V = c.vocab_size;
  // Older checkpoints say "embedding"; HF renames it on load, and so do we.
  std::string emb = ck.find("backbone.embeddings.weight") ? "backbone.embeddings.weight" : "backbone.embedding.weight";
  w.embeddings = &need_tensor(ck, emb, {V, D});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "backbone.layers." + std::to_string(l) + ".";
    w.norms.push_back(need_floats(ck, p + "norm.weight", {D}));
    w.layers.push_back(load_mamba2_mixer_weights(c, ck, p + "mixer."));
  }
  w.norm_f = need_floats(ck, "backbone.norm_f.weight", {D});
  if (c.tie_word_embeddings) w.lm_head = pack_tensor(*w.embeddings);
  else w.lm_head = pack_tensor(need_tensor(ck, "lm_head.weight", {V, D}));
  return w;
}

}  // namespace parity::model
