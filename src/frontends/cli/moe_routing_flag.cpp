#include "frontends/cli/moe_routing_flag.h"

namespace parity::cli {

void add_moe_routing_flag(CLI::App* sub, std::string& value) {
  value = "direct";
  sub->add_option("--moe-routing", value,
                  "MoE router pattern: direct (router logits as an override argument; default, faster) or fused "
                  "(dense expert affinities); bit-identical results")
      ->check(CLI::IsMember({"direct", "fused"}));
}

}  // namespace parity::cli
