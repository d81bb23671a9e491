// Granite MoE kernels; the orders are defined in moe.h.
#include "kernels/moe.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/aligned.h"
#include "common/error.h"
#include "kernels/isa.h"
#include "kernels/math.h"
#include "kernels/moe_internal.h"

namespace parity::kernels {

namespace {

// True when expert a (logit la) comes before expert b (logit lb) in a top-k list. A strict total
// order, so the selected set and its order never depend on the selection algorithm.
bool ranks_before(float la, int a, float lb, int b) {
  const bool na = std::isnan(la), nb = std::isnan(lb);
  if (na || nb) return na && nb ? a < b : na;
  if (la != lb) return la > lb;
  return a < b;
}

void check_routing_shape(int T, int E, int k, const char* what) {
  if (T < 0 || E <= 0 || k <= 0 || k > E) {
    throw Error(std::string(what) + ": top-k " + std::to_string(k) + " of " + std::to_string(E) +
                " experts is not possible");
  }
}

void swiglu_row_portable(const float* g, const float* u, int F, float* out) {
  for (int i = 0; i < F; ++i) out[i] = silu_f(g[i]) * u[i];
}

}  // namespace

void router_topk_softmax(const float* logits, int T, int E, int k, int* idx, float* weights) {
  check_routing_shape(T, E, k, "router_topk_softmax");
  for (int t = 0; t < T; ++t) {
    const float* lg = logits + int64_t(t) * E;
    int* id = idx + int64_t(t) * k;
    float* w = weights + int64_t(t) * k;
    // Insertion into a sorted list of at most k entries.
    int len = 0;
    for (int e = 0; e < E; ++e) {
      if (len == k && !ranks_before(lg[e], e, lg[id[k - 1]], id[k - 1])) continue;
      int pos = len < k ? len++ : k - 1;
      while (pos > 0 && ranks_before(lg[e], e, lg[id[pos - 1]], id[pos - 1])) {
        id[pos] = id[pos - 1];
        --pos;
      }
      id[pos] = e;
    }
    const float m = lg[id[0]];
    float s = 0.0f;
    for (int j = 0; j < k; ++j) {
      w[j] = exp_f(lg[id[j]] - m);
      s = s + w[j];
    }
    for (int j = 0; j < k; ++j) w[j] = w[j] / s;
  }
}

void moe_dense_affinities(const int* idx, const float* weights, int T, int E, int k, float* dense) {
  check_routing_shape(T, E, k, "moe_dense_affinities");
  std::fill(dense, dense + int64_t(T) * E, 0.0f);
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < k; ++j) dense[int64_t(t) * E + idx[int64_t(t) * k + j]] = weights[int64_t(t) * k + j];
  }
}

void swiglu_reference(const float* gate_up, int n, int F, float* out) {
  for (int i = 0; i < n; ++i) swiglu_row_portable(gate_up + int64_t(i) * 2 * F, gate_up + int64_t(i) * 2 * F + F, F,
                                                  out + int64_t(i) * F);
}

void swiglu(const float* gate_up, int n, int F, float* out) {
  if (n <= 0 || F <= 0) return;
  void (*row)(const float*, const float*, int, float*) = swiglu_row_portable;
  switch (active_isa()) {
    case Isa::Avx512: row = moe_detail::swiglu_row_avx512; break;
    case Isa::Avx2: row = moe_detail::swiglu_row_avx2; break;
    case Isa::Portable: break;
  }
  const int nt = num_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && n > 1 && (int64_t(n) * F >= (1 << 16) || force_parallel()))
  for (int i = 0; i < n; ++i) {
    const float* g = gate_up + int64_t(i) * 2 * F;
    row(g, g + F, F, out + int64_t(i) * F);
  }
}

