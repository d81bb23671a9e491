#include "kernels/mamba_dt.h"

#include <cstddef>

#include "kernels/isa.h"
#include "kernels/rowops_internal.h"

namespace parity::kernels {

// One row at a time through the vector twins: the scalar softplus ran each of its FMAs through a
// call to libm's fmaf (baseline x86-64 code has no FMA instruction), ~10 ms of a 512-token prefill
// of mamba2-130m on one thread (perf, session 18).
void mamba_dt(const float* raw, int rows, int heads, int ld_raw, const float* bias, float lo, float hi, float* out) {
  const detail::RowOps& ops = detail::row_ops(active_isa());
  for (int t = 0; t < rows; ++t)
    ops.dt_row(raw + std::size_t(t) * ld_raw, bias, heads, lo, hi, out + std::size_t(t) * heads);
}

}  // namespace parity::kernels
