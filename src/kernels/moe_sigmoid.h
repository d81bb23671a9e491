#pragma once
// The sigmoid top-k router of DeepSeek-V3, which NemotronH's MoE layers (Nemotron 3) use:
//   s_e      = sigmoid_f(logit_e)                          (fp32, math.h)
//   choice_e = s_e + bias_e                                 (e_score_correction_bias; bias null: + 0 skipped)
//   top-k of choice in moe.h's total order (larger first, equal → lower id, NaN largest)
//   w_j      = s_{idx_j}; when norm_topk_prob: d = (+0 + w_0 + … + w_{k-1}) + 1e-20f, w_j = w_j / d
//   w_j      = w_j · routed_scaling_factor
// Grouped routing (n_group > 1) is not implemented; the config adapter refuses it. Per token only, so a
// token's experts and weights never depend on the rest of the batch.
namespace parity::kernels {

void router_sigmoid_topk(const float* logits, int T, int E, int k, const float* bias, bool norm_topk_prob,
                         float routed_scaling_factor, int* idx, float* weights);

}  // namespace parity::kernels
