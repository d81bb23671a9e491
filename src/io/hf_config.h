#pragma once
// Typed model configurations parsed from Hugging Face config.json, explicit per architecture.
// Every field that changes the computation is read; a value parity cannot run is refused with
// an error naming the field.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace parity::io {

struct Mamba2Config {
  int vocab_size = 0;
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int num_heads = 0;
  int head_dim = 0;
  int state_size = 0;
  int n_groups = 1;
  int expand = 2;
  int intermediate_size = 0;  // expand * hidden_size unless given
  int conv_kernel = 4;
  int chunk_size = 256;
  bool use_bias = false;
  bool use_conv_bias = true;
  double layer_norm_epsilon = 1e-5;
  bool rms_norm = true;
  bool norm_before_gate = false;
  bool residual_in_fp32 = true;
  bool tie_word_embeddings = true;
  double time_step_min_limit = 0.0;    // time_step_limit[0]
  double time_step_max_limit = 1e300;  // time_step_limit[1]; +inf when "Infinity"
  std::string hidden_act = "silu";

  int conv_dim() const { return intermediate_size + 2 * n_groups * state_size; }
  int in_proj_dim() const { return 2 * intermediate_size + 2 * n_groups * state_size + num_heads; }
};

// Reads `architectures` (first entry) or `model_type`; throws on an unknown architecture.
std::string architecture_of(const nlohmann::json& cfg);

Mamba2Config parse_mamba2_config(const nlohmann::json& cfg);

// Refuses a shape whose derived widths (conv_dim, in_proj_dim: the widest) do not fit an int, naming
// the config's fields: `names` is {groups, state size, heads} as that config.json spells them.
void require_mamba2_widths_fit(const Mamba2Config& c, const char* const (&names)[3]);
nlohmann::json to_json(const Mamba2Config& c);  // for builtin models and fixtures

}  // namespace parity::io
