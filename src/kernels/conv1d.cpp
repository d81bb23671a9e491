// Causal depthwise conv1d. Every output row, in prefill or decode, goes through one row routine
// (detail::RowOps::conv_row) with the window given as k row pointers, so the multi-row call and
// the one-token update run the same arithmetic on the same inputs.
#include "kernels/conv1d.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/isa.h"
#include "kernels/math.h"
#include "kernels/prefetch.h"
#include "kernels/rowops_internal.h"

namespace parity::kernels {

namespace detail {

void conv_row_portable(const float* const* win, int k, int ch, const float* wt, const float* bias, bool silu,
                       float* out) {
  for (int c = 0; c < ch; ++c) {
    float acc = bias ? bias[c] : 0.0f;
    for (int j = 0; j < k; ++j) acc = std::fma(wt[static_cast<std::size_t>(j) * ch + c], win[j][c], acc);
    out[c] = silu ? silu_f(acc) : acc;
  }
}

}  // namespace detail

namespace {

constexpr int kMaxK = 64;
// How far ahead the conv asks for its input rows: 4 measured best of 2 and 4 (ModelPrefill/n:512).
constexpr int kConvRowsAhead = 4;

}  // namespace

std::vector<float> conv1d_taps(const float* w, int ch, int k) {
  std::vector<float> taps(static_cast<std::size_t>(k) * ch);
  for (int c = 0; c < ch; ++c) {
    for (int j = 0; j < k; ++j) taps[static_cast<std::size_t>(j) * ch + c] = w[static_cast<std::size_t>(c) * k + j];
  }
  return taps;
}

void conv1d_causal(const float* in, int n, int ch, const float* w, const float* bias, int k, float* state,
                   bool apply_silu, float* out, int ld_in) {
  if (k < 1 || k > kMaxK) throw Error("conv1d: kernel size " + std::to_string(k) + " outside 1.." + std::to_string(kMaxK));
  if (n <= 0 || ch <= 0) return;
  const std::vector<float> taps = conv1d_taps(w, ch, k);
  conv1d_causal_taps(in, n, ch, taps.data(), bias, k, state, apply_silu, out, ld_in);
}

void conv1d_causal_taps(const float* in, int n, int ch, const float* taps, const float* bias, int k, float* state,
                        bool apply_silu, float* out, int ld_in) {
  const std::size_t ld = ld_in > 0 ? static_cast<std::size_t>(ld_in) : static_cast<std::size_t>(ch);
  if (k < 1 || k > kMaxK) throw Error("conv1d: kernel size " + std::to_string(k) + " outside 1.." + std::to_string(kMaxK));
  if (n <= 0 || ch <= 0) return;
  const detail::RowOps& ops = detail::row_ops(active_isa());

  // Row r of [state; in] (state has k-1 rows).
  auto row = [&](int r) -> const float* {
    return r < k - 1 ? state + static_cast<std::size_t>(r) * ch : in + static_cast<std::size_t>(r - (k - 1)) * ld;
  };
  const bool threads = n > 1 && (force_parallel() || static_cast<long long>(n) * ch * k >= (1 << 18));
#pragma omp parallel for schedule(static) num_threads(num_threads()) if (threads)
  for (int t = 0; t < n; ++t) {
    const float* win[kMaxK];
    for (int j = 0; j < k; ++j) win[j] = row(t + j);
    // The window's new row arrives kConvRowsAhead rows later (see prefetch.h).
    if (t + kConvRowsAhead < n) prefetch_row(row(t + k - 1 + kConvRowsAhead), std::size_t(ch) * 4);
    ops.conv_row(win, k, ch, taps, bias, apply_silu, out + static_cast<std::size_t>(t) * ch);
  }

  // The new state is rows n .. n+k-2 of [state; in]. Increasing s reads rows at or after the one
  // it writes, so shifting the old state in place is safe.
  for (int s = 0; s < k - 1; ++s) {
    const float* src = row(n + s);
    float* dst = state + static_cast<std::size_t>(s) * ch;
    if (src != dst) std::memmove(dst, src, static_cast<std::size_t>(ch) * sizeof(float));
  }
}

void conv1d_update(const float* in_row, int ch, const float* w, const float* bias, int k, float* state,
                   bool apply_silu, float* out_row) {
  conv1d_causal(in_row, 1, ch, w, bias, k, state, apply_silu, out_row);
}

}  // namespace parity::kernels
