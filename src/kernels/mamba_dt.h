#pragma once
// Mamba2's time step from in_proj's dt columns: dt = clamp(softplus(dt_raw + dt_bias),
// time_step_limit). The original mamba_ssm clamps in every path (HF's cached decode skips it;
// parity follows the original). Every instruction set gives softplus_f's bits (math.h).
namespace parity::kernels {

// rows × heads values: raw [rows][ld_raw] (heads used), out [rows][heads].
void mamba_dt(const float* raw, int rows, int heads, int ld_raw, const float* bias, float lo, float hi, float* out);

}  // namespace parity::kernels
