#pragma once
// Load-time choices of code path. None of them changes a number a model computes: each option's
// paths are held to the same bits by tests, so a choice is about speed and about which
// integration pattern a debugging session exercises.
#include <string>

namespace parity::model {

// How a MoE block consumes its routing (seed 000's two integration patterns for router-logits
// replacement; model/hybrid_moe.h).
//  Direct — (expert ids, gates) lists; the block takes the router logits as an optional override
//    argument. The default: it skips the dense [T][E] scatter and its read-back.
//  Fused — dense expert affinities [T][E]; a replacement goes through the replicated pipeline.
enum class MoeRoutingPattern { Direct, Fused };
MoeRoutingPattern moe_routing_from_name(const std::string& s);  // "direct" | "fused"; else parity::Error
const char* moe_routing_name(MoeRoutingPattern p);

struct ModelOptions {
  MoeRoutingPattern moe_routing = MoeRoutingPattern::Direct;  // ignored by models without experts
};

}  // namespace parity::model
