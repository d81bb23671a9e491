// Fuzz target: config.json as Hugging Face writes it (bare Infinity/NaN, {"__float__": …}), then
// the architecture and the typed config of every supported model (the hybrid families' layer lists), and the derived sizes the model
// and cache are built from (UBSan reports an int overflow in any of them).
#include <string>

#include "common/error.h"
#include "fuzz_target.h"
#include "io/granite_config.h"
#include "io/hf_config.h"
#include "io/hybrid_spec.h"
#include "io/json_file.h"

namespace {

void fuzz_config(const uint8_t* data, std::size_t size) {
  using namespace parity::io;
  try {
    const nlohmann::json cfg = parse_hf_json(std::string(reinterpret_cast<const char*>(data), size), "config.json");
    if (architecture_of(cfg) == "Mamba2ForCausalLM") {
      const Mamba2Config c = parse_mamba2_config(cfg);
      (void)c.conv_dim();
      (void)c.in_proj_dim();
      (void)to_json(c).dump();
    } else if (architecture_of(cfg) != "GraniteMoeHybridForCausalLM") {
      // NemotronH, Bamba, FalconH1: the family adapter's layer list and the widths the model is built from.
      const HybridSpec s = hybrid_spec_from_config(cfg, [](const std::string&) { return false; });
      (void)s.mamba.conv_dim();
      (void)s.mamba.in_proj_dim();
    } else {
      const GraniteHybridConfig c = parse_granite_hybrid_config(cfg);
      (void)c.q_dim();
      (void)c.kv_dim();
      (void)c.mamba_intermediate_size();
      if (c.num_layers_of(GraniteLayerType::Mamba) > 0) {
        const Mamba2Config m = to_mamba2_config(c);
        (void)m.conv_dim();
        (void)m.in_proj_dim();
      }
    }
  } catch (const parity::Error&) {
  }
}

}  // namespace

PARITY_FUZZ_TARGET(config, fuzz_config)
