#pragma once
// Private to the MoE files: the per-ISA SwiGLU rows that moe.cpp dispatches to. Each evaluates
// out[i] = silu_f(g[i]) * u[i] with silu_f's exact op sequence lane by lane.
namespace parity::kernels::moe_detail {

// One row: g, u and out hold F floats.
void swiglu_row_avx512(const float* g, const float* u, int F, float* out);
void swiglu_row_avx2(const float* g, const float* u, int F, float* out);

}  // namespace parity::kernels::moe_detail
