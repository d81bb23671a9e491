#include "model/granite_moe.h"

#include <vector>

#include "kernels/gemm.h"
#include "kernels/moe.h"
#include "kernels/moe_dense.h"

namespace parity::model {

void granite_moe_block(MoeRoutingPattern pattern, const GraniteMoeWeights& w, const MoeBlockShape& s,
                       const float* x, int T, const float* router_logits_override, float* out) {
  const int H = s.hidden, E = s.experts, K = s.top_k, F = s.width;
  if (pattern == MoeRoutingPattern::Fused) {
    const kernels::DenseRouting d = router_logits_override
                                        ? kernels::dense_routing_from_logits(router_logits_override, T, E, K)
                                        : kernels::dense_routing(x, T, H, w.router, K);
    kernels::moe_experts_dense(x, H, F, d, w.w_in.data(), w.w_out.data(), out);
    return;
  }
  std::vector<float> computed;
  const float* logits = router_logits_override;
  if (!logits) {
    computed.resize(std::size_t(T) * E);
    kernels::gemm(x, T, H, w.router, nullptr, computed.data(), E);
    logits = computed.data();
  }
  std::vector<float> gates(std::size_t(T) * K);
  std::vector<int> idx(std::size_t(T) * K);
  kernels::router_topk_softmax(logits, T, E, K, idx.data(), gates.data());
  const kernels::MoeRouting r = kernels::moe_route(idx.data(), T, E, K);
  kernels::moe_experts(x, H, F, r, gates.data(), w.w_in.data(), w.w_out.data(), out);
}

void granite_moe_forward(MoeRoutingPattern pattern, const GraniteMoeWeights& w, const MoeBlockShape& s,
                         const float* x, int T, const std::string& router_name, ProbeHooks* hooks,
                         const ProbeRows& meta, float* out) {
  if (!hooks || !hooks->wants(router_name)) {
    granite_moe_block(pattern, w, s, x, T, nullptr, out);
    return;
  }
  // Probed, the fused router runs unfused (GEMM, then the replicated pipeline inside the block):
  // the same kernels in the same order, so a capture costs no bit.
  std::vector<float> logits(std::size_t(T) * s.experts);
  if (!hooks->fetch_replacement(router_name, logits.data(), T, s.experts, meta)) {
    kernels::gemm(x, T, s.hidden, w.router, nullptr, logits.data(), s.experts);
    hooks->visit(router_name, logits.data(), T, s.experts, meta);
  }
  granite_moe_block(pattern, w, s, x, T, logits.data(), out);
}

}  // namespace parity::model
