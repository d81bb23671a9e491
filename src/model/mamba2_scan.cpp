// The recurrent core of a Mamba2 layer for one sequence, in the two modes of DESIGN.md rules 7–8.
//
// Exact mode keeps, per slot, the fp32 state at the last chunk boundary b (a multiple of
// chunk_size), the rows b..pos-1 (x, dt, B) and the running fold of those rows. Every call — decode, prefill, a chunk of a split
// prefill, a recompute — scans from b: buffered rows are re-fed (they enter the sums, emit
// nothing), so every output row is the same function of (boundary state, rows of its chunk) that
// single-shot prefill computes. The fold is a forward recurrence, so decode advances the running
// fold by its one row (the cost of plain mode's SSU update) and a completed chunk's running fold
// becomes the new boundary state with the bits prefill's fold gives.
//
// Plain mode is vLLM's: the state after the last token in the cache dtype, SSD over the new
// tokens with the chunk grid restarting at the call's first token, SSU for one-token decode.
#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "kernels/math.h"
#include "kernels/ssd.h"
#include "model/mamba2_mixer.h"

namespace parity::model {

namespace {

void scan_sequence(const io::Mamba2Config& cfg, const Mamba2LayerWeights& L, int l, const SeqChunk& s,
                   const float* xbc, const float* dt_raw, float* y, cache::MambaStateCache& cache, ScanMode mode) {
  const int n = s.n, H = cfg.num_heads, I = cfg.intermediate_size, GN = cfg.n_groups * cfg.state_size;
  const int conv = cfg.conv_dim(), cs = cfg.chunk_size;
  const kernels::SsdShape shape{H, cfg.head_dim, cfg.n_groups, cfg.state_size, cs};
  const float lo = static_cast<float>(cfg.time_step_min_limit);
  const float hi = static_cast<float>(cfg.time_step_max_limit);

  // dt = clamp(softplus(dt_raw + dt_bias), time_step_limit). The original mamba_ssm clamps in
  // every path; HF's cached decode skips the clamp — parity follows the original.
  std::vector<float> dt(std::size_t(n) * H), x(std::size_t(n) * I), B(std::size_t(n) * GN), C(std::size_t(n) * GN);
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < H; ++h) {
      float v = kernels::softplus_f(dt_raw[std::size_t(t) * H + h] + L.dt_bias[h]);
      dt[std::size_t(t) * H + h] = std::min(std::max(v, lo), hi);
    }
    const float* row = xbc + std::size_t(t) * conv;
    std::memcpy(x.data() + std::size_t(t) * I, row, std::size_t(I) * 4);
    std::memcpy(B.data() + std::size_t(t) * GN, row + I, std::size_t(GN) * 4);
    std::memcpy(C.data() + std::size_t(t) * GN, row + I + GN, std::size_t(GN) * 4);
  }
  const std::size_t S = static_cast<std::size_t>(shape.state_elems());

  if (mode == ScanMode::Plain) {
    const bool f32 = cache.options().ssm_dtype == DType::F32;
    std::vector<float> tmp;
    float* state;
    if (f32) {
      state = cache.ssm_f32(l, s.slot);
    } else {
      tmp.resize(S);
      cache.load_ssm(l, s.slot, tmp.data());
      state = tmp.data();
    }
    if (n == 1 && s.start > 0) {
      kernels::ssu_step(shape, x.data(), dt.data(), L.A.data(), B.data(), C.data(), L.D.data(), state, y);
    } else {
      std::vector<float> s0(state, state + S);
      kernels::ssd_scan(shape, x.data(), dt.data(), L.A.data(), B.data(), C.data(), L.D.data(), n, 0, s0.data(), y,
                        nullptr, state);
    }
    if (!f32) cache.store_ssm(l, s.slot, state);
    return;
  }

  if (!cache.options().exact) throw Error("internal: exact-mode pass over a cache without replay rows");
  const int r = static_cast<int>(s.start % cs);  // rows already buffered since the boundary
  float* Sb = cache.ssm_f32(l, s.slot);
  float* R = cache.running(l, s.slot);  // fold of rows [boundary, start)
  float* bx = cache.replay_x(l, s.slot);
  float* bdt = cache.replay_dt(l, s.slot);
  float* bB = cache.replay_b(l, s.slot);
  const int total = r + n;
  if (total <= cs) {
    // Fits in the current chunk: append to the replay rows and scan them in place (the decode
    // path: no copy of the buffered rows), then advance the running fold by the new rows only.
    std::memcpy(bx + std::size_t(r) * I, x.data(), std::size_t(n) * I * 4);
    std::memcpy(bdt + std::size_t(r) * H, dt.data(), std::size_t(n) * H * 4);
    std::memcpy(bB + std::size_t(r) * GN, B.data(), std::size_t(n) * GN * 4);
    kernels::ssd_scan(shape, bx, bdt, L.A.data(), bB, C.data(), L.D.data(), total, r, Sb, y, nullptr, nullptr);
    if (r == 0) std::memcpy(R, Sb, S * 4);
    for (int t = 0; t < n; ++t)
      kernels::ssd_state_step(shape, x.data() + std::size_t(t) * I, dt.data() + std::size_t(t) * H, L.A.data(),
                              B.data() + std::size_t(t) * GN, R);
    if (total == cs) std::memcpy(Sb, R, S * 4);
    return;
  }
  std::vector<float> ax(std::size_t(total) * I), adt(std::size_t(total) * H), aB(std::size_t(total) * GN);
  std::memcpy(ax.data(), bx, std::size_t(r) * I * 4);
  std::memcpy(adt.data(), bdt, std::size_t(r) * H * 4);
  std::memcpy(aB.data(), bB, std::size_t(r) * GN * 4);
  std::memcpy(ax.data() + std::size_t(r) * I, x.data(), std::size_t(n) * I * 4);
  std::memcpy(adt.data() + std::size_t(r) * H, dt.data(), std::size_t(n) * H * 4);
  std::memcpy(aB.data() + std::size_t(r) * GN, B.data(), std::size_t(n) * GN * 4);
  const int full = total / cs;
  std::vector<float> states(std::size_t(full) * S);
  // The fold runs again over the re-fed rows from the boundary: the same recurrence the running
  // fold went through, so the chunk-end state has the bits decode would have reached.
  kernels::ssd_scan(shape, ax.data(), adt.data(), L.A.data(), aB.data(), C.data(), L.D.data(), total, r, Sb, y,
                    states.data(), R);
  std::memcpy(Sb, states.data() + std::size_t(full - 1) * S, S * 4);
  const int rem = total - full * cs;
  const std::size_t from = std::size_t(full) * cs;
  std::memcpy(bx, ax.data() + from * I, std::size_t(rem) * I * 4);
  std::memcpy(bdt, adt.data() + from * H, std::size_t(rem) * H * 4);
  std::memcpy(bB, aB.data() + from * GN, std::size_t(rem) * GN * 4);
}

}  // namespace

void mamba2_scan(const io::Mamba2Config& cfg, const Mamba2LayerWeights& w, int l, const std::vector<SeqChunk>& seqs,
                 const float* xbc, const float* dt_raw, float* y, cache::MambaStateCache& cache, ScanMode mode) {
  const int conv = cfg.conv_dim(), H = cfg.num_heads, I = cfg.intermediate_size;
  std::size_t row0 = 0;
  for (const SeqChunk& s : seqs) {
    scan_sequence(cfg, w, l, s, xbc + row0 * conv, dt_raw + row0 * H, y + row0 * I, cache, mode);
    row0 += static_cast<std::size_t>(s.n);
  }
}

}  // namespace parity::model
