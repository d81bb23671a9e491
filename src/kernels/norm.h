#pragma once
// Row-wise normalisations. Each row's sum of squares is reduced in one fixed order (a fixed lane
// count and combine tree, identical in scalar and SIMD code), so a row's bits do not depend on
// which other rows are present.
namespace parity::kernels {

// out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w. out may alias x.
void rmsnorm(const float* x, int rows, int dim, const float* w, float eps, float* out);

// Mamba2 gated RMSNorm over `dim` = intermediate size, normalised per group of `group_size`
// columns (the original mamba_ssm semantics; HF normalises the whole width when n_groups > 1).
//   norm_before_gate=false: out = rmsnorm_g(y * silu(z)) * w
//   norm_before_gate=true:  out = rmsnorm_g(y) * w * silu(z)
// `ld_z`: the row stride of z when it is a column range of a wider matrix (0: dim).
void gated_rmsnorm(const float* y, const float* z, int rows, int dim, int group_size, const float* w,
                   float eps, bool norm_before_gate, float* out, int ld_z = 0);

}  // namespace parity::kernels
