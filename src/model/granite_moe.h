#pragma once
// The sparse MoE block of a Granite layer (block_sparse_moe) and its router interception point, in
// seed 000's two integration patterns (model_options.h picks one):
//  Direct — router GEMM → top-k + softmax → (expert ids, gates) → experts. The block takes the
//    router logits as an optional override argument; given one, no router GEMM runs.
//  Fused — the router yields dense affinities [T][E] (kernels/moe_dense.h) and the experts read
//    those; an override goes through the replicated top-k → softmax → scatter pipeline.
// Both give every token the same bits, with or without an override: the same top-k, the same
// softmax, the same expert GEMMs and one combine order (top-k order, kernels/moe.h).
#include <string>

#include "model/granite_hybrid_weights.h"
#include "model/model_options.h"
#include "model/probe.h"

namespace parity::model {

struct MoeBlockShape {
  int hidden = 0, experts = 0, top_k = 0, width = 0;  // H, E, k, F (intermediate_size)
};

// x [T][hidden] → out [T][hidden]. router_logits_override: [T][experts] or nullptr.
void granite_moe_block(MoeRoutingPattern pattern, const GraniteMoeWeights& w, const MoeBlockShape& s,
                       const float* x, int T, const float* router_logits_override, float* out);

// A layer's MoE step with its router probe point `router_name`. When the hooks want that point, a
// replacement is asked for first (ProbeHooks::fetch_replacement: rows by request and absolute
// position) and passed in as the override; without one the logits are computed, visited (a
// capture sees them, an in-place edit changes them) and passed in. Unprobed, the pattern's own
// path runs (GEMM and lists, or the fused dense router).
void granite_moe_forward(MoeRoutingPattern pattern, const GraniteMoeWeights& w, const MoeBlockShape& s,
                         const float* x, int T, const std::string& router_name, ProbeHooks* hooks,
                         const ProbeRows& meta, float* out);

}  // namespace parity::model
