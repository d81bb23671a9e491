#include "kernels/moe_dense.h"

#include <string>

#include "common/error.h"
#include "kernels/moe.h"

namespace parity::kernels {

DenseRouting dense_routing_from_logits(const float* logits, int T, int E, int k) {
  DenseRouting r;
  r.num_tokens = T;
  r.num_experts = E;
  r.top_k = k;
  std::vector<float> weights(std::size_t(T) * std::size_t(k > 0 ? k : 0));
  r.order.resize(weights.size());
  router_topk_softmax(logits, T, E, k, r.order.data(), weights.data());
  r.affinities.resize(std::size_t(T) * std::size_t(E));
  moe_dense_affinities(r.order.data(), weights.data(), T, E, k, r.affinities.data());
  return r;
}

DenseRouting dense_routing(const float* x, int T, int D, const PackedWeight& router, int k) {
  std::vector<float> logits(std::size_t(T) * std::size_t(router.n));
  gemm(x, T, D, router, nullptr, logits.data(), router.n);
  return dense_routing_from_logits(logits.data(), T, router.n, k);
}

DenseRouting dense_routing_from_lists(const int* idx, const float* weights, int T, int E, int k) {
  DenseRouting r;
  r.num_tokens = T;
  r.num_experts = E;
  r.top_k = k;
  r.order.assign(idx, idx + std::size_t(T) * std::size_t(k));
  r.affinities.resize(std::size_t(T) * std::size_t(E));
  moe_dense_affinities(idx, weights, T, E, k, r.affinities.data());
  return r;
}

void moe_experts_dense(const float* x, int D, int F, const DenseRouting& r, const PackedWeight* w_in,
                       const PackedWeight* w_out, float* out, ExpertAct act) {
  const int T = r.num_tokens, E = r.num_experts, k = r.top_k;
  if (T < 0 || E <= 0 || k <= 0 || k > E || r.affinities.size() != std::size_t(T) * E ||
      r.order.size() != std::size_t(T) * k)
    throw Error("moe_experts_dense: routing of " + std::to_string(T) + " tokens, top-" + std::to_string(k) + " of " +
                std::to_string(E) + " experts holds " + std::to_string(r.affinities.size()) + " affinities and " +
                std::to_string(r.order.size()) + " expert ids");
  std::vector<float> gates(r.order.size());
  for (int t = 0; t < T; ++t) {
    const int* ids = r.order.data() + std::size_t(t) * k;
    for (int j = 0; j < k; ++j) {
      if (ids[j] < 0 || ids[j] >= E)
        throw Error("moe_experts_dense: token " + std::to_string(t) + " names expert " + std::to_string(ids[j]) +
                    " of " + std::to_string(E));
      for (int i = 0; i < j; ++i)
        if (ids[i] == ids[j])
          throw Error("moe_experts_dense: token " + std::to_string(t) + " lists expert " + std::to_string(ids[j]) +
                      " twice");
      gates[std::size_t(t) * k + j] = r.affinities[std::size_t(t) * E + ids[j]];
    }
  }
  const MoeRouting route = moe_route(r.order.data(), T, E, k);
  moe_experts_act(act, x, D, F, route, gates.data(), w_in, w_out, out);
}

}  // namespace parity::kernels
