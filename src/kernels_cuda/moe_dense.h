#pragma once
// The Fused router-override pattern on the GPU (model/hybrid_moe.h; the CUDA twin of
// kernels/moe_dense.h): the router step yields dense expert affinities [T][E] and the experts read
// their gates from them. A router-logits replacement enters through the same routing kernel, which
// is seed 000's "replicate the post-logits pipeline at the injection point".
//
// Numerics: per token, as the Direct pattern (moe.h). dense_routing runs one thread per token: the
// CPU's top-k (moe_device.cuh), its exp_f / sum / divide sequence, the gates stored straight into
// the token's dense row (+0 elsewhere); moe_experts_dense reads them back unchanged at the top-k
// ids and runs moe_experts, whose combine sums in top-k order. So a token's expert outputs and
// their combine depend only on its own row, and both patterns give every token the same bits
// (kernels/moe_dense.h explains why the top-k order is kept beside the dense matrix).
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels_cuda/moe.h"

namespace parity::cuda {

// logits [T][E] → order [T][k] (the selected experts, top-k order) and dense [T][E]: the softmax
// over the k at their columns, +0 elsewhere. Bitwise kernels::dense_routing_from_logits.
void dense_routing(const float* logits, int T, int E, int k, int32_t* order, float* dense, cudaStream_t s);

// dense [T][E] = +0 except gates[t][j] at column idx[t][j] (kernels::moe_dense_affinities), for
// (ids, gates) lists any router produced.
void moe_dense_affinities(const int32_t* idx, const float* gates, int T, int E, int k, float* dense, cudaStream_t s);

// The experts for x [T][D] with gates read from dense [T][E] at order [T][k] (into ws.gates), then
// moe_experts: out [T][D]. Asynchronous.
void moe_experts_dense(const MoeWeights& w, const float* x, int T, int k, const float* dense, const int32_t* order,
                       MoeWorkspace& ws, float* out, cudaStream_t s);

}  // namespace parity::cuda
