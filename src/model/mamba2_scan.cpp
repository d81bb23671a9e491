// The recurrent core of the Mamba2 layers, in the two modes of DESIGN.md rules 7–8.
//
// Exact mode keeps, per slot, the fp32 state at the last chunk boundary b (a multiple of
// chunk_size), the rows b..pos-1 (x, dt, B) and the running fold of those rows. Every output row
// is the same function of (boundary state, rows of its chunk) that single-shot prefill computes:
//  - decode (one new token) takes the fast path: the token's row is appended to the replay rows
//    and kernels::ssd_decode_rows computes the rows of every such sequence of the pass in one
//    parallel region, reading the replay rows in place. Each head's rows since its last fold
//    enter its running fold in groups of kDecodeFoldGroup, on steps staggered across the heads
//    (decode_fold, mamba2_mixer.h), and at the chunk's last row. A group moves the running state
//    through memory once rather than once per token; staggering spreads the groups' arithmetic
//    (two operations per state element per row) over the steps instead of piling it on every
//    16th. The fold's per-element sequence is the same in any grouping (ssd.h), so the bits do
//    not depend on it;
//  - a call of several tokens (prefill, a chunk of a split prefill, a recompute) re-feeds the buffered rows: they enter the sums and emit nothing,
//    and the fold re-runs over them from the boundary — the same forward recurrence the running
//    fold went through, so every state has the bits decode would have reached.
// A completed chunk's fold becomes the new boundary state.
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

// dt = clamp(softplus(dt_raw + dt_bias), time_step_limit). The original mamba_ssm clamps in every
// path; HF's cached decode skips the clamp — parity follows the original.
void process_dt(const io::Mamba2Config& cfg, const Mamba2LayerWeights& L, const float* dt_raw, int n, float* dt) {
  const float lo = static_cast<float>(cfg.time_step_min_limit);
  const float hi = static_cast<float>(cfg.time_step_max_limit);
  const int H = cfg.num_heads;
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < H; ++h) {
      const float v = kernels::softplus_f(dt_raw[std::size_t(t) * H + h] + L.dt_bias[h]);
      dt[std::size_t(t) * H + h] = std::min(std::max(v, lo), hi);
    }
}

// x | B | C column blocks of n conv-output rows into three row-major arrays.
void split_xbc(const ScanShape& z, const float* xbc, int n, float* x, float* B, float* C) {
  for (int t = 0; t < n; ++t) {
    const float* row = xbc + std::size_t(t) * z.conv;
    if (x) std::memcpy(x + std::size_t(t) * z.I, row, std::size_t(z.I) * 4);
    if (B) std::memcpy(B + std::size_t(t) * z.GN, row + z.I, std::size_t(z.GN) * 4);
    if (C) std::memcpy(C + std::size_t(t) * z.GN, row + z.I + z.GN, std::size_t(z.GN) * 4);
  }
}

// Replay x is head-major (mamba_state_cache.h); these move rows between it and row-major arrays.
void put_replay_x(const ScanShape& z, float* bx, int first_row, const float* x, int n) {
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < z.H; ++h)
      std::memcpy(bx + (std::size_t(h) * z.cs + first_row + t) * z.P, x + std::size_t(t) * z.I + std::size_t(h) * z.P,
                  std::size_t(z.P) * 4);
}
void get_replay_x(const ScanShape& z, const float* bx, int n, float* x) {
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < z.H; ++h)
      std::memcpy(x + std::size_t(t) * z.I + std::size_t(h) * z.P, bx + (std::size_t(h) * z.cs + t) * z.P,
                  std::size_t(z.P) * 4);
}

