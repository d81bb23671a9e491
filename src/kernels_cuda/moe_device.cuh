#pragma once
// The router's per-token top-k on the device, shared by the Direct pattern's kernel (moe.cu: ids +
// gates) and the Fused one's (moe_dense.cu: ids + dense affinities), so both select exactly the
// CPU's experts in the CPU's order (kernels/moe.h: larger logit first, ties by lower expert id,
// NaN first).
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"

namespace parity::cuda {

// kernels/moe.cpp's strict order of two (logit, expert) candidates.
__device__ inline bool ranks_before(float la, int a, float lb, int b) {
  const bool na = isnan(la), nb = isnan(lb);
  if (na || nb) return na && nb ? a < b : na;
  if (la != lb) return la > lb;
  return a < b;
}

// lg [E] → id [k]: the CPU's insertion into a list kept sorted (one thread, one token).
__device__ inline void topk_insert(const float* lg, int E, int k, int32_t* id) {
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
}

// Host side: blocks of `threads` covering n items, and the shape check every MoE entry point makes.
inline unsigned moe_blocks(std::size_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

inline void check_moe_routing(int T, int E, int k, const char* what) {
  if (T < 0 || E <= 0 || k <= 0 || k > E)
    throw Error(std::string(what) + ": top-" + std::to_string(k) + " of " + std::to_string(E) + " experts");
}

}  // namespace parity::cuda
