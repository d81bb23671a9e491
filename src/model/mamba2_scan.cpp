// The recurrent core of the Mamba2 layers, in the two modes of DESIGN.md rules 7–8.
//
// Exact mode keeps, per slot, each head's state at its last boundary of the exact grid (in the
// cache dtype) and a ring of the last `cell` positions' x, dt and B (kernels/ssd_grid.h). Every
// output row is the same function of (boundary state, rows of its cell) that single-shot prefill
// computes:
//  - decode (one new token) puts the token's row in the ring, and kernels::ssd_grid_decode
//    computes the rows of every decoding sequence of the pass in one parallel region; a head
//    whose cell ends at the token folds the cell into its boundary state. With the stagger, that
//    is ~H/cell heads per step, so every step costs about the same;
//  - a call of several tokens (prefill, a chunk of a split prefill, a recompute) re-feeds each
//    head's rows since its boundary from the ring: they enter the sums and emit nothing.
//
// Plain mode is vLLM's: the state after the last token in the cache dtype, SSD over the new
// tokens with the chunk grid restarting at the call's first token, SSU for one-token decode.
#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "kernels/mamba_dt.h"
#include "kernels/math.h"
#include "kernels/ssd.h"
#include "kernels/ssd_grid.h"
#include "model/mamba2_mixer.h"
#include "model/workspace.h"

