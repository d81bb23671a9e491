#include "kernels/moe_sigmoid.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/math.h"

namespace parity::kernels {
namespace {

// moe.h's top-k order: a strict total order, so the chosen set never depends on the selection algorithm.
bool before(float a, int ia, float b, int ib) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na || nb) return na && nb ? ia < ib : na;
  if (a != b) return a > b;
  return ia < ib;
}

}  // namespace

void router_sigmoid_topk(const float* logits, int T, int E, int k, const float* bias, bool norm_topk_prob,
                         float routed_scaling_factor, int* idx, float* weights) {
  if (T < 0 || E <= 0 || k <= 0 || k > E)
    throw Error("router_sigmoid_topk: top-k " + std::to_string(k) + " of " + std::to_string(E) +
                " experts is not possible");
  std::vector<float> s(static_cast<std::size_t>(E)), choice(static_cast<std::size_t>(E));
  for (int t = 0; t < T; ++t) {
    const float* lg = logits + int64_t(t) * E;
    int* id = idx + int64_t(t) * k;
    float* w = weights + int64_t(t) * k;
    for (int e = 0; e < E; ++e) {
      s[e] = sigmoid_f(lg[e]);
      choice[e] = bias ? s[e] + bias[e] : s[e];
    }
    int len = 0;  // insertion into a sorted list of at most k entries
    for (int e = 0; e < E; ++e) {
      if (len == k && !before(choice[e], e, choice[id[k - 1]], id[k - 1])) continue;
      int pos = len < k ? len++ : k - 1;
      while (pos > 0 && before(choice[e], e, choice[id[pos - 1]], id[pos - 1])) {
        id[pos] = id[pos - 1];
        --pos;
      }
      id[pos] = e;
    }
    for (int j = 0; j < k; ++j) w[j] = s[id[j]];
    if (norm_topk_prob) {
      float d = 0.0f;
      for (int j = 0; j < k; ++j) d = d + w[j];
      d = d + 1e-20f;
      for (int j = 0; j < k; ++j) w[j] = w[j] / d;
    }
    for (int j = 0; j < k; ++j) w[j] = w[j] * routed_scaling_factor;
  }
}

}  // namespace parity::kernels
