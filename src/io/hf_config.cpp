#include "io/hf_config.h"

#include <cmath>
#include <limits>
#include <optional>

#include "common/error.h"
#include "io/config_fields.h"
#include "io/json_file.h"

namespace parity::io {

using namespace cfg;

namespace {

constexpr const char* kMamba2 = "Mamba2ForCausalLM";
constexpr const char* kGraniteHybrid = "GraniteMoeHybridForCausalLM";
constexpr const char* kSupported =
    "Mamba2ForCausalLM, GraniteMoeHybridForCausalLM, NemotronHForCausalLM, BambaForCausalLM, FalconH1ForCausalLM";

void require_positive(const char* key, int v) {
  if (v <= 0)
    throw Error(std::string("config.json: ") + key + " must be positive, got " + std::to_string(v));
}

nlohmann::json float_json(double v) {
  if (std::isnan(v)) return {{"__float__", "NaN"}};
  if (std::isinf(v)) return {{"__float__", v > 0 ? "Infinity" : "-Infinity"}};
  return v;
}

}  // namespace

std::string architecture_of(const nlohmann::json& cfg) {
  if (!cfg.is_object()) throw Error("config.json: not a JSON object");
  std::string arch;
  if (const nlohmann::json* a = lookup(cfg, "architectures")) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string())
      throw Error("config.json: architectures must be a non-empty list of strings, got " +
                  a->dump());
    arch = (*a)[0].get<std::string>();
  } else if (const nlohmann::json* mt = lookup(cfg, "model_type")) {
    if (!mt->is_string()) throw Error("config.json: model_type must be a string, got " + mt->dump());
    arch = mt->get<std::string>();
    if (arch == "mamba2") arch = kMamba2;
    if (arch == "granitemoehybrid") arch = kGraniteHybrid;
    if (arch == "nemotron_h") arch = "NemotronHForCausalLM";
    if (arch == "bamba") arch = "BambaForCausalLM";
    if (arch == "falcon_h1") arch = "FalconH1ForCausalLM";
  } else {
    throw Error(std::string("config.json: neither architectures nor model_type is given (supported: ") +
                kSupported + ")");
  }
  if (arch != kMamba2 && arch != kGraniteHybrid && arch != "NemotronHForCausalLM" && arch != "BambaForCausalLM" &&
      arch != "FalconH1ForCausalLM")
    throw Error("unknown architecture '" + arch + "' (supported: " + kSupported + ")");
  return arch;
}

