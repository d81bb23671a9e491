#pragma once
// Seed 000's "fused downstream" MoE form: the router step yields dense expert affinities [T][E]
// (top-k → softmax over the k → scatter) and the experts consume those, instead of the
// (idx, weights) lists of moe.h. A router-logits replacement enters through the same pipeline
// (dense_routing_from_logits), which is the seed's "replicate the post-logits pipeline at the
// injection point".
//
// Numerics: the same per-token contract as moe.h. A token's gates are the softmax values of its
// top-k list, scattered and read back unchanged, and its k expert rows are summed in top-k order
// (moe.h's combine), so this path and the (idx, weights) path give every token the same bits.
// The top-k order is kept next to the dense matrix because the combine needs it: an
// ascending-expert scan of a dense row (HF's index_add order) adds the same products, which for
// k ≤ 2 is a sum of two terms onto +0 and commutes exactly, but for k > 2 rounds differently.
#include <vector>

#include "kernels/gemm.h"
#include "kernels/moe.h"

namespace parity::kernels {

struct DenseRouting {
  int num_tokens = 0, num_experts = 0, top_k = 0;
  std::vector<float> affinities;  // [T][E]: the gate at each selected expert, +0 elsewhere
  std::vector<int> order;         // [T][k]: the selected experts in top-k order
};

// Router logits [T][E] → dense routing, through router_topk_softmax and moe_dense_affinities.
DenseRouting dense_routing_from_logits(const float* logits, int T, int E, int k);

// The fused router: x [T][D] times the router weight ([E][D], packed) straight to dense routing;
// the logits stay inside the call. Bitwise dense_routing_from_logits(gemm(x, router)).
DenseRouting dense_routing(const float* x, int T, int D, const PackedWeight& router, int k);

// The experts for x [T][D] weighted by the dense affinities, combined in each token's top-k order
// (moe_experts underneath). Throws parity::Error on a malformed routing: sizes that disagree, an
// expert id out of range, or one expert twice in a token's list.
void moe_experts_dense(const float* x, int D, int F, const DenseRouting& r, const PackedWeight* w_in,
                       const PackedWeight* w_out, float* out, ExpertAct act = ExpertAct::SwiGLU);

// Dense routing from (idx, weights) lists any router produced (e.g. router_sigmoid_topk): the scatter of
// moe_dense_affinities plus the top-k order.
DenseRouting dense_routing_from_lists(const int* idx, const float* weights, int T, int E, int k);

}  // namespace parity::kernels
