#pragma once
// The sparse MoE block of a hybrid layer and its router interception point, in seed 000's two integration
// patterns (model_options.h picks one):
//  Direct — router GEMM → routing → (expert ids, gates) → experts. The block takes the router logits as an
//    optional override argument; given one, no router GEMM runs.
//  Fused — the router yields dense affinities [T][E] (kernels/moe_dense.h) and the experts read those; an
//    override goes through the replicated routing → scatter pipeline.
// Routing is Granite's (top-k, then softmax over the k; kernels/moe.h) or DeepSeek-V3's sigmoid router with a
// correction bias (NemotronH; kernels/moe_sigmoid.h). Both patterns give every token the same bits, with or
// without an override: the same routing, the same expert GEMMs and one combine order (top-k order).
#include <string>
#include <vector>

#include "io/hybrid_spec.h"
#include "kernels/gemm.h"
#include "model/model_options.h"
#include "model/probe.h"

namespace parity::model {

struct MoeWeights {
  kernels::PackedWeight router;              // [E, H]
  std::vector<float> correction_bias;        // [E] (sigmoid router) or empty
  std::vector<kernels::PackedWeight> w_in;   // per expert: [2F, H] (SwiGLU, gate rows first) or [F, H] (ReLU²)
  std::vector<kernels::PackedWeight> w_out;  // per expert: [H, F]
};

// x [T][hidden] → out [T][hidden] (the routed experts only; a shared expert is the model's business).
// router_logits_override: [T][experts] or nullptr.
void moe_block(MoeRoutingPattern pattern, const MoeWeights& w, const io::MoeSpec& s, int hidden, const float* x,
               int T, const float* router_logits_override, float* out);

// A layer's MoE step with its router probe point s.router_probe. When the hooks want that point, a replacement
// is asked for first (ProbeHooks::fetch_replacement: rows by request and absolute position) and passed in as
// the override; without one the logits are computed, visited (a capture sees them, an in-place edit changes
// them) and passed in. Unprobed, the pattern's own path runs.
void moe_forward(MoeRoutingPattern pattern, const MoeWeights& w, const io::MoeSpec& s, int hidden, const float* x,
                 int T, ProbeHooks* hooks, const ProbeRows& meta, float* out);

}  // namespace parity::model
