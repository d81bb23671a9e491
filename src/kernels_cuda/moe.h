#pragma once
// The CUDA twin of kernels/moe.h: Granite's sparse MoE block on device
// pointers. The contract is the CPU's: a token's output depends only on its own row, its router
// logits and the weights, never on which or how many other tokens share the batch or an expert.
//   - router logits: gemm (ops.h) on the router weight, or given from outside (an override);
//   - top-k + softmax: one thread per token, the CPU's insertion order (larger first, ties by
//     lower expert id, NaN first) and its exp_f / sum / divide sequence: the same bits;
//   - experts: tokens grouped by expert (experts in id order, tokens ascending, no atomics), the
//     batch-invariant gemm per expert (gemm_grouped: all experts in one launch, the group sizes
//     read on the device), SwiGLU element-wise, the second gemm;
//   - combine: out = +0, out = out + gate_j · y_j for j in the token's top-k order (moe.h).
// With fp32 weights every step is the CPU's operation sequence (the fp32 gemm is one fmaf chain
// over k from +0, kernels/gemm.h's contract), so the block equals the CPU bit for bit; with bf16
// weights the gemms run on tensor cores (DESIGN.md rule 5) and agree within rounding.
// This is the Direct pattern (ids + gates); the Fused one (dense affinities [T][E], kernels/
// moe_dense.h's twin) is kernels_cuda/moe_dense.h, over the same experts: the same bits per token.
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/ops.h"

namespace parity::cuda {

// Stacked expert weights on the device in HF layout: w_in [E][2F][D] (input_linear: gate rows
// first, then up), w_out [E][D][F] (output_linear).
struct MoeWeights {
  const void* w_in = nullptr;
  const void* w_out = nullptr;
  WeightType wt = WeightType::BF16;
  int experts = 0, hidden = 0, width = 0;  // E, D, F
};

// Scratch of one MoE call, grown on demand and reused across calls and layers.
struct MoeWorkspace {
  DeviceBuffer<int32_t> offsets;  // [E + 1] grouped rows of expert e: [offsets[e], offsets[e+1])
  DeviceBuffer<int32_t> token;    // [T·k] grouped row → token
  DeviceBuffer<int32_t> row;      // [T·k] (token, choice j) → grouped row
  DeviceBuffer<float> gates;      // [T·k] the Fused pattern's gates, read back from the dense affinities
  DeviceBuffer<float> xg, h, a, yg;
  // Room for T tokens (k choices each, E experts, hidden D, width F); moe_experts calls it, and a
  // CUDA graph's owner calls it ahead for its largest batch so a capture never allocates.
  void reserve(int T, int k, int E, int D, int F);
};

// logits [T][E] → idx [T][k], gates [T][k] (kernels::router_topk_softmax).
void router_topk_softmax(const float* logits, int T, int E, int k, int32_t* idx, float* gates, cudaStream_t s);

// gate_up [n][2F] → out [n][F]: silu_f(gate) · up (kernels::swiglu). out16 (not null): out's bf16 copy
// as well, rounded as the GEMM's pre-pass rounds it (for gemm_rounded, ops.h).
void swiglu(const float* gate_up, int n, int F, float* out, cudaStream_t s, uint16_t* out16 = nullptr);

// The experts for x [T][D] (row stride D) with the Direct routing (idx, gates [T][k]) → out
// [T][D]. Asynchronous: nothing comes back to the host.
void moe_experts(const MoeWeights& w, const float* x, int T, int k, const int32_t* idx, const float* gates,
                 MoeWorkspace& ws, float* out, cudaStream_t s);

}  // namespace parity::cuda