MoeRouting moe_route(const int* idx, int T, int E, int k) {
  check_routing_shape(T, E, k, "moe_route");
  MoeRouting r;
  r.num_tokens = T;
  r.num_experts = E;
  r.top_k = k;
  r.offsets.assign(E + 1, 0);
  const int64_t n = int64_t(T) * k;
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= E) {
      throw Error("moe_route: expert id " + std::to_string(idx[i]) + " out of range [0, " + std::to_string(E) + ")");
    }
    ++r.offsets[idx[i] + 1];
  }
  for (int e = 0; e < E; ++e) r.offsets[e + 1] += r.offsets[e];
  std::vector<int64_t> next(r.offsets.begin(), r.offsets.end() - 1);
  r.token.resize(n);
  r.row.resize(n);
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < k; ++j) {
      const int64_t g = next[idx[int64_t(t) * k + j]]++;
      r.token[g] = t;
      r.row[int64_t(t) * k + j] = g;
    }
  }
  return r;
}

void moe_gather(const float* x, int D, const MoeRouting& r, float* xg) {
  const int64_t n = int64_t(r.num_tokens) * r.top_k;
  for (int64_t g = 0; g < n; ++g) std::copy(x + int64_t(r.token[g]) * D, x + int64_t(r.token[g] + 1) * D, xg + g * D);
}

void moe_combine(const float* yg, int D, const MoeRouting& r, const float* weights, float* out) {
  const int T = r.num_tokens, k = r.top_k;
  const int nt = num_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && T > 1 && (int64_t(T) * k * D >= (1 << 18) || force_parallel()))
  for (int t = 0; t < T; ++t) {
    float* o = out + int64_t(t) * D;
    std::fill(o, o + D, 0.0f);
    for (int j = 0; j < k; ++j) {
      const float w = weights[int64_t(t) * k + j];
      const float* y = yg + r.row[int64_t(t) * k + j] * D;
      for (int d = 0; d < D; ++d) o[d] = o[d] + w * y[d];
    }
  }
}

void relu_squared(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float r = x[i] < 0.0f ? 0.0f : x[i];
    out[i] = r * r;
  }
}

void moe_experts(const float* x, int D, int F, const MoeRouting& r, const float* weights, const PackedWeight* w_in,
                 const PackedWeight* w_out, float* out) {
  moe_experts_act(ExpertAct::SwiGLU, x, D, F, r, weights, w_in, w_out, out);
}

void moe_experts_act(ExpertAct act, const float* x, int D, int F, const MoeRouting& r, const float* weights,
                     const PackedWeight* w_in, const PackedWeight* w_out, float* out) {
  const int64_t n = int64_t(r.num_tokens) * r.top_k;
  if (r.num_tokens == 0) return;
  const int in_rows = act == ExpertAct::SwiGLU ? 2 * F : F;
  for (int e = 0; e < r.num_experts; ++e) {
    if (w_in[e].n != in_rows || w_in[e].k != D || w_out[e].n != D || w_out[e].k != F) {
      throw Error("moe_experts: expert " + std::to_string(e) + " weights are [" + std::to_string(w_in[e].n) + "x" +
                  std::to_string(w_in[e].k) + "] and [" + std::to_string(w_out[e].n) + "x" +
                  std::to_string(w_out[e].k) + "], expected [" + std::to_string(in_rows) + "x" + std::to_string(D) +
                  "] and [" + std::to_string(D) + "x" + std::to_string(F) + "]");
    }
  }
  AlignedBuffer<float> xg(n * D), h(n * in_rows), a(n * F), yg(n * D);
  moe_gather(x, D, r, xg.data());
  for (int e = 0; e < r.num_experts; ++e) {
    const int64_t r0 = r.offsets[e], rows = r.offsets[e + 1] - r0;
    if (rows == 0) continue;
    gemm(xg.data() + r0 * D, static_cast<int>(rows), D, w_in[e], nullptr, h.data() + r0 * in_rows, in_rows);
  }
  if (act == ExpertAct::SwiGLU) swiglu(h.data(), static_cast<int>(n), F, a.data());
  else relu_squared(h.data(), n * F, a.data());
  for (int e = 0; e < r.num_experts; ++e) {
    const int64_t r0 = r.offsets[e], rows = r.offsets[e + 1] - r0;
    if (rows == 0) continue;
    gemm(a.data() + r0 * F, static_cast<int>(rows), F, w_out[e], nullptr, yg.data() + r0 * D, D);
  }
  moe_combine(yg.data(), D, r, weights, out);
}

}  // namespace parity::kernels