namespace parity::model {
namespace {

struct ScanShape {
  int H, P, I, GN, conv, cs;
  kernels::SsdShape ssd;
  std::size_t S;  // state floats
};

ScanShape shape_of(const io::Mamba2Config& cfg) {
  ScanShape s{};
  s.H = cfg.num_heads;
  s.P = cfg.head_dim;
  s.I = cfg.intermediate_size;
  s.GN = cfg.n_groups * cfg.state_size;
  s.conv = cfg.conv_dim();
  s.cs = cfg.chunk_size;
  s.ssd = {s.H, s.P, cfg.n_groups, cfg.state_size, s.cs};
  s.S = static_cast<std::size_t>(s.ssd.state_elems());
  return s;
}

// dt = clamp(softplus(dt_raw + dt_bias), time_step_limit) (kernels/mamba_dt.h).
void process_dt(const io::Mamba2Config& cfg, const Mamba2LayerWeights& L, const float* dt_raw, int n, float* dt) {
  kernels::mamba_dt(dt_raw, n, cfg.num_heads, cfg.num_heads, L.dt_bias.data(),
                    static_cast<float>(cfg.time_step_min_limit), static_cast<float>(cfg.time_step_max_limit), dt);
}

// x | B | C column blocks of n conv-output rows into three row-major arrays (x may be null: the
// scans read it in place, with the conv output's row stride).
void split_xbc(const ScanShape& z, const float* xbc, int n, float* x, float* B, float* C) {
  for (int t = 0; t < n; ++t) {
    const float* row = xbc + std::size_t(t) * z.conv;
    if (x) std::memcpy(x + std::size_t(t) * z.I, row, std::size_t(z.I) * 4);
    if (B) std::memcpy(B + std::size_t(t) * z.GN, row + z.I, std::size_t(z.GN) * 4);
    if (C) std::memcpy(C + std::size_t(t) * z.GN, row + z.I + z.GN, std::size_t(z.GN) * 4);
  }
}

void scan_plain(const io::Mamba2Config& cfg, const Mamba2LayerWeights& L, int l, const SeqChunk& s, const float* xbc,
                const float* dt_raw, float* y, cache::MambaStateCache& cache) {
  const ScanShape z = shape_of(cfg);
  const int n = s.n;
  const std::size_t rows = static_cast<std::size_t>(n);
  float* dt = scratch(Scratch::ScanDt, rows * z.H);
  float* B = scratch(Scratch::ScanB, rows * z.GN);
  float* C = scratch(Scratch::ScanC, rows * z.GN);
  process_dt(cfg, L, dt_raw, n, dt);
  // x stays in the conv output (its rows are z.conv apart); B and C, read by every head of their
  // group, are gathered into rows of their own.
  const float* x = xbc;
  split_xbc(z, xbc, n, nullptr, B, C);
  const bool f32 = cache.options().ssm_dtype == DType::F32;
  if (!f32 && n == 1 && s.start > 0) {  // vLLM's decode: the bf16 state updated in place
    kernels::ssu_step_bf16(z.ssd, x, dt, L.A.data(), B, C, L.D.data(),
                           cache.ssm_bf16(l, s.slot), y);
    return;
  }
  std::vector<float> tmp;
  float* state;
  if (f32) {
    state = cache.ssm_f32(l, s.slot);
  } else {
    tmp.resize(z.S);
    cache.load_ssm(l, s.slot, tmp.data());
    state = tmp.data();
  }
  if (n == 1 && s.start > 0) {
    kernels::ssu_step(z.ssd, x, dt, L.A.data(), B, C, L.D.data(), state, y);
  } else {
    std::vector<float> s0(state, state + z.S);
    kernels::ssd_scan(z.ssd, x, dt, L.A.data(), B, C, L.D.data(), n, 0, s0.data(), y,
                      nullptr, state, z.conv);
  }
  if (!f32) cache.store_ssm(l, s.slot, state);
}

// Exact mode, any call but a one-token decode: re-feed the rows of every head's current cell from
// the ring, scan on the exact grid, and keep the call's last rows in the ring.
void scan_exact_refeed(const io::Mamba2Config& cfg, const Mamba2LayerWeights& L, int l, const SeqChunk& s,
                       const float* xbc, const float* dt_raw, float* y, cache::MambaStateCache& cache) {
  const ScanShape z = shape_of(cfg);
  const kernels::ExactGrid& grid = cache.grid();
  const kernels::ReplayRing ring = cache.ring(l, s.slot);
  const int n = s.n, r = kernels::grid_refeed_rows(grid, z.H, s.start), total = r + n;
  const int64_t pos0 = s.start - r;
  const std::size_t all = static_cast<std::size_t>(total);
  float* adt = scratch(Scratch::ScanDt, all * z.H);
  float* aB = scratch(Scratch::ScanB, all * z.GN);
  float* C = scratch(Scratch::ScanC, std::size_t(n) * z.GN);
  // With nothing to re-feed (a call from position 0, or one that starts on every head's boundary)
  // x is read in place from the conv output; otherwise the ring's rows and the call's are gathered
  // into one array.
  float* gathered = r > 0 ? scratch(Scratch::ScanX, all * z.I) : nullptr;
  for (int i = 0; i < r; ++i)
    kernels::ring_get(z.ssd, grid, ring, pos0 + i, gathered + std::size_t(i) * z.I, adt + std::size_t(i) * z.H,
                      aB + std::size_t(i) * z.GN);
  const float* ax = gathered ? gathered : xbc;
  const int64_t ldx = gathered ? z.I : z.conv;
  split_xbc(z, xbc, n, gathered ? gathered + std::size_t(r) * z.I : nullptr, aB + std::size_t(r) * z.GN, C);
  process_dt(cfg, L, dt_raw, n, adt + std::size_t(r) * z.H);
  kernels::ssd_scan_grid(z.ssd, grid, ax, adt, L.A.data(), aB, C, L.D.data(), pos0, total,
                         r, cache.grid_state(l, s.slot), y, ldx);
  // The ring already holds the positions before s.start; add the call's last `cell` ones.
  const int64_t end = s.start + n;
  for (int64_t p = std::max(s.start, end - grid.cell); p < end; ++p) {
    const std::size_t i = static_cast<std::size_t>(p - pos0);
    kernels::ring_put(z.ssd, grid, ring, p, ax + i * std::size_t(ldx), adt + i * z.H, aB + i * z.GN);
  }
}

}  // namespace

void mamba2_scan(const io::Mamba2Config& cfg, const Mamba2LayerWeights& w, int l, const std::vector<SeqChunk>& seqs,
                 const float* xbc, const float* dt_raw, float* y, cache::MambaStateCache& cache, ScanMode mode) {
  const ScanShape z = shape_of(cfg);
  if (mode == ScanMode::Exact && !cache.options().exact)
    throw Error("internal: exact-mode pass over a cache without replay rows");
  std::vector<kernels::GridDecodeRow> decodes;
  std::vector<float> dt_row(static_cast<std::size_t>(z.H));
  std::size_t row0 = 0;
  for (const SeqChunk& s : seqs) {
    const float* sx = xbc + row0 * z.conv;
    const float* sdt = dt_raw + row0 * z.H;
    float* sy = y + row0 * z.I;
    if (mode == ScanMode::Plain) {
      scan_plain(cfg, w, l, s, sx, sdt, sy, cache);
    } else if (s.n == 1) {
      // Decode: put the row in the ring; the batched kernel below reads every head's cell from it.
      const kernels::ReplayRing ring = cache.ring(l, s.slot);
      process_dt(cfg, w, sdt, 1, dt_row.data());
      kernels::ring_put(z.ssd, cache.grid(), ring, s.start, sx, dt_row.data(), sx + z.I);
      kernels::GridDecodeRow d;
      d.pos = s.start;
      d.x_ring = ring.x;
      d.dt_ring = ring.dt;
      d.b_ring = ring.B;
      d.C = sx + z.I + z.GN;
      d.state = cache.grid_state(l, s.slot);
      d.y = sy;
      decodes.push_back(d);
    } else {
      scan_exact_refeed(cfg, w, l, s, sx, sdt, sy, cache);
    }
    row0 += static_cast<std::size_t>(s.n);
  }
  if (!decodes.empty())
    kernels::ssd_grid_decode(z.ssd, cache.grid(), w.A.data(), w.D.data(), decodes.data(),
                             static_cast<int>(decodes.size()));
}

}  // namespace parity::model
