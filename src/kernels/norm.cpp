// RMSNorm and Mamba2's gated RMSNorm.
//
// The one reduction order (DESIGN.md rule 1), for a run x[0..n) of a row:
//   16 lane partials p[j] = 0; for every full block b: p[j] = fma(x[16b+j], x[16b+j], p[j]);
//   then p[j] += p[j+8] (j < 8), p[j] += p[j+4] (j < 4), p[j] += p[j+2] (j < 2), s = p[0] + p[1];
//   then the n % 16 tail elements in order: s = fma(x[t], x[t], s).
// Then, in this order: mean = s / n; r = 1.0f / sqrt(mean + eps); out = (x * r) * w.
// Gated (per group of group_size columns, the reduction restarting at each group):
//   norm_before_gate = false: g = y * silu_f(z); out = (g * r(g)) * w
//   norm_before_gate = true:  out = ((y * r(y)) * w) * silu_f(z)
// The scalar code below is the definition; the AVX2/AVX-512 row operations emulate it exactly.
#include "kernels/norm.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "kernels/isa.h"
#include "kernels/math.h"
#include "kernels/prefetch.h"
#include "kernels/rowops_internal.h"

namespace parity::kernels {

namespace detail {
namespace {

float sumsq(const float* x, int n) {
  float p[16] = {};
  const int nb = n / 16;
  for (int b = 0; b < nb; ++b) {
    for (int j = 0; j < 16; ++j) p[j] = std::fma(x[16 * b + j], x[16 * b + j], p[j]);
  }
  for (int w = 8; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) p[j] = p[j] + p[j + w];
  }
  float s = p[0];
  for (int t = nb * 16; t < n; ++t) s = std::fma(x[t], x[t], s);
  return s;
}

void scale(const float* x, float r, const float* w, int n, float* out) {
  for (int i = 0; i < n; ++i) out[i] = (x[i] * r) * w[i];
}

void gate_mul(const float* y, const float* z, int n, float* out) {
  for (int i = 0; i < n; ++i) out[i] = y[i] * silu_f(z[i]);
}

void scale_gate(const float* y, float r, const float* w, const float* z, int n, float* out) {
  for (int i = 0; i < n; ++i) out[i] = ((y[i] * r) * w[i]) * silu_f(z[i]);
}

void dt_row(const float* raw, const float* bias, int n, float lo, float hi, float* out) {
  for (int i = 0; i < n; ++i) out[i] = std::min(std::max(softplus_f(raw[i] + bias[i]), lo), hi);
}

void exp_array(const float* x, int n, float* y) {
  for (int i = 0; i < n; ++i) y[i] = exp_f(x[i]);
}

void silu_array(const float* x, int n, float* y) {
  for (int i = 0; i < n; ++i) y[i] = silu_f(x[i]);
}

}  // namespace

extern const RowOps kRowOpsPortable = {sumsq,  scale,     gate_mul,  scale_gate, conv_row_portable,
                                       dt_row, exp_array, silu_array};

}  // namespace detail

namespace {

// Shared by every instruction set, so the scalar tail of the formula cannot differ between them.
float inv_rms(float sumsq, int n, float eps) { return 1.0f / std::sqrt(sumsq / static_cast<float>(n) + eps); }

// Rows are independent; a team is worth starting only for a few hundred thousand elements.
bool worth_threads(int rows, int dim) {
  return rows > 1 && (force_parallel() || static_cast<long long>(rows) * dim >= (1 << 18));
}

}  // namespace

void rmsnorm(const float* x, int rows, int dim, const float* w, float eps, float* out) {
  if (rows <= 0 || dim <= 0) return;
  const detail::RowOps& ops = detail::row_ops(active_isa());
#pragma omp parallel for schedule(static) num_threads(num_threads()) if (worth_threads(rows, dim))
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<std::size_t>(r) * dim;
    float* o = out + static_cast<std::size_t>(r) * dim;
    ops.scale(xr, inv_rms(ops.sumsq(xr, dim), dim, eps), w, dim, o);
  }
}

// How far ahead the gated norm asks for its y and z rows.
constexpr int kNormRowsAhead = 2;

void gated_rmsnorm(const float* y, const float* z, int rows, int dim, int group_size, const float* w, float eps,
                   bool norm_before_gate, float* out, int ld_z) {
  const std::size_t ldz = ld_z > 0 ? static_cast<std::size_t>(ld_z) : static_cast<std::size_t>(dim);
  if (rows <= 0 || dim <= 0) return;
  if (group_size <= 0 || dim % group_size != 0) {
    throw Error("gated_rmsnorm: group size " + std::to_string(group_size) + " does not divide width " +
                std::to_string(dim));
  }
  const detail::RowOps& ops = detail::row_ops(active_isa());
  const int groups = dim / group_size;
#pragma omp parallel for schedule(static) num_threads(num_threads()) if (worth_threads(rows, dim))
  for (int r = 0; r < rows; ++r) {
    if (r + kNormRowsAhead < rows) {  // see prefetch.h
      prefetch_row(y + std::size_t(r + kNormRowsAhead) * dim, std::size_t(dim) * 4);
      prefetch_row(z + std::size_t(r + kNormRowsAhead) * ldz, std::size_t(dim) * 4);
    }
    for (int g = 0; g < groups; ++g) {
      const std::size_t off = static_cast<std::size_t>(r) * dim + static_cast<std::size_t>(g) * group_size;
      const float* wg = w + static_cast<std::size_t>(g) * group_size;
      const float* zg = z + static_cast<std::size_t>(r) * ldz + static_cast<std::size_t>(g) * group_size;
      float* o = out + off;
      if (norm_before_gate) {
        const float rr = inv_rms(ops.sumsq(y + off, group_size), group_size, eps);
        ops.scale_gate(y + off, rr, wg, zg, group_size, o);
      } else {
        ops.gate_mul(y + off, zg, group_size, o);  // element-wise, so out may alias y or z
        ops.scale(o, inv_rms(ops.sumsq(o, group_size), group_size, eps), wg, group_size, o);
      }
    }
  }
}

}  // namespace parity::kernels