// Keys absent from config.json take the defaults of transformers' Mamba2Config, since those are
// what Hugging Face runs for the same file (n_groups 8, tie_word_embeddings false). The sizes
// that define the model have no sensible default and are required.
Mamba2Config parse_mamba2_config(const nlohmann::json& cfg) {
  if (!cfg.is_object()) throw Error("config.json: not a JSON object");
  Mamba2Config c;
  c.vocab_size = req_int(cfg, "vocab_size");
  c.hidden_size = req_int(cfg, "hidden_size");
  c.num_hidden_layers = req_int(cfg, "num_hidden_layers");
  c.num_heads = req_int(cfg, "num_heads");
  c.head_dim = req_int(cfg, "head_dim");
  c.state_size = req_int(cfg, "state_size");
  c.n_groups = int_or(cfg, "n_groups", 8);
  c.expand = int_or(cfg, "expand", 2);
  c.conv_kernel = int_or(cfg, "conv_kernel", 4);
  c.chunk_size = int_or(cfg, "chunk_size", 256);
  c.use_bias = bool_or(cfg, "use_bias", false);
  c.use_conv_bias = bool_or(cfg, "use_conv_bias", true);
  c.rms_norm = bool_or(cfg, "rms_norm", true);
  c.norm_before_gate = bool_or(cfg, "norm_before_gate", false);
  c.residual_in_fp32 = bool_or(cfg, "residual_in_fp32", true);
  c.tie_word_embeddings = bool_or(cfg, "tie_word_embeddings", false);

  for (auto [key, v] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                        {"num_hidden_layers", c.num_hidden_layers}, {"num_heads", c.num_heads},
                        {"head_dim", c.head_dim}, {"state_size", c.state_size},
                        {"n_groups", c.n_groups}, {"expand", c.expand},
                        {"chunk_size", c.chunk_size}})
    require_positive(key, v);

  const long long derived = static_cast<long long>(c.expand) * c.hidden_size;
  if (derived > std::numeric_limits<int>::max())
    throw Error("config.json: expand * hidden_size is too large");
  // transformers derives intermediate_size from expand * hidden_size and never reads the key;
  // a file whose explicit value disagrees would run differently there and here.
  if (auto is = opt_int(cfg, "intermediate_size")) {
    require_positive("intermediate_size", *is);
    if (*is != derived)
      throw Error("config.json: intermediate_size = " + std::to_string(*is) +
                  " disagrees with expand * hidden_size = " + std::to_string(derived));
    c.intermediate_size = *is;
  } else {
    c.intermediate_size = static_cast<int>(derived);
  }
  if (static_cast<long long>(c.num_heads) * c.head_dim != c.intermediate_size)
    throw Error("config.json: num_heads * head_dim = " +
                std::to_string(static_cast<long long>(c.num_heads) * c.head_dim) +
                " must equal intermediate_size = " + std::to_string(c.intermediate_size));
  if (c.num_heads % c.n_groups != 0)
    throw Error("config.json: num_heads = " + std::to_string(c.num_heads) +
                " is not a multiple of n_groups = " + std::to_string(c.n_groups));
  if ((c.chunk_size & (c.chunk_size - 1)) != 0)
    throw Error("config.json: chunk_size = " + std::to_string(c.chunk_size) +
                " is not a power of two");
  require_mamba2_widths_fit(c, {"n_groups", "state_size", "num_heads"});
  if (c.conv_kernel < 1 || c.conv_kernel > 8)
    throw Error("config.json: conv_kernel = " + std::to_string(c.conv_kernel) +
                " is outside the supported range 1..8");
  if (!c.rms_norm)
    throw Error("config.json: rms_norm = false is not supported (only the gated RMSNorm is implemented)");

  if (const nlohmann::json* v = lookup(cfg, "layer_norm_epsilon"))
    c.layer_norm_epsilon = as_float(*v, "config.json: layer_norm_epsilon");
  else
    c.layer_norm_epsilon = 1e-5;
  if (!(c.layer_norm_epsilon > 0.0) || !std::isfinite(c.layer_norm_epsilon))
    throw Error("config.json: layer_norm_epsilon must be a positive finite number");

  if (const nlohmann::json* v = lookup(cfg, "hidden_act")) {
    if (!v->is_string())
      throw Error("config.json: hidden_act must be a string, got " + v->dump());
    c.hidden_act = v->get<std::string>();
  } else {
    c.hidden_act = "silu";
  }
  if (c.hidden_act != "silu" && c.hidden_act != "swish")
    throw Error("config.json: hidden_act = '" + c.hidden_act +
                "' is not supported (supported: silu, swish)");

  c.time_step_min_limit = 0.0;
  c.time_step_max_limit = std::numeric_limits<double>::infinity();
  if (const nlohmann::json* v = lookup(cfg, "time_step_limit")) {
    if (!v->is_array() || v->size() != 2)
      throw Error("config.json: time_step_limit must be a list [min, max], got " + v->dump());
    c.time_step_min_limit = as_float((*v)[0], "config.json: time_step_limit[0]");
    c.time_step_max_limit = as_float((*v)[1], "config.json: time_step_limit[1]");
    if (std::isnan(c.time_step_min_limit) || std::isnan(c.time_step_max_limit))
      throw Error("config.json: time_step_limit must not contain NaN");
    if (c.time_step_min_limit > c.time_step_max_limit)
      throw Error("config.json: time_step_limit min " + std::to_string(c.time_step_min_limit) +
                  " is greater than max " + std::to_string(c.time_step_max_limit));
  }
  return c;
}

void require_mamba2_widths_fit(const Mamba2Config& c, const char* const (&names)[3]) {
  // Found by fuzz_config: state_size 2e9 made conv_dim() overflow (undefined behaviour) downstream.
  const long long in_proj = 2LL * c.intermediate_size + 2LL * c.n_groups * c.state_size + c.num_heads;
  if (in_proj > std::numeric_limits<int>::max())
    throw Error(std::string("config.json: ") + names[0] + " = " + std::to_string(c.n_groups) + " and " + names[1] +
                " = " + std::to_string(c.state_size) + " are too large: the in_proj width 2 * intermediate + 2 * " +
                names[0] + " * " + names[1] + " + " + names[2] + " = " + std::to_string(in_proj) +
                " does not fit in 32 bits");
}

nlohmann::json to_json(const Mamba2Config& c) {
  nlohmann::json j = nlohmann::json::object();
  j["architectures"] = {kMamba2};
  j["model_type"] = "mamba2";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_heads"] = c.num_heads;
  j["head_dim"] = c.head_dim;
  j["state_size"] = c.state_size;
  j["n_groups"] = c.n_groups;
  j["expand"] = c.expand;
  j["intermediate_size"] = c.intermediate_size;
  j["conv_kernel"] = c.conv_kernel;
  j["chunk_size"] = c.chunk_size;
  j["use_bias"] = c.use_bias;
  j["use_conv_bias"] = c.use_conv_bias;
  j["layer_norm_epsilon"] = c.layer_norm_epsilon;
  j["rms_norm"] = c.rms_norm;
  j["norm_before_gate"] = c.norm_before_gate;
  j["residual_in_fp32"] = c.residual_in_fp32;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["time_step_limit"] = {float_json(c.time_step_min_limit), float_json(c.time_step_max_limit)};
  j["hidden_act"] = c.hidden_act;
  return j;
}

}  // namespace parity::io