void scan_plain(const io::Mamba2Config& cfg, const Mamba2LayerWeights& L, int l, const SeqChunk& s, const float* xbc,
                const float* dt_raw, float* y, cache::MambaStateCache& cache) {
  const ScanShape z = shape_of(cfg);
  const int n = s.n;
  std::vector<float> dt(std::size_t(n) * z.H), x(std::size_t(n) * z.I), B(std::size_t(n) * z.GN),
      C(std::size_t(n) * z.GN);
  process_dt(cfg, L, dt_raw, n, dt.data());
  split_xbc(z, xbc, n, x.data(), B.data(), C.data());
  const bool f32 = cache.options().ssm_dtype == DType::F32;
  if (!f32 && n == 1 && s.start > 0) {  // vLLM's decode: the bf16 state updated in place
    kernels::ssu_step_bf16(z.ssd, x.data(), dt.data(), L.A.data(), B.data(), C.data(), L.D.data(),
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
    kernels::ssu_step(z.ssd, x.data(), dt.data(), L.A.data(), B.data(), C.data(), L.D.data(), state, y);
  } else {
    std::vector<float> s0(state, state + z.S);
    kernels::ssd_scan(z.ssd, x.data(), dt.data(), L.A.data(), B.data(), C.data(), L.D.data(), n, 0, s0.data(), y,
                      nullptr, state);
  }
  if (!f32) cache.store_ssm(l, s.slot, state);
}

// Exact mode, any call but a one-token decode: re-feed the buffered rows and scan from the boundary.
void scan_exact_refeed(const io::Mamba2Config& cfg, const Mamba2LayerWeights& L, int l, const SeqChunk& s,
                       const float* xbc, const float* dt_raw, float* y, cache::MambaStateCache& cache) {
  const ScanShape z = shape_of(cfg);
  const int n = s.n, r = static_cast<int>(s.start % z.cs), total = r + n;
  float* Sb = cache.ssm_f32(l, s.slot);
  float* R = cache.running(l, s.slot);
  float* bx = cache.replay_x(l, s.slot);
  float* bdt = cache.replay_dt(l, s.slot);
  float* bB = cache.replay_b(l, s.slot);
  std::vector<float> ax(std::size_t(total) * z.I), adt(std::size_t(total) * z.H), aB(std::size_t(total) * z.GN),
      C(std::size_t(n) * z.GN);
  get_replay_x(z, bx, r, ax.data());
  std::memcpy(adt.data(), bdt, std::size_t(r) * z.H * 4);
  std::memcpy(aB.data(), bB, std::size_t(r) * z.GN * 4);
  split_xbc(z, xbc, n, ax.data() + std::size_t(r) * z.I, aB.data() + std::size_t(r) * z.GN, C.data());
  process_dt(cfg, L, dt_raw, n, adt.data() + std::size_t(r) * z.H);
  const int full = total / z.cs;
  std::vector<float> states(std::size_t(full) * z.S);
  kernels::ssd_scan(z.ssd, ax.data(), adt.data(), L.A.data(), aB.data(), C.data(), L.D.data(), total, r, Sb, y,
                    full ? states.data() : nullptr, R);
  if (full) std::memcpy(Sb, states.data() + std::size_t(full - 1) * z.S, z.S * 4);
  const int rem = total - full * z.cs;
  cache.running_rows(l, s.slot) = rem;
  const std::size_t from = std::size_t(full) * z.cs;
  put_replay_x(z, bx, 0, ax.data() + from * z.I, rem);
  std::memcpy(bdt, adt.data() + from * z.H, std::size_t(rem) * z.H * 4);
  std::memcpy(bB, aB.data() + from * z.GN, std::size_t(rem) * z.GN * 4);
}

}  // namespace

void mamba2_scan(const io::Mamba2Config& cfg, const Mamba2LayerWeights& w, int l, const std::vector<SeqChunk>& seqs,
                 const float* xbc, const float* dt_raw, float* y, cache::MambaStateCache& cache, ScanMode mode) {
  const ScanShape z = shape_of(cfg);
  if (mode == ScanMode::Exact && !cache.options().exact)
    throw Error("internal: exact-mode pass over a cache without replay rows");
  std::vector<kernels::SsdDecodeRow> decodes;
  std::vector<int> fold_rows;  // per decode: [H] first row to fold, then [H] fold_to (decode_fold)
  fold_rows.reserve(seqs.size() * 2 * std::size_t(z.H));
  std::size_t row0 = 0;
  for (const SeqChunk& s : seqs) {
    const float* sx = xbc + row0 * z.conv;
    const float* sdt = dt_raw + row0 * z.H;
    float* sy = y + row0 * z.I;
    if (mode == ScanMode::Plain) {
      scan_plain(cfg, w, l, s, sx, sdt, sy, cache);
    } else if (s.n == 1) {
      // Decode: append the row to the replay buffers; the batched kernel below reads them in place.
      const int t = static_cast<int>(s.start % z.cs);
      float* bx = cache.replay_x(l, s.slot);
      float* bdt = cache.replay_dt(l, s.slot);
      float* bB = cache.replay_b(l, s.slot);
      put_replay_x(z, bx, t, sx, 1);
      process_dt(cfg, w, sdt, 1, bdt + std::size_t(t) * z.H);
      std::memcpy(bB + std::size_t(t) * z.GN, sx + z.I, std::size_t(z.GN) * 4);
      kernels::SsdDecodeRow d;
      d.t = t;
      d.x = bx;
      d.dt = bdt;
      d.B = bB;
      d.C = sx + z.I + z.GN;
      float* Sb = cache.ssm_f32(l, s.slot);
      d.boundary = Sb;
      d.running = cache.running(l, s.slot);
      int& base = cache.running_rows(l, s.slot);
      const std::size_t at = fold_rows.size();
      fold_rows.resize(at + 2 * std::size_t(z.H));
      for (int h = 0; h < z.H; ++h) {
        const DecodeFold f = decode_fold(h, t, base, z.cs);
        fold_rows[at + h] = f.from;
        fold_rows[at + z.H + h] = f.to;
      }
      if (t == z.cs - 1) {  // the chunk completes: its fold is the next boundary state
        d.fold_dst = Sb;
        base = 0;
      }
      d.y = sy;
      decodes.push_back(d);
    } else {
      scan_exact_refeed(cfg, w, l, s, sx, sdt, sy, cache);
    }
    row0 += static_cast<std::size_t>(s.n);
  }
  // The per-head ranges live in one vector, complete only now; point the rows into it.
  for (std::size_t i = 0; i < decodes.size(); ++i) {
    decodes[i].head_folded = fold_rows.data() + 2 * i * std::size_t(z.H);
    decodes[i].head_fold_to = decodes[i].head_folded + z.H;
  }
  if (!decodes.empty())
    kernels::ssd_decode_rows(z.ssd, w.A.data(), w.D.data(), decodes.data(), static_cast<int>(decodes.size()));
}

}  // namespace parity::model
