#pragma once
// The Mamba2 mixer keys Bamba and FalconH1 share (mamba_n_heads, mamba_d_head "auto", mamba_n_groups,
// mamba_d_state, mamba_d_conv, mamba_chunk_size, mamba_conv_bias, mamba_proj_bias), read into a Mamba2Config of
// the given inner width. Both HF mixers fix time_step_limit at (0, inf) whatever the config says.
#include <nlohmann/json.hpp>

#include "io/hf_config.h"

namespace parity::io {

// width_key names the field the inner width came from (for errors).
Mamba2Config mamba_family_mixer(const nlohmann::json& cfg, int hidden, int vocab, int inner, const char* width_key,
                                double eps);

}  // namespace parity::io
