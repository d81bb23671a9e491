#include "model/mamba2_mixer.h"

#include <cstring>

#include "kernels/conv1d.h"
#include "kernels/gemm.h"
#include "kernels/math.h"
#include "kernels/norm.h"
#include "model/workspace.h"

namespace parity::model {

void mamba2_mixer_forward(const io::Mamba2Config& cfg, const Mamba2LayerWeights& L, int cache_layer,
                          const ForwardBatch& b, const float* x, float* out, cache::MambaStateCache& cache,
                          ScanMode mode, const MixerProbeNames& N, ProbeHooks* hooks, const ProbeRows& meta,
                          const float* in_proj_scale) {
  const int T = static_cast<int>(b.tokens.size());
  const int D = cfg.hidden_size, I = cfg.intermediate_size, H = cfg.num_heads;
  const int conv = cfg.conv_dim(), proj = cfg.in_proj_dim(), K = cfg.conv_kernel;
  const float eps = static_cast<float>(cfg.layer_norm_epsilon);
  const int group = I / cfg.n_groups;
  auto probe = [&](const std::string& name, float* data, int cols) {
    if (hooks && hooks->wants(name)) hooks->visit(name, data, T, cols, meta);
  };

  const std::size_t rows = static_cast<std::size_t>(T);
  float* zx = scratch(Scratch::InProj, rows * proj);
  float* xbc = scratch(Scratch::Xbc, rows * conv);
  float* dt_raw = scratch(Scratch::DtRaw, rows * H);
  float* y = scratch(Scratch::Y, rows * I);
  float* g = scratch(Scratch::Gated, rows * I);
  kernels::gemm(x, T, D, L.in_proj, L.in_proj_bias.empty() ? nullptr : L.in_proj_bias.data(), zx, proj);
  probe(N.in_proj, zx, proj);
  if (in_proj_scale)  // HF: in_proj(x) * mup_vector, after the module's output
    for (std::size_t t = 0; t < rows; ++t)
      for (int c = 0; c < proj; ++c) zx[t * proj + c] = zx[t * proj + c] * in_proj_scale[c];
  // in_proj output columns: [z | xBC | dt]. z and xBC are read in place (row stride proj) by the
  // gated norm and the conv; dt, 24 columns, is gathered into rows of its own for the scan.
  const float* z = zx;
  const float* xbc_in = zx + I;
  for (int t = 0; t < T; ++t)
    std::memcpy(dt_raw + std::size_t(t) * H, zx + std::size_t(t) * proj + I + conv, std::size_t(H) * 4);
  probe(N.dt, dt_raw, H);
  // HF's conv1d module output is before SiLU; when it is probed, SiLU runs as a second pass
  // (silu_f of the same value: the same bits as the fused kernel).
  const bool probe_conv = hooks && hooks->wants(N.conv1d);
  int row0 = 0;
  for (const SeqChunk& s : b.seqs) {
    kernels::conv1d_causal_taps(xbc_in + std::size_t(row0) * proj, s.n, conv, L.conv_taps.data(),
                           L.conv_b.empty() ? nullptr : L.conv_b.data(), K, cache.conv_state(cache_layer, s.slot),
                           !probe_conv, xbc + std::size_t(row0) * conv, proj);
    row0 += s.n;
  }
  if (probe_conv) {
    hooks->visit(N.conv1d, xbc, T, conv, meta);
    for (std::size_t i = 0; i < rows * conv; ++i) xbc[i] = kernels::silu_f(xbc[i]);
  }
  mamba2_scan(cfg, L, cache_layer, b.seqs, xbc, dt_raw, y, cache, mode);
  if (cfg.rms_norm) {
    kernels::gated_rmsnorm(y, z, T, I, group, L.gate_norm.data(), eps, cfg.norm_before_gate, g, proj);
    probe(N.norm, g, I);
  } else {
    for (std::size_t t = 0; t < rows; ++t)
      for (int i = 0; i < I; ++i) g[t * I + i] = y[t * I + i] * kernels::silu_f(z[t * proj + i]);
  }
  kernels::gemm(g, T, I, L.out_proj, L.out_proj_bias.empty() ? nullptr : L.out_proj_bias.data(), out, D);
}

}  // namespace parity::model
