#include "model/hybrid_moe.h"

#include <vector>

#include "kernels/moe.h"
#include "kernels/moe_dense.h"
#include "kernels/moe_sigmoid.h"

namespace parity::model {
namespace {

kernels::ExpertAct act_of(const io::MoeSpec& s) {
  return s.act == io::Activation::SwiGLU ? kernels::ExpertAct::SwiGLU : kernels::ExpertAct::ReLU2;
}

// The sigmoid router's (ids, weights) from logits.
void sigmoid_route(const MoeWeights& w, const io::MoeSpec& s, const float* logits, int T, int* idx, float* gates) {
  kernels::router_sigmoid_topk(logits, T, s.experts, s.top_k, w.correction_bias.empty() ? nullptr : w.correction_bias.data(),
                               s.norm_topk_prob, static_cast<float>(s.routed_scaling_factor), idx, gates);
}

}  // namespace

void moe_block(MoeRoutingPattern pattern, const MoeWeights& w, const io::MoeSpec& s, int H, const float* x, int T,
               const float* router_logits_override, float* out) {
  const int E = s.experts, K = s.top_k, F = s.width;
  const bool softmax = s.router == io::RouterKind::SoftmaxTopK;
  if (pattern == MoeRoutingPattern::Fused) {
    kernels::DenseRouting d;
    if (softmax) {
      d = router_logits_override ? kernels::dense_routing_from_logits(router_logits_override, T, E, K)
                                 : kernels::dense_routing(x, T, H, w.router, K);
    } else {
      std::vector<float> computed;
      const float* logits = router_logits_override;
      if (!logits) {
        computed.resize(std::size_t(T) * E);
        kernels::gemm(x, T, H, w.router, nullptr, computed.data(), E);
        logits = computed.data();
      }
      std::vector<int> idx(std::size_t(T) * K);
      std::vector<float> gates(std::size_t(T) * K);
      sigmoid_route(w, s, logits, T, idx.data(), gates.data());
      d = kernels::dense_routing_from_lists(idx.data(), gates.data(), T, E, K);
    }
    kernels::moe_experts_dense(x, H, F, d, w.w_in.data(), w.w_out.data(), out, act_of(s));
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
  if (softmax) kernels::router_topk_softmax(logits, T, E, K, idx.data(), gates.data());
  else sigmoid_route(w, s, logits, T, idx.data(), gates.data());
  const kernels::MoeRouting r = kernels::moe_route(idx.data(), T, E, K);
  kernels::moe_experts_act(act_of(s), x, H, F, r, gates.data(), w.w_in.data(), w.w_out.data(), out);
}

void moe_forward(MoeRoutingPattern pattern, const MoeWeights& w, const io::MoeSpec& s, int H, const float* x, int T,
                 ProbeHooks* hooks, const ProbeRows& meta, float* out) {
  if (!hooks || !hooks->wants(s.router_probe)) {
    moe_block(pattern, w, s, H, x, T, nullptr, out);
    return;
  }
  // Probed, the fused router runs unfused (GEMM, then the replicated pipeline inside the block): the same
  // kernels in the same order, so a capture costs no bit.
  std::vector<float> logits(std::size_t(T) * s.experts);
  if (!hooks->fetch_replacement(s.router_probe, logits.data(), T, s.experts, meta)) {
    kernels::gemm(x, T, H, w.router, nullptr, logits.data(), s.experts);
    hooks->visit(s.router_probe, logits.data(), T, s.experts, meta);
  }
  moe_block(pattern, w, s, H, x, T, logits.data(), out);
}

}  // namespace parity::model
