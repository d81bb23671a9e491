#pragma once
// The Mamba2 mixer keys Bamba and FalconH1 share (mamba_n_heads, mamba_d_head "auto", mamba_n_groups,
// mamba_d_state, mamba_d_conv, mamba_chunk_size, mamba_conv_bias, mamba_proj_bias), read into a Mamba2Config of
// the given inner width. Both HF mixers fix time_step_limit at (0, inf) whatever the config says.
#include <nlohmann/json.hpp>

#include "io/hf_config.h"
#include "io/hybrid_spec.h"

namespace parity::io {

// The fields both read alike: vocab_size, hidden_size, num_hidden_layers (into num_layers),
// rms_norm_eps, tie_word_embeddings, and the model.* names of the embedding, final norm and head.
HybridSpec mamba_family_base(const nlohmann::json& json, const char* architecture, int& num_layers);

// The feed-forward sub-layer both put after the mixer: pre_ff_layernorm, then a SwiGLU MLP at
// <layer>.feed_forward.{gate,up,down}_proj of the given width.
SubLayer swiglu_feed_forward(const std::string& layer, int width);

// width_key names the field the inner width came from (for errors).
Mamba2Config mamba_family_mixer(const nlohmann::json& cfg, int hidden, int vocab, int inner, const char* width_key,
                                double eps);

}  // namespace parity::io
