#pragma once
// Granite MoE pieces (GraniteMoe / GraniteMoeHybrid block_sparse_moe): router top-k + softmax,
// grouping tokens by expert, the SwiGLU activation and the weighted combine.
//
// Contract: a token's MoE output depends only on its own hidden row, its router logits and the
// expert weights, never on which or how many other tokens share the batch or an expert:
//   - routing is per token (top-k, softmax over the k values);
//   - an expert's two GEMMs run on the gathered rows of its tokens with kernels::gemm, whose
//     per-row bits do not depend on the row count (gemm.h);
//   - SwiGLU is element-wise;
//   - the combine sums a token's k expert rows in the order of its top-k list:
//       out[d] = +0.0f; for j = 0..k-1: out[d] = out[d] + w[j] · y_j[d]   (product rounded, no FMA)
//     (HF adds in ascending expert id through index_add; for k ≤ 2 that gives the same bits, as
//     the additions then commute exactly.)
#include <cstdint>
#include <vector>

#include "kernels/gemm.h"

namespace parity::kernels {

// logits [T][E] (raw router output, fp32) → idx [T][k], weights [T][k].
// Top-k order: larger logit first; equal logits (including +0 vs −0) → lower expert id first;
// NaN counts as larger than every number (as torch.topk does), NaNs among themselves by id.
// Then, as Granite does (softmax AFTER top-k, over the k selected values only):
//   m = the first selected value; e_j = exp_f(v_j − m); s = +0.0f, s = s + e_j for j in order;
//   weights[j] = e_j / s.
// HF casts the gates to the activation dtype afterwards (bf16 for a bf16 model); here they stay
// fp32, the dtype of this engine's activations.
void router_topk_softmax(const float* logits, int T, int E, int k, int* idx, float* weights);

// Seed 000's "fused downstream" pattern: dense [T][E] affinities, zero except weights[t][j] at
// column idx[t][j] (what torch.zeros(T, E).scatter_(1, idx, weights) gives).
void moe_dense_affinities(const int* idx, const float* weights, int T, int E, int k, float* dense);

// gate_up [n][2F] → out [n][F]: out[i] = silu_f(gate_up[i]) · gate_up[F + i].
// HF GraniteMoeHybridMoE.forward: input_linear's output is chunk(2, dim=-1)-ed and
// activation(chunk[0]) * chunk[1], so the FIRST half is the gate that goes through SiLU and the
// second half is the "up" projection (the shared MLP uses the same split). silu_f is
// x / (1 + exp_f(−x)); the vector paths evaluate the same sequence (vmath_avx512.h / vmath_avx2.h).
void swiglu(const float* gate_up, int n, int F, float* out);
void swiglu_reference(const float* gate_up, int n, int F, float* out);

// Tokens grouped by expert (a counting sort: experts in id order, tokens in ascending order
// inside an expert). Grouped row r belongs to token token[r]; choice j of token t sits at grouped
// row row[t·k + j]; expert e owns grouped rows [offsets[e], offsets[e + 1]).
struct MoeRouting {
  int num_tokens = 0, num_experts = 0, top_k = 0;
  std::vector<int64_t> offsets;
  std::vector<int> token;
  std::vector<int64_t> row;
};
MoeRouting moe_route(const int* idx, int T, int E, int k);

// xg [T·k][D]: xg[r] = x[token[r]].
void moe_gather(const float* x, int D, const MoeRouting& r, float* xg);

// yg [T·k][D] (expert outputs in grouped order), weights [T][k] → out [T][D], order above.
void moe_combine(const float* yg, int D, const MoeRouting& r, const float* weights, float* out);

// The experts' activation: SwiGLU (Granite: w_in [2F][D], gate rows first) or ReLU² (NemotronH: w_in [F][D],
// out = r · r with r = x below 0 ? 0 : x, NaN kept; HF's relu then square; element-wise).
enum class ExpertAct { SwiGLU, ReLU2 };
void relu_squared(const float* x, int64_t n, float* out);

// The whole sparse block for x [T][D]: gather, per expert gemm(w_in[e]) → [rows][2F], swiglu,
// gemm(w_out[e]) → [rows][D], combine. w_in[e] is input_linear.weight[e] ([2F][D], HF layout),
// w_out[e] is output_linear.weight[e] ([D][F]); both packed with pack_weight.
void moe_experts(const float* x, int D, int F, const MoeRouting& r, const float* weights,
                 const PackedWeight* w_in, const PackedWeight* w_out, float* out);
// The same with the activation chosen (ReLU2: w_in[e] is [F][D], gemm → [rows][F], relu_squared).
void moe_experts_act(ExpertAct act, const float* x, int D, int F, const MoeRouting& r, const float* weights,
                     const PackedWeight* w_in, const PackedWeight* w_out, float* out);

}  // namespace parity::kernels
