#include "model/model_options.h"

#include "common/error.h"

namespace parity::model {

MoeRoutingPattern moe_routing_from_name(const std::string& s) {
  if (s == "direct") return MoeRoutingPattern::Direct;
  if (s == "fused") return MoeRoutingPattern::Fused;
  throw Error("MoE routing must be direct or fused, not '" + s + "'");
}

const char* moe_routing_name(MoeRoutingPattern p) { return p == MoeRoutingPattern::Fused ? "fused" : "direct"; }

}  // namespace parity::model
