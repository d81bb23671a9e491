// The Fused pattern's kernels (see kernels_cuda/moe_dense.h).
#include "kernels_cuda/moe_dense.h"

#include "kernels/math.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/moe_device.cuh"

namespace parity::cuda {
namespace {

// One thread per token: zero the dense row, select the top-k, then the softmax over the k values
// written at their columns (the row holds e_j while s is summed, then e_j / s): the operations of
// topk_kernel (moe.cu) and the CPU, so the same bits.
__global__ void dense_routing_kernel(const float* logits, int T, int E, int k, int32_t* order, float* dense) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const float* lg = logits + static_cast<std::size_t>(t) * E;
  int32_t* id = order + static_cast<std::size_t>(t) * k;
  float* row = dense + static_cast<std::size_t>(t) * E;
  for (int e = 0; e < E; ++e) row[e] = 0.0f;
  topk_insert(lg, E, k, id);
  const float m = lg[id[0]];
  float s = 0.0f;
  for (int j = 0; j < k; ++j) {
    const float w = kernels::exp_f(lg[id[j]] - m);
    row[id[j]] = w;
    s = s + w;
  }
  for (int j = 0; j < k; ++j) row[id[j]] = row[id[j]] / s;  // the ids are distinct: each divided once
}

// One thread per (token, expert): the gate of the last choice naming the expert, else +0 (the CPU
// fills with zeros and scatters the choices in order).
__global__ void dense_kernel(const int32_t* idx, const float* gates, int T, int E, int k, float* dense) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<std::size_t>(T) * E) return;
  const std::size_t t = i / E;
  const int e = static_cast<int>(i % E);
  float v = 0.0f;
  for (int j = 0; j < k; ++j)
    if (idx[t * k + j] == e) v = gates[t * k + j];
  dense[i] = v;
}

__global__ void gates_from_dense_kernel(const float* dense, const int32_t* idx, int n, int E, int k, float* gates) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) gates[i] = dense[static_cast<std::size_t>(i / k) * E + idx[i]];
}

}  // namespace

void dense_routing(const float* logits, int T, int E, int k, int32_t* order, float* dense, cudaStream_t s) {
  check_moe_routing(T, E, k, "cuda dense_routing");
  if (T == 0) return;
  dense_routing_kernel<<<moe_blocks(T, 128), 128, 0, s>>>(logits, T, E, k, order, dense);
  check_launch("dense_routing");
}

void moe_dense_affinities(const int32_t* idx, const float* gates, int T, int E, int k, float* dense, cudaStream_t s) {
  check_moe_routing(T, E, k, "cuda moe_dense_affinities");
  if (T == 0) return;
  dense_kernel<<<moe_blocks(std::size_t(T) * E, 256), 256, 0, s>>>(idx, gates, T, E, k, dense);
  check_launch("moe_dense_affinities");
}

void moe_experts_dense(const MoeWeights& w, const float* x, int T, int k, const float* dense, const int32_t* order,
                       MoeWorkspace& ws, float* out, cudaStream_t s) {
  check_moe_routing(T, w.experts, k, "cuda moe_experts_dense");
  if (T == 0) return;
  const std::size_t n = static_cast<std::size_t>(T) * k;
  ws.reserve(T, k, w.experts, w.hidden, w.width);  // before the gates are written: no move afterwards
  gates_from_dense_kernel<<<moe_blocks(n, 256), 256, 0, s>>>(dense, order, static_cast<int>(n), w.experts, k,
                                                             ws.gates.data());
  check_launch("moe gates_from_dense");
  moe_experts(w, x, T, k, order, ws.gates.data(), ws, out, s);
}

}  // namespace parity::cuda
