#include "frontends/cli/moe_routing_flag.h"

namespace parity::cli {

void add_moe_routing_flag(CLI::App* sub, std::string& value) {
  value = "direct";
  sub->add_option("--moe-routing", value,
                  "MoE router pattern: direct (router logits as an override argument; default, faster) or fused "
                  "(dense expert affinities); bit-identical results")
      ->check(CLI::IsMember({"direct", "fused"}));
}

model::ModelOptions model_options(const std::string& moe_routing) {
  model::ModelOptions o;
  o.moe_routing = model::moe_routing_from_name(moe_routing);
  return o;
}

}  // namespace parity::cli
